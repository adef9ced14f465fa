"""Rounds: one llama_decode for every slot of a model at a time.

Each slot runs its own generation in its own thread, exactly as alone; its decodes come
here (backend.SeqModel). A round starts when every member slot has handed in its part
(a member is a slot between its request's start and end); the last one to arrive runs
it, so there is no thread of its own. Drafts offered with their expected gains may be
cut there: the round shares its draft rows out by cost over all slots together
(drafters.auto.split). The draft model's rounds follow the target's: after each target
round every slot with a draft model is expected in the draft model's next round until
it drafts or hands in its next target part."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specli.backend import Model
from specli.backend.sequence import SeqModel
from specli.drafters.auto.split import split_rows

# prices batches of 1..n rows (an array), or None where no cost model is known
Prices = Callable[[int], np.ndarray | None]


@dataclass
class Part:
    seq: SeqModel
    tokens: Sequence[int]
    rows: list[int]
    gains: np.ndarray | None = None
    out: np.ndarray | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass(frozen=True)
class Round:
    """One round as run: each slot's rows (seq -> rows) and its seconds."""

    rows: dict[int, int]
    seconds: float
    prefill: bool  # a part without draft rows of more than one token (a prompt's chunk)


@dataclass
class Rounds:
    model: Model
    prices: Prices = lambda n: None
    on_round: Callable[[Round], None] = lambda r: None
    follower: Rounds | None = None  # the draft model's rounds
    drafting: set[int] = field(default_factory=set)  # members of `follower` after each round
    _members: set[int] = field(default_factory=set)
    _waiting: dict[int, Part] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def join(self, seq: int) -> None:
        with self._cond:
            self._members.add(seq)

    def leave(self, seq: int) -> None:
        """`seq` hands in nothing more until it joins again (its request ended, or it
        is done drafting this step)."""
        with self._cond:
            self._members.discard(seq)
            if self._waiting and len(self._waiting) >= len(self._members):
                self._run()

    def expect(self, seqs: Sequence[int]) -> None:
        with self._cond:
            self._members.update(seqs)

    def decode(self, seq: SeqModel, tokens: Sequence[int], rows: Sequence[int],
               gains: np.ndarray | None = None) -> np.ndarray:
        if self.follower is not None:
            self.follower.leave(seq.seq)
        part = Part(seq, tokens, list(rows), gains)
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
            t0 = time.perf_counter()
            self._decode(parts)
            seconds = time.perf_counter() - t0
            total = sum(len(p.tokens) for p in parts)
            for p in parts:
                p.seq.decode_seconds += seconds * len(p.tokens) / total
            prefill = any(p.gains is None and len(p.tokens) > 1 and not p.rows for p in parts)
            self.on_round(Round({p.seq.seq: len(p.tokens) for p in parts}, seconds, prefill))
        except BaseException as e:  # noqa: BLE001 - each slot raises it in its own thread
            for p in parts:
                p.error = e
        for p in parts:
            p.done = True
        if self.follower is not None and self.drafting:
            self.follower.expect(sorted(self.drafting & {p.seq.seq for p in parts if p.error is None}))
        self._cond.notify_all()

    def _cut(self, parts: list[Part]) -> None:
        """Offers keep the draft rows the split gives them (all of them without prices)."""
        offers = [p for p in parts if p.gains is not None]
        if not offers:
            return
        fixed = sum(len(p.tokens) for p in parts if p.gains is None)
        n_max = fixed + sum(len(p.tokens) for p in offers)
        prices = self.prices(n_max)
        if prices is None:
            return
        ks = split_rows([p.gains[: len(p.tokens)] for p in offers if p.gains is not None], fixed,
                        lambda n: prices[:n])
        for p, k in zip(offers, ks, strict=True):
            p.tokens, p.rows = p.tokens[: 1 + k], p.rows[: 1 + k]

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
