"""The cost-aware controller as a drafter: each step it asks the n-gram index and the
store of earlier outputs and weighs the draft model and the target's trained heads, then
drafts with the (drafter, k) of highest expected tokens per second, or not at all (k = 0)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specli.drafters.auto.costs import CostModel
from specli.drafters.auto.policy import AcceptanceStats, Choice, Ledger, choose
from specli.drafters.auto.split import expected_gains
from specli.drafters.cross_vocab import CrossVocabDrafter
from specli.drafters.draft_model import DraftModelDrafter
from specli.drafters.heads import LearnedDrafter
from specli.drafters.ngram import PREDICTION, NgramDrafter
from specli.drafters.suffix import SuffixDrafter
from specli.engine.grammar import Constraint
from specli.types import Draft, Drafter

FIRST_PROBE = 8  # steps before the first probe of a drafter not chosen
OPTIMISTIC_ACCEPTANCE = 0.95
PAYBACK_TOKENS = 128  # a draft model's catch-up must pay for itself within this many tokens
MAX_INTERVAL_FACTOR = 8  # failing probes back off to at most explore_every * this, never stop
# A lookup drafts at most twice as far as its text has matched lately, or as far as drafts
# of its match kind have been tried: acceptance seen on short drafts says little of position 40.
FIRST_TRUST = 8
# Lookups learn acceptance from shadows without drafting, so a probe only tests the cost:
# taken where the match at hand is likely to hold.
PROBE_MIN_RATE = 0.7
# In a batch shared with other slots, a lookup offers at most this many tokens: each row is
# waited for by every slot in the batch (on the 2-core machine a 79-row batch, two edits'
# drafts, took 2.97 s, while each other slot got one token), so the rounds stay short.
SHARED_DRAFT_MAX = 16
# Which learned drafters could pay at all is asked again after this many steps (costs move
# slowly); the others cost a step nothing, not even a look at the hidden state.
HEADS_RECHECK = 32
LEARNED_FADE = 0.5  # weight of what earlier generations learned: new text is followed sooner
Match = tuple[int, bool]  # a lookup's match length, and whether every earlier occurrence agreed


@dataclass
class Learned:
    """What auto has learned of acceptance: per drafter, and per lookup match. A runtime
    that generates again and again (a server, a chat) hands the same one to each new
    auto, so that its tenth request starts from what the first nine showed."""

    acceptance: dict[str, AcceptanceStats] = field(default_factory=lambda: {
        "draft": AcceptanceStats(prior=0.7), "ngram": AcceptanceStats(prior=0.5),
        "suffix": AcceptanceStats(prior=0.5)})
    by_n: dict[str, dict[Match, AcceptanceStats]] = field(default_factory=lambda: {"ngram": {}, "suffix": {}})

    def fade(self, factor: float = LEARNED_FADE) -> None:
        """A new generation starts: what earlier ones showed keeps its rates at `factor`
        of its weight, so that a different kind of text is followed sooner."""
        for stats in (*self.acceptance.values(), *(s for by in self.by_n.values() for s in by.values())):
            stats.fade(factor)


class AutoDrafter(Drafter):
    name = "auto"

    def __init__(
        self,
        costs: CostModel,
        draft: DraftModelDrafter | CrossVocabDrafter | None = None,
        ngram: NgramDrafter | None = None,
        explore_every: int = 24,
        suffix: SuffixDrafter | None = None,
        learned: Learned | None = None,
        ledger: bool = True,
        heads: Sequence[LearnedDrafter] = (),
    ) -> None:
        """`heads`: the target's learned drafters (Medusa heads, the EAGLE-style feature
        drafter), each priced by its measured arithmetic and acceptance like the draft
        model, from a prior that holds on text of another kind than its training's, and
        probed only where its held-out acceptance (its ceiling) could pay at this
        machine's costs."""
        self._costs = costs
        self.draft = draft
        self.heads = {h.name: h for h in heads}
        self.ngram = ngram
        self.suffix = suffix  # earlier outputs (its n-gram index is `ngram`, asked here directly)
        self.explore_every = explore_every
        learned = learned or Learned()
        self.acceptance = learned.acceptance
        for h in heads:
            if h.name not in self.acceptance or not self.acceptance[h.name].drafted:  # what holds on unseen text
                self.acceptance[h.name] = AcceptanceStats(prior=h.prior)
        # index-lookup acceptance by match: (length, whether every earlier occurrence of the
        # matched text went on with the first drafted token). A 6-token match predicts far
        # better than a 3-token one, and one continuation better than the likeliest of several.
        self.by_n = learned.by_n
        self.last = Choice("none", 0, 0.0)
        self._since_tried = {"draft": 0, "ngram": 0, "suffix": 0, **dict.fromkeys(self.heads, 0)}
        # steps between probes of a drafter not chosen; doubles while probes fail, up to a cap
        self._interval = dict.fromkeys(self._since_tried, min(FIRST_PROBE, explore_every))
        self._probing: str | None = None
        self._heads_live: list[str] = []  # learned drafters weighed until the next recheck
        self._heads_recheck = 0  # steps until it
        self._used: tuple[str, int] | None = None
        self._match: dict[str, Match] = {"ngram": (0, True), "suffix": (0, True)}  # behind the last lookup
        self._run = {"ngram": 0, "suffix": 0}  # a lookup's drafted tokens accepted since its last rejection
        self._shadow: list[tuple[str, list[int], Match]] = []  # lookups offered but not drafted this step
        self._control_seconds = 0.0  # choosing and learning (the lookups and the draft model excluded)
        self.ledger = Ledger(on=ledger)  # plain steps drafting has won or lost in this generation, as measured
        self._extra = 0  # tokens a grammar forced after the last draft, in its batch
        self._prefix = 0  # tokens a grammar forced before it
        self._max_new = PAYBACK_TOKENS  # the generation's max_tokens (budget), and where it began
        self._n_start = 0
        # a slot of a server while other slots are busy: its batches are shared, and the round
        # shares the draft rows out by cost over all slots (runtime.rounds); each step offers
        # its lookups' whole drafts. Alone in its rounds, it drafts as alone.
        self.shared_batches: Callable[[], bool] = lambda: False

    @property
    def costs(self) -> CostModel:
        return self._costs

    @property
    def control_seconds(self) -> float:
        return self._control_seconds

    @property
    def decode_seconds(self) -> float:
        return self.draft.decode_seconds if self.draft is not None else 0.0

    def budget(self, max_new: int) -> None:
        self._max_new = max_new

    def begin(self, history: Sequence[int]) -> None:
        self._n_start = len(history)
        if self.draft is not None:
            self.draft.begin(history)
        if self.ngram is not None:
            self.ngram.begin(history)
        if self.suffix is not None:
            self.suffix.track(history)

    def propose(self, history: Sequence[int], k: int) -> Draft:
        self.costs.context = len(history)  # batches are priced by the context they attend to
        available: dict[str, int] = {}
        lookups: dict[str, Draft] = {}
        if self.ngram is not None:  # a slice of the history: cut below to what it may draft
            lookups["ngram"] = self.ngram.propose(history, k)
            self._match["ngram"] = (self.ngram.last_match_n, self.ngram.last_agreed)
        if self.suffix is not None:  # the store builds what it is asked for: no more than any match kind may draft
            depth = max((s.depth() for s in self.by_n["suffix"].values()), default=0)
            asked = min(k, max(FIRST_TRUST, 2 * self._run["suffix"], depth))
            lookups["suffix"] = self.suffix.from_store(history, asked)
            last = self.suffix.last
            self._match["suffix"] = (last.match_len, last.support[0] == last.n_occurrences) if last else (0, True)
        t_control = time.perf_counter()
        stats = dict(self.acceptance)
        for name, d in lookups.items():
            if d.tokens:
                stats[name] = self._stats_by_n(name, self._match[name])
                # a lookup drafts no further than its text has gone on matching lately, or
                # than drafts of this match kind have been seen to reach
                trusted = max(FIRST_TRUST, 2 * self._run[name], stats[name].depth())
                d.tokens = d.tokens[:trusted]
            available[name] = len(d.tokens)
        pending = 1
        if self.draft is not None:
            available["draft"] = k
            pending = self.draft.lag(history)
        for name in self._heads_in_play():
            if self.heads[name].ready(history):
                available[name] = min(k, self.heads[name].n_heads)
        choice = choose(self.costs, stats, available, pending)
        if choice.drafter != "none" and self.costs.plain_step_due:
            available = {}  # a plain step now and then keeps t1, and with it every price, honest
            choice = Choice("none", 0, 0.0)
        if choice.drafter != "none" and not self.ledger.affords(choice.speed * self.costs.step):
            choice = Choice("none", 0, 0.0)  # drafting has lost lately: only a clear win now
        probe_loss = self._probe_loss()
        for name, n in available.items():
            if (n > 0 and choice.drafter != name and self._since_tried[name] >= self._interval[name]
                    and self.ledger.can_lose(probe_loss + self._draft_steps(name))):
                left = self._max_new - (len(history) - self._n_start)
                if ((name == "draft" and not self._hopeful(name, n, pending, choice, left))
                        or (name in self.heads and not self._could_pay(name, n, choice))):
                    self._since_tried[name] = 0
                    continue
                if name in lookups and stats[name].rates(1)[0] < PROBE_MIN_RATE:
                    continue  # its acceptance is known without drafting (shadows): no probe where it fails
                # a one-token probe on a schedule that slows down but never stops: without
                # it, estimates that say "never draft" (a poisoned cost table, a bad
                # stretch of text) could never be corrected
                choice = Choice(name, 1, 0.0)
                self._probing = name
                break
        shared = self.shared_batches()
        if shared and self._probing is None:
            choice = self._offer(choice, lookups, stats)
        self.last = choice
        self._shadow = [(name, d.tokens, self._match[name]) for name, d in lookups.items()
                        if d.tokens and name != choice.drafter]
        self._control_seconds += time.perf_counter() - t_control
        d = self._drafted(choice, lookups, history, pending)
        if shared and d.tokens and self._probing is None:
            d.gains = expected_gains(stats[choice.drafter].rates(len(d.tokens)))
            d.rate = max(1.0, choice.speed * self.costs.step)
        for name in self._since_tried:
            self._since_tried[name] = 0 if name == choice.drafter else self._since_tried[name] + 1
        self._used = (choice.drafter, len(d.tokens))
        self._extra = 0
        return d

    def _drafted(self, choice: Choice, lookups: dict[str, Draft], history: Sequence[int], pending: int) -> Draft:
        """The chosen drafter's draft of choice.k tokens (a lookup's is already made)."""
        if choice.drafter in lookups:
            found = lookups[choice.drafter]
            return Draft(found.tokens[: choice.k], None, found.source if found.source == PREDICTION else choice.drafter)
        if choice.drafter == "draft" and self.draft is not None:
            d = self.draft.propose(history, choice.k)
            self.costs.observe_catch_up(pending, self.draft.catch_up_seconds)
            for s in self.draft.step_seconds:
                self.costs.observe_draft_step(s)
            d.source = "draft"
            return d
        if choice.drafter in self.heads:
            learned = self.heads[choice.drafter]
            d = learned.propose(history, choice.k)
            self.costs.observe_heads(choice.drafter, learned.last_seconds, choice.k)
            return d
        return Draft(source="none")

    def _offer(self, choice: Choice, lookups: dict[str, Draft], stats: dict[str, AcceptanceStats]) -> Choice:
        """In a shared batch: the lookup whose whole draft is expected to emit the most, offered
        whole (the round cuts it by cost), unless the draft model was chosen."""
        if choice.drafter == "draft":
            return choice
        best, gain = choice, 0.0
        for name, d in lookups.items():
            n = min(len(d.tokens), SHARED_DRAFT_MAX)
            if n:
                g = float(expected_gains(stats[name].rates(n))[-1])
                if g > gain:
                    best, gain = Choice(name, n, choice.speed), g
        return best

    def constrain(self, constraint: Constraint | None, take_forced: bool = True) -> None:
        """The generation's grammar, for the draft model (lookups are cut by the engine)."""
        if self.draft is not None:
            self.draft.constrain(constraint, take_forced)

    def cut(self, n_kept: int) -> None:
        """The engine kept only the first `n_kept` tokens of the last proposal (a grammar
        forbade the next): acceptance and batch costs are learned for what was verified."""
        if self._used is not None:
            self._used = (self._used[0], min(self._used[1], n_kept))

    def prefixed(self, n_forced: int) -> None:
        """The next proposal follows `n_forced` tokens a grammar forces, in its batch: the
        history it is given ends with them."""
        self._prefix = n_forced

    def extend(self, n_forced: int) -> None:
        """The engine added `n_forced` tokens a grammar forces after the last proposal, to
        the same batch: `accept` then counts them among the accepted."""
        self._extra = n_forced

    def _hopeful(self, name: str, n: int, pending: int, choice: Choice, left: int = PAYBACK_TOKENS) -> bool:
        """Could `name`, once in step with the text and at the acceptance a good stretch
        of text gives, save more over the next PAYBACK_TOKENS tokens (or the `left` this
        generation may still emit, if fewer) than it costs to get in step? A draft-model
        probe first decodes every token its cache lacks (the whole prompt the first time):
        a cost paid once, so it is weighed against what the draft model could save over a
        stretch of text, not priced into one step. An n-gram probe costs one verify row
        and needs no such hope."""
        hopeful = {name: AcceptanceStats(prior=OPTIMISTIC_ACCEPTANCE, prior_weight=1e9)}
        speed = choose(self.costs, hopeful, {name: n}, pending=1).speed
        if speed <= choice.speed or choice.speed <= 0:
            return False
        saved = (1.0 / choice.speed - 1.0 / speed) * max(0, min(PAYBACK_TOKENS, left))
        backlog = self.costs.draft_costs(name, 1, pending)[1] - self.costs.draft_costs(name, 1, 1)[1]
        return saved > backlog

    def _draft_steps(self, name: str) -> float:
        """What drafting one token with `name` costs beside its verify row, in plain steps."""
        return self.costs.draft_ratio if name == "draft" else self.costs.heads_ratios.get(name, 0.0)

    def _could_pay(self, name: str, n: int, choice: Choice) -> bool:
        """Could the learned drafter `name` beat `choice` if the text went as well as its
        training's held-out documents (a ceiling: they flatter), at this machine's measured
        batch costs and its arithmetic? Where not, a probe can only lose: a Q4_K_M target
        on a 2-core CPU pays 1.4 plain steps for a 2-row batch, so one drafted token must be
        accepted over 40 % of the time, and more with the heads' own time."""
        hopeful = {name: AcceptanceStats.fixed(self.heads[name].ceiling)}
        return choose(self.costs, hopeful, {name: n}).speed > choice.speed

    def _heads_in_play(self) -> list[str]:
        """The learned drafters weighed this step: those that could beat plain decoding at
        the current costs if the text went as well as their ceiling, or as well as they
        have been measured to do. Where none could (a Q4_K_M target on the 2-core CPU),
        auto with heads does what auto without them does, at the same cost a step: the
        target decodes without hidden states (backend.features rest_features)."""
        if self._heads_recheck <= 0 and self.heads:
            plain = choose(self.costs, {}, {})
            live = [name for name, h in self.heads.items()
                    if self._could_pay(name, h.n_heads, plain)
                    or choose(self.costs, self.acceptance, {name: h.n_heads}).speed > plain.speed]
            for name, h in self.heads.items():  # the target's hidden states: computed only where read
                h.rest(name not in live)
            self._heads_live = live
            self._heads_recheck = HEADS_RECHECK
        self._heads_recheck -= 1
        return self._heads_live

    def _probe_loss(self) -> float:
        """What a failed one-token probe costs: a 2-token batch over a plain step, at most
        one step (two tokens could be decoded one by one), whatever a poisoned table says."""
        return min(self.costs.batch_ratio(2), 2.0) - 1

    def _stats_by_n(self, name: str, match: Match) -> AcceptanceStats:
        """Acceptance of `name`'s matches of n tokens (split by whether earlier occurrences
        agreed). First use starts from a weak prior, soon outweighed: at least what shorter
        matches of the same kind have shown, since a longer match predicts at least as well,
        and at least 1 - 1.5/n (0.5 for 3 tokens, 0.875 for 12: text repeated that far
        usually goes on repeating); half that where earlier occurrences went on in
        different ways (a chat template's closing tokens before every stored answer)."""
        by_n = self.by_n[name]
        if match not in by_n:
            n, agreed = match
            shorter = [by_n[m].rates(1)[0] for m in by_n if m[0] < n and m[1] == agreed]
            prior = max([self.acceptance[name].rates(1)[0], 1.0 - 1.5 / n, *shorter])
            by_n[match] = AcceptanceStats(prior=prior if agreed else prior / 2)
        return by_n[match]

    def accept(self, history: Sequence[int], n_accepted: int, verify_seconds: float = 0.0) -> None:
        t_control = time.perf_counter()
        n_emitted = n_accepted + 1  # the tokens after the forced prefix: its draft's accepted (forced ones too), the next
        if self._used is not None:
            name, n_drafted = self._used
            if n_drafted == 0:
                self.ledger.plain()
            elif verify_seconds > 0 and self.costs.step > 0:  # priced before this step corrects the costs
                draft_steps = n_drafted * self._draft_steps(name)
                self.ledger.record(self._prefix + n_accepted + 1, verify_seconds / self.costs.step + draft_steps)
            corrections = self.costs.corrections
            # the batch: forced tokens before, its draft, forced tokens after (k = 0: a plain step)
            self.costs.observe_verify(self._prefix + n_drafted + self._extra, verify_seconds, self._prefix + n_accepted,
                                      len(history))
            if self.costs.corrections != corrections:
                self.ledger.forgive()
            n_accepted = min(n_accepted, n_drafted)  # of its own tokens: the forced ones were the grammar's
            if self._probing == name:
                failed = n_accepted < n_drafted
                cap = MAX_INTERVAL_FACTOR * self.explore_every
                self._interval[name] = min(self._interval[name] * 2, cap) if failed else self.explore_every
                if self.costs.doubting:  # that probe's cost disagreed with the table: confirm soon
                    self._interval[name] = 2
                self._probing = None
            if name in self._run and n_drafted > 0:
                self._run[name] = self._run[name] + n_accepted if n_accepted == n_drafted else n_accepted
            if name in self.acceptance and n_drafted > 0:
                self.acceptance[name].update(n_drafted, n_accepted)
                if name in self.by_n:
                    self._stats_by_n(name, self._match[name]).update(n_drafted, n_accepted)
            self._used = None
        self._prefix = self._extra = 0
        self._learn_from_shadows(history[len(history) - n_emitted :])
        self._control_seconds += time.perf_counter() - t_control
        if self.draft is not None:
            self.draft.accept(history, n_accepted, verify_seconds)

    def _learn_from_shadows(self, emitted: Sequence[int]) -> None:
        """A lookup offered but not drafted is checked against the tokens the step emitted:
        free evidence for its match's acceptance (greedy: whether the target chose its
        tokens; sampling: P(the target's draw equals a one-hot draft) is what rejection
        sampling would have accepted with). Without it a match kind never drafted would
        keep its prior."""
        first = 0.0  # whether any lookup's first token was the one emitted
        for name, tokens, match in self._shadow:
            n = min(len(tokens), len(emitted))
            hit = next((i for i in range(n) if tokens[i] != emitted[i]), n)
            self._stats_by_n(name, match).update(n, hit)
            first = max(first, float(hit > 0))
        if self._shadow and emitted and self.ledger.in_debt:  # priced only where it counts: not a step's work
            self.ledger.shadow(first - self._probe_loss())
        self._shadow = []

    def end(self, history: Sequence[int]) -> None:
        for d in (self.draft, self.ngram, self.suffix):
            if d is not None:
                d.end(history)
