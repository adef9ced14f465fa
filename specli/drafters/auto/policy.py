"""auto's choice of drafter and draft length (pure decisions, online estimates).

Expected speed of one step that drafts k tokens with conditional acceptance
a_1..a_k (a_i = P(token i accepted | tokens < i accepted)):

    E[tokens] = 1 + a_1 + a_1 a_2 + ... + a_1...a_k      (the target always adds one)
    cost      = draft_cost(k) + verify_cost(k)           (verify_cost(0) = a plain step)
    speed     = E[tokens] / cost

`choose` picks, each step, the (drafter, k) with the highest expected speed; k = 0 is
plain decoding, so speculation turns itself off where it does not pay. The `Ledger`
holds what drafting has really won, so that prices that are wrong cannot lose much.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specli.drafters.auto.costs import CostModel


def expected_tokens(acceptance: Sequence[float], k: int) -> float:
    """1 + sum_{i<=k} prod_{j<=i} a_j; positions past the known ones reuse the last rate."""
    total, run = 1.0, 1.0
    for i in range(k):
        a = acceptance[i] if i < len(acceptance) else (acceptance[-1] if acceptance else 0.0)
        run *= a
        total += run
    return total


def reach_probabilities(acceptance: Sequence[float], k: int) -> list[float]:
    """reach[i] = P(the first i draft tokens are all accepted), i = 0..k."""
    out, run = [1.0], 1.0
    for i in range(k):
        a = acceptance[i] if i < len(acceptance) else (acceptance[-1] if acceptance else 0.0)
        run *= a
        out.append(run)
    return out


def best_k(
    verify_cost: Sequence[float],
    draft_cost: Sequence[float],
    acceptance: Sequence[float],
    k_max: int,
) -> tuple[int, float]:
    """The k in 0..k_max maximising expected tokens per second, and that speed.
    verify_cost[k]: seconds to verify a batch of k + 1 tokens (k = 0: a plain step);
    draft_cost[k]: seconds to draft k tokens (draft_cost[0] = 0)."""
    k_max = min(k_max, len(verify_cost) - 1, len(draft_cost) - 1)
    best = (0, 1.0 / verify_cost[0] if verify_cost[0] > 0 else 0.0)
    tokens = 1.0
    reach = reach_probabilities(acceptance, k_max)
    for k in range(1, k_max + 1):
        tokens += reach[k]
        cost = verify_cost[k] + draft_cost[k]
        if cost <= 0:
            continue
        speed = tokens / cost
        if speed > best[1] * (1 + 1e-9):
            best = (k, speed)
    return best


@dataclass
class AcceptanceStats:
    """Per-position conditional acceptance, decayed so it follows the text."""

    prior: float = 0.6
    prior_weight: float = 2.0
    decay: float = 0.97
    accepted: list[float] = field(default_factory=list)
    drafted: list[float] = field(default_factory=list)

    @classmethod
    def fixed(cls, rates: Sequence[float]) -> AcceptanceStats:
        """Stats that give `rates` (conditional, per position; the last one past them) and
        that no update moves: for asking what a drafter would earn at a given acceptance."""
        big = 1e12
        return cls(prior=rates[0] if rates else 0.0, decay=1.0, accepted=[big * r for r in rates],
                   drafted=[big] * len(rates))

    def update(self, n_drafted: int, n_accepted: int) -> None:
        grow = n_drafted - len(self.drafted)
        if grow > 0:
            self.drafted += [0.0] * grow
            self.accepted += [0.0] * grow
        for i in range(len(self.drafted)):
            self.drafted[i] *= self.decay
            self.accepted[i] *= self.decay
        # position i was tried when all before it were accepted
        for i in range(min(n_drafted, n_accepted + 1)):
            self.drafted[i] += 1.0
            if i < n_accepted:
                self.accepted[i] += 1.0

    def fade(self, factor: float) -> None:
        """Weigh everything seen so far by `factor` (the rates stay, new evidence counts more)."""
        self.drafted = [d * factor for d in self.drafted]
        self.accepted = [a * factor for a in self.accepted]

    def depth(self, min_weight: float = 2.0) -> int:
        """How many leading positions have been tried at least `min_weight` times (decayed)."""
        return next((i for i, d in enumerate(self.drafted) if d < min_weight), len(self.drafted))

    def rates(self, k: int) -> list[float]:
        out: list[float] = []
        for i in range(k):
            d = self.drafted[i] if i < len(self.drafted) else 0.0
            a = self.accepted[i] if i < len(self.accepted) else 0.0
            prior = out[-1] if out else self.prior
            out.append((a + prior * self.prior_weight) / (d + self.prior_weight))
        return out


LEDGER_START = 1.0  # plain steps a generation may lose before its first gain
LEDGER_ALLOWANCE = 0.01  # earned per plain step: exploring costs at most 1 % where nothing pays
LEDGER_CAP = 16.0  # gains kept: a good stretch does not pay for a long bad one
STAKES_KEPT = 2.0  # ...or this many of the bets that won them, where a bet costs more (64 rows at 8k: 17 steps)
LOSING_MARGIN = 0.25  # in debt a draft must promise this much over plain decoding, more per step owed


@dataclass
class Ledger:
    """Plain steps gained by drafting, as measured: each verified draft adds the tokens it
    emitted less what it cost in plain steps (a plain step: 1 - 1 = 0, plus a small
    allowance). Prices are estimates and can be wrong where text does not repeat; the
    ledger is what they really won."""

    balance: float = LEDGER_START
    on: bool = True  # False: never stands in the way (the prices alone decide; to measure what it costs)

    def record(self, n_emitted: int, cost_steps: float) -> None:
        """A step that emitted `n_emitted` tokens for `cost_steps` plain steps of time. What
        is kept covers a miss or two of bets as dear as this one, however dear."""
        self._add(n_emitted - cost_steps, max(LEDGER_CAP, STAKES_KEPT * cost_steps))

    def plain(self) -> None:
        self._add(LEDGER_ALLOWANCE, LEDGER_CAP)

    def _add(self, gain: float, cap: float) -> None:
        """Gains up to `cap`; a balance already above it (kept by dearer bets) only falls."""
        self.balance = min(max(cap, self.balance), self.balance + gain)

    def affords(self, speedup: float) -> bool:
        """Whether a draft priced at `speedup` x plain decoding may be tried: any gain while
        drafting has not lost; in debt, only by a margin that grows with the debt."""
        return not self.on or self.balance >= 0 or speedup >= 1 + LOSING_MARGIN * (1 - self.balance)

    def forgive(self) -> None:
        """The prices were corrected: debts run up under the old ones say nothing of the new."""
        self.balance = max(self.balance, 0.0)

    def shadow(self, gain: float) -> None:
        """A lookup offered but not drafted was checked against the token the step emitted:
        a one-token probe that cost nothing, which would have won `gain` plain steps (its
        hit less a 2-row batch's price). In debt it counts, up to the debt: without it a
        debt run up by one dear miss (a 65-row draft that failed at its first token: 26
        plain steps at 4k tokens of context) kept auto at plain decoding for thousands of
        steps while the text repeated, repaid only by the 1 % allowance."""
        if self.in_debt:
            self.balance = min(0.0, self.balance + gain)

    @property
    def in_debt(self) -> bool:
        return self.on and self.balance < 0

    def can_lose(self, steps: float) -> bool:
        """Whether a probe that may lose `steps` plain steps fits what drafting has won."""
        return not self.on or self.balance >= steps


@dataclass(frozen=True)
class Choice:
    drafter: str  # "none" | "ngram" | "draft"
    k: int
    speed: float  # expected tokens/s


def choose(
    costs: CostModel,
    acceptance: dict[str, AcceptanceStats],
    available: dict[str, int],
    pending: int = 1,
) -> Choice:
    """Best (drafter, k) among `available` (name -> most tokens it can offer now)."""
    best = Choice("none", 0, 1.0 / costs.step if costs.step > 0 else 0.0)
    for name, k_avail in available.items():
        if k_avail <= 0:
            continue
        rates = acceptance[name].rates(k_avail)
        reach = reach_probabilities(rates, k_avail) if costs.chunk is not None else None
        verify = costs.verify_costs(k_avail, reach)
        k, speed = best_k(verify, costs.draft_costs(name, k_avail, pending), rates, k_avail)
        if k > 0 and speed > best.speed:
            best = Choice(name, k, speed)
    return best
