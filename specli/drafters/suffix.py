"""Drafting from everything generated before: a suffix index over earlier outputs (kept
across runs in a history store) beside the n-gram index over this generation's own
prompt and output. The longer match wins. Drafts carry no probabilities (a one-hot q),
so both verifications stay lossless: stored text reaches the output only where the
target accepts it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specli.drafters.ngram import PREDICTION, NgramDrafter
from specli.history import Continuation, SuffixIndex
from specli.types import Draft, Drafter

MIN_SHARE = 0.1


class SuffixDrafter(Drafter):
    name = "suffix"

    def __init__(self, index: SuffixIndex, ngram: NgramDrafter, record: Callable[[list[int]], None],
                 min_match: int = 3, max_match: int = 12) -> None:
        self.index, self.ngram, self.record = index, ngram, record
        self.min_match, self.max_match = min_match, max_match
        self.last: Continuation | None = None  # the last stored continuation drafted
        self._n_prompt: int | None = None  # set while a generation runs

    def begin(self, history: Sequence[int]) -> None:
        self.ngram.begin(history)
        self.track(history)

    def track(self, history: Sequence[int]) -> None:
        """A generation starts from `history`: what follows it is output, for the store."""
        self._n_prompt = len(history)

    def from_store(self, history: Sequence[int], k: int, min_match: int | None = None) -> Draft:
        """The stored continuation of the longest suffix of `history` seen before (of at
        least `min_match` tokens; default: the drafter's own minimum)."""
        shortest = self.min_match if min_match is None else min_match
        cont = self.index.lookup(history, k, shortest, self.max_match) if k > 0 else None
        self.last = cont
        if cont is None:
            return Draft([], None, self.name)
        # stop where fewer than MIN_SHARE of the stored occurrences still agree (vLLM's
        # suffix decoding: min_token_prob 0.1): past that the draft is a long shot
        n = next((i for i, c in enumerate(cont.support) if c < MIN_SHARE * cont.n_occurrences), len(cont.tokens))
        return Draft(list(cont.tokens[: min(k, n)]), None, self.name)

    def propose(self, history: Sequence[int], k: int) -> Draft:
        local = self.ngram.propose(history, k)
        # the store wins only with a longer match than the local one: ask for no less
        stored = self.from_store(history, k, max(self.min_match, self.ngram.last_match_n + 1) if local.tokens else None)
        return stored if stored.tokens else Draft(local.tokens, None, local.source if local.source == PREDICTION
                                                 else self.name)

    def end(self, history: Sequence[int]) -> None:
        """The generation is over: its output joins the store, after the last `max_match`
        tokens of its prompt (the rest of the prompt is not kept). With that context a
        repeated request drafts from its first output token, not from its min_match-th:
        a warm pass over code began with 8 plain steps and 5 two-token drafts."""
        if self._n_prompt is None:
            return
        n_prompt, self._n_prompt = self._n_prompt, None
        if len(history) > n_prompt:
            self.record(list(history[max(0, n_prompt - self.max_match) :]))
