"""Rounds: one llama_decode for every slot of a model at a time.

Each slot runs its own generation in its own thread, exactly as alone; its decodes come
here (backend.SeqModel). A round starts when every member slot has handed in its part
(a member is a slot between its request's start and end); the last one to arrive runs
it, so there is no thread of its own. Drafts offered with their expected gains may be
cut there: the round shares its draft rows out by cost over all slots together
(drafters.auto.split). The draft model's rounds follow the target's: after each target
round every slot with a draft model is expected in the draft model's next round until
it drafts or hands in its next target part.

While no request waits for a slot, each offer's tokens are worth what they would cost it
with the batch to itself (auto's own rate), weighted by the rounds it still needs against
the batch's longest request (`makespan_weights`: a slot done early only frees its place,
and the rows that ended it made the longest one's rounds dearer); a draft row goes where
it comes cheaper than that (`split_rows_at_prices`), and where other slots take plain
steps beside it, cheaper than that for them too, since they wait through its rows and
gain nothing (`offer_prices`). A short side call beside a long copy then ends in cheap
rounds, and the copy has its long batches to itself after. With requests waiting, a
slot done early takes the next one, and every token counts alike: the most tokens per
cost (`split_rows`).

Slots prefilling the same prompt chunk on the same history (requests sent at once with
one system prompt, file or conversation) decode it once: the others take its cells."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specli.backend import Model
from specli.backend.sequence import SeqModel, share_cells, take_prefix
from specli.drafters.auto.split import offer_prices, split_rows, split_rows_at_prices

# prices batches of 1..n rows over a context of so many cached tokens (an array, in plain
# steps), or None where no cost model is known
Prices = Callable[[int, int], np.ndarray | None]


@dataclass
class Part:
    seq: SeqModel
    tokens: Sequence[int]
    rows: list[int]
    gains: np.ndarray | None = None
    rate: float = 1.0  # tokens per plain step the slot would make alone (an offer's)
    rounds_left: float | None = None
    out: np.ndarray | None = None
    error: BaseException | None = None
    done: bool = False


PACE_DECAY = 0.8  # tokens per round: a moving mean over the last few steps


@dataclass
class Pace:
    """A slot's request: the position it ends at the latest (None: no max_tokens given),
    and the tokens its steps would emit per round with their whole drafts."""

    limit: int | None
    per_round: float | None = None

    def step(self, n_past: int, expected: float) -> float | None:
        """A step starts at `n_past`, expected to emit `expected` tokens with its whole
        draft: the rounds the request still needs at that pace. The pace is what the
        slot's drafts could do, not what the split gave them: a slot held back stays
        one that could catch up."""
        prev = self.per_round
        self.per_round = expected if prev is None else PACE_DECAY * prev + (1 - PACE_DECAY) * expected
        return None if self.limit is None else max(0, self.limit - n_past) / max(1.0, self.per_round)


@dataclass(frozen=True)
class Round:
    """One round as run: each slot's rows (seq -> rows) and its seconds."""

    rows: dict[int, int]
    seconds: float
    prefill: bool  # a part without draft rows of more than one token (a prompt's chunk)


@dataclass
class Rounds:
    model: Model
    prices: Prices = lambda n, context: None
    on_round: Callable[[Round], None] = lambda r: None
    follower: Rounds | None = None  # the draft model's rounds
    drafting: set[int] = field(default_factory=set)  # members of `follower` after each round
    backlog: Callable[[], int] = lambda: 0  # requests waiting for a slot (the server's queue)
    _pace: dict[int, Pace] = field(default_factory=dict)
    _members: set[int] = field(default_factory=set)
    _waiting: dict[int, Part] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def join(self, seq: int, limit: int | None = None) -> None:
        """`seq` starts a request that ends at position `limit` at the latest (None: unknown)."""
        with self._cond:
            self._members.add(seq)
            self._pace[seq] = Pace(limit)

    def leave(self, seq: int) -> None:
        """`seq` hands in nothing more until it joins again (its request ended, or it
        is done drafting this step)."""
        with self._cond:
            self._members.discard(seq)
            if self._waiting and len(self._waiting) >= len(self._members):
                self._run()

    def others(self, seq: int) -> bool:
        return bool(self._members - {seq})

    def expect(self, seqs: Sequence[int]) -> None:
        with self._cond:
            self._members.update(seqs)

    def decode(self, seq: SeqModel, tokens: Sequence[int], rows: Sequence[int],
               gains: np.ndarray | None = None, rate: float = 1.0) -> np.ndarray:
        if self.follower is not None:
            self.follower.leave(seq.seq)
        part = Part(seq, tokens, list(rows), gains, rate)
        pace = self._pace.get(seq.seq)
        if pace is not None and rows and len(rows) == len(tokens):  # a step, not a prompt's chunk
            part.rounds_left = pace.step(seq.n_past, float(gains[-1]) if gains is not None else 1.0)
        with self._cond:
            self._members.add(seq.seq)
            self._waiting[seq.seq] = part
            if len(self._waiting) >= len(self._members):
                self._run()
            while not part.done:
                self._cond.wait()
        if part.error is not None:
            raise part.error
        assert part.out is not None
        return part.out

    def _run(self) -> None:
        """Decode every waiting part (under the lock), wake their slots."""
        parts = list(self._waiting.values())
        self._waiting.clear()
        try:
            self._cut(parts)
            run, followers = self._repeats(parts)
            t0 = time.perf_counter()
            if run:  # every part may be a chunk another sequence already held
                self._decode(run)
            seconds = time.perf_counter() - t0
            for p, lead in followers:
                start = len(self.model.seq_tokens(p.seq.seq))
                share_cells(self.model, lead.seq.seq, p.seq.seq, start, start + len(p.tokens))
                p.out = self._no_rows()
            total = sum(len(p.tokens) for p in run)
            for p in run:
                p.seq.decode_seconds += seconds * len(p.tokens) / total
                p.seq.batch_shared = len(parts) > 1
            prefill = any(p.gains is None and len(p.tokens) > 1 and not p.rows for p in parts)
            self.on_round(Round({p.seq.seq: len(p.tokens) for p in run}, seconds, prefill))
        except BaseException as e:  # noqa: BLE001 - each slot raises it in its own thread
            for p in parts:
                p.error = e
        for p in parts:
            p.done = True
        if self.follower is not None and self.drafting:
            self.follower.expect(sorted(self.drafting & {p.seq.seq for p in parts if p.error is None}))
        self._cond.notify_all()

    def _cut(self, parts: list[Part]) -> None:
        """Offers keep the draft rows the split gives them (all of them without prices),
        priced at the longest context in the round. With requests waiting, every token
        counts alike: the split with the most tokens per cost, other slots' steps counting
        their token (prompt chunks none). Without, the split serves the longest request,
        and an offer's tokens are worth what they would cost it alone (weighted by the
        rounds it still needs against the longest's, and shared with the slots stepping
        plainly beside it, which wait through its rows for nothing): a row goes where it
        comes cheaper than that, since whatever the split, the round waits for its other
        rows."""
        offers = [p for p in parts if p.gains is not None]
        if not offers:
            return
        fixed = [p for p in parts if p.gains is None]
        n_fixed = sum(len(p.tokens) for p in fixed)
        prices = self.prices(n_fixed + sum(len(p.tokens) for p in offers), max(p.seq.n_past for p in parts))
        if prices is None:
            return
        gains = [p.gains[: len(p.tokens)] for p in offers if p.gains is not None]
        steps = [p for p in fixed if p.rows and len(p.rows) == len(p.tokens)]
        if self.backlog() == 0:
            worth = offer_prices([p.rounds_left for p in offers], [p.rate for p in offers],
                                 [p.rounds_left for p in steps])
            ks = split_rows_at_prices(gains, n_fixed, lambda n: prices[:n], worth)
        else:
            ks = split_rows(gains, n_fixed, lambda n: prices[:n], float(len(steps)))
        for p, k in zip(offers, ks, strict=True):
            p.tokens, p.rows = p.tokens[: 1 + k], p.rows[: 1 + k]

    def _repeats(self, parts: list[Part]) -> tuple[list[Part], list[tuple[Part, Part]]]:
        """The parts to decode, and the prompt chunks that repeat one of them on the same
        history (each with the part whose cells it takes after the decode). A chunk that
        another sequence's cache already holds on the same history is taken at once (a
        slot one chunk behind another with the same prompt)."""
        leads: dict[tuple[tuple[int, ...], tuple[int, ...]], Part] = {}
        run: list[Part] = []
        followers: list[tuple[Part, Part]] = []
        for p in parts:
            if p.rows or p.gains is not None or len(p.tokens) < 2:
                run.append(p)
                continue
            history = self.model.seq_tokens(p.seq.seq)
            key = (tuple(history), tuple(p.tokens))
            if key in leads:
                followers.append((p, leads[key]))
            elif take_prefix(self.model, p.seq.seq, [*history, *p.tokens], whole=True):
                p.out = self._no_rows()
            else:
                leads[key] = p
                run.append(p)
        return run, followers

    def _no_rows(self) -> np.ndarray:
        return np.empty((0, self.model.n_vocab), dtype=np.float32)

    def _decode(self, parts: list[Part]) -> None:
        """As few llama_decodes as n_batch allows (one, as chunks are sized); rows of all
        but the last are copied, since the next one overwrites them."""
        batch: list[Part] = []
        size = 0
        groups: list[list[Part]] = []
        for p in parts:
            if batch and size + len(p.tokens) > self.model.n_batch:
                groups.append(batch)
                batch, size = [], 0
            batch.append(p)
            size += len(p.tokens)
        groups.append(batch)
        for i, group in enumerate(groups):
            outs = self.model.decode_parts([(p.seq.seq, p.tokens, p.rows) for p in group])
            for p, out in zip(group, outs, strict=True):
                p.out = out if i == len(groups) - 1 else out.copy()
