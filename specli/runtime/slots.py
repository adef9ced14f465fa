"""A server's slots: n sequences of the loaded pair, each a Runtime of its own over one
sequence of each model, their decodes in shared rounds (runtime.rounds), their prompt
caches one store seen through each slot's sequences."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from specli.backend.sequence import SeqModel, common_prefix, take_prefix
from specli.runtime.kv.prompt_cache import PromptCache
from specli.runtime.rounds import Round, Rounds
from specli.runtime.wiring import Runtime


@dataclass(frozen=True)
class IdleSlot:
    index: int
    shared: int  # prefix shared with the prompt
    cached: int  # tokens its cache holds
    last_used: int


def pick_slot(n_prompt: int, idle: Sequence[IdleSlot]) -> int | None:
    """The slot for a prompt of `n_prompt` tokens among the idle ones: of those that hold
    all of the prompt but its last token (a repeat) or whose cache the prompt keeps half of
    (it goes on with their conversation), the one sharing the most; else the least
    recently used. llama-server reuses a slot that shares a tenth of the prompt, so a
    short side call sharing the chat template's first tokens pushes the conversation out;
    here it goes to a slot nobody needs, and the prefix it shares with any slot comes
    along as shared cells (Slots.share_prefix)."""
    if not idle:
        return None
    going_on = [s for s in idle if s.cached and (s.shared >= n_prompt - 1 or 2 * s.shared >= s.cached)]
    if going_on:
        return max(going_on, key=lambda s: (s.shared, -s.index)).index
    return min(idle, key=lambda s: (s.last_used, s.index)).index


# An idle slot's cells that a running request does not share still cost it: over llama.cpp's
# unified KV cache every decode attends to all used cells, masked by sequence (a title's plain
# step after a 4k-token conversation in another slot: 44-45 ms against 35-39 ms alone, Q4_K_M
# 1.5B). Saving 4k tokens to the prompt cache's RAM and restoring them takes 0.2 + 0.1 s, about
# 25 such steps of the newcomer: an idle conversation this many tokens past what the new
# prompt shares with it leaves the KV cache for the prompt cache (llama-server, whose side call
# takes the conversation's slot, saves it to its RAM cache alike).
PARK_MIN = 512


def parkable(prompt: Sequence[int], idle: Sequence[tuple[int, Sequence[int]]],
             queued: Sequence[Sequence[int]] = ()) -> list[int]:
    """Of the idle slots (index, cached tokens), those whose conversation `prompt` does not
    go on with: at least PARK_MIN of their tokens unshared, and less than PARK_MIN shared
    (a long shared prefix is worth more as shared cells than the unshared rest costs);
    nor does any `queued` prompt (a turn sent with its side call takes its cells at once:
    parking them cost the side call 0.2 s for 4k tokens, and the turn a restore)."""
    def goes_on(p: Sequence[int], tokens: Sequence[int]) -> bool:
        shared = common_prefix(tokens, p)
        return len(tokens) - shared < PARK_MIN or shared >= PARK_MIN

    return [index for index, tokens in idle
            if not goes_on(prompt, tokens) and not any(goes_on(q, tokens) for q in queued)]


def prefill_chunk(n_batch: int, n_slots: int) -> int:
    """Prompt tokens a slot decodes per round: all slots prefilling at once fill one
    n_batch (512: 128 each for 4 slots; a round of 128 prompt tokens costs about 15
    plain steps of the Q4_K_M target on the 2-core machine, so a running slot waits
    about 1 s per round while a new prompt comes in, not the whole prefill)."""
    return max(16, n_batch // max(1, n_slots))


@dataclass
class SlotStats:
    """What the rounds did: per slot, the rows it got and the rounds it was in."""

    rounds: int = 0
    rows: dict[int, int] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)
    last: dict[int, int] = field(default_factory=dict)  # the last round's split
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, r: Round) -> None:
        with self.lock:
            self.rounds += 1
            for seq, n in r.rows.items():
                self.rows[seq] = self.rows.get(seq, 0) + n
                self.steps[seq] = self.steps.get(seq, 0) + 1
            self.last = dict(r.rows)


@dataclass
class Slot:
    index: int
    rt: Runtime  # over this slot's sequences
    cache: PromptCache | None
    job: Any = None  # the request it serves (the serve layer's), None when idle
    last_used: int = -1  # when its last request ended, in requests served (-1: never)


class Slots:
    """n slots of `rt` (loaded with n sequences), sharing its costs, history and `cache`."""

    def __init__(self, rt: Runtime, n: int, cache: PromptCache | None) -> None:
        self.rt = rt
        self.stats = SlotStats()
        chunk = prefill_chunk(rt.target.n_batch, n)
        self.draft_rounds = Rounds(rt.draft) if rt.draft is not None else None
        self.rounds = Rounds(rt.target, prices=self._prices, on_round=self.stats.add, follower=self.draft_rounds)
        if self.draft_rounds is not None:
            self.rounds.drafting = set(range(n))
        self.cache_lock = threading.Lock()  # one slot saves or restores at a time
        self.slots: list[Slot] = []
        self._ended = itertools.count()
        for i in range(n):
            target = SeqModel(rt.target, i, self.rounds, chunk)
            draft = SeqModel(rt.draft, i, self.draft_rounds, chunk) if rt.draft is not None else None
            view = replace(rt, target=target, draft=draft, shared_batches=n > 1)  # type: ignore[arg-type]
            self.slots.append(Slot(i, view, replace(cache, target=target, draft=draft) if cache else None))

    def _prices(self, n_max: int, context: int) -> np.ndarray | None:
        costs = self.rt._costs.get("batch")  # noqa: SLF001 - the cost model auto prices with, once it exists
        return costs.batch_ratios(n_max, context) if costs is not None and costs.step > 0 else None

    def begin(self, slot: Slot, limit: int | None = None) -> None:
        """The slot's request is about to generate (up to position `limit` at the latest,
        where its client set max_tokens): rounds wait for it from now on."""
        self.rounds.join(slot.index, limit)

    def end(self, slot: Slot) -> None:
        slot.last_used = next(self._ended)
        self.rounds.leave(slot.index)
        if self.draft_rounds is not None:
            self.draft_rounds.leave(slot.index)

    def share_prefix(self, slot: Slot, prompt: list[int]) -> None:
        """`slot` takes the longest prefix of `prompt` another slot's cache holds, where it
        is longer than its own (the cells are shared, not copied: requests with one system
        prompt, file or conversation prefill it once)."""
        views: list[Any] = [slot.rt.target, slot.rt.draft]
        for v in views:
            if isinstance(v, SeqModel):
                take_prefix(v.model, slot.index, prompt[:-1])

    def park(self, slot: Slot) -> str:
        """`slot` (idle) saves its conversation in the prompt cache and frees its cells; the
        saved entry's id ("" where an entry already held it)."""
        assert slot.cache is not None
        with self.cache_lock:
            saved = slot.cache.save_live()
        for view in (slot.rt.target, slot.rt.draft):
            if view is not None:
                view.rollback(0)
        return saved

    def best_for(self, prompt: list[int]) -> Slot | None:
        """The idle slot for `prompt` (pick_slot)."""
        idle = [IdleSlot(s.index, common_prefix(s.rt.target.tokens, prompt), len(s.rt.target.tokens), s.last_used)
                for s in self.slots if s.job is None]
        index = pick_slot(len(prompt), idle)
        return None if index is None else self.slots[index]
