"""A pure, in-memory index over token documents that proposes how a token history goes on.

Each segment keeps its documents as one int32 array `s`: a 0 sentinel, then every
document's tokens shifted by +1, each followed by a 0 sentinel. Its suffix array lists
every token position j sorted by the tokens *before* j read backwards (s[j-1], s[j-2],
...), compared over the first `depth` of them. So the positions that follow a given
suffix of the history form one contiguous range, and each further history token (read
backwards) narrows that range: the longest match is found by narrowing until it would
be empty. A sentinel (0) sorts below every token, so matches never cross a document
start, and continuations read forward stop at the sentinel after a document.

The first few tokens before each position are also packed into one int64 per entry
(`keys`, in the same order), so the first narrowing steps are one np.searchsorted each.

New documents go into small segments that merge like a binary counter (a segment
merges into the one before it once it is at least half its size): add() rebuilds only
small segments, and the big first one only once the documents added since reach half
its size. A lookup searches every segment (a handful).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Tokens = Sequence[int] | np.ndarray  # a document or a history: token ids >= 0

MAX_OCCURRENCES = 1024  # occurrences read for a continuation; beyond this, an even sample


@dataclass(frozen=True)
class Continuation:
    tokens: list[int]  # proposed continuation (up to max_tokens long)
    match_len: int  # how many trailing tokens of the query matched (n)
    support: list[int]  # support[i]: stored occurrences agreeing on tokens[:i+1] (non-increasing, >= 1)
    n_occurrences: int  # stored occurrences of the matched suffix (followed by a token)


def _stable_order(values: np.ndarray) -> np.ndarray:
    """np.argsort(values, kind="stable"), by np.sort on values packed with their index
    (several times faster) when they fit."""
    bits = max(len(values) - 1, 1).bit_length()
    if len(values) and int(values.max()) < 1 << (63 - bits):
        packed = np.sort((values.astype(np.int64) << bits) | np.arange(len(values)))
        return (packed & ((1 << bits) - 1)).astype(values.dtype)
    return np.argsort(values, kind="stable").astype(values.dtype)


def _packed_preceding(s: np.ndarray, m: int, bits: int) -> np.ndarray:
    """For every position j of s: s[j-1], ..., s[j-m] packed `bits` each into one
    int64, the nearest highest; 0 before the start."""
    packed = np.zeros(len(s), dtype=np.int64)
    for back in range(1, m + 1):
        packed <<= bits
        packed[back:] |= s[:-back]
    return packed


def _sorted_by_preceding(s: np.ndarray, depth: int) -> np.ndarray:
    """Token positions of `s` (its nonzero entries) sorted by up to `depth` preceding
    tokens read backwards. Prefix doubling (Larsson-Sadakane: only groups still tied are
    re-sorted), starting from as many tokens as fit one packed sort key."""
    n = len(s)
    dtype = np.int32 if n < 2**31 - 1 else np.int64
    bits = max(int(s.max()).bit_length(), 1)
    width = max(1, min(depth, (63 - n.bit_length()) // bits))
    key = _packed_preceding(s, width, bits)
    order = _stable_order(key).astype(dtype)
    key = key[order]
    start = np.ones(n, dtype=bool)
    start[1:] = key[1:] != key[:-1]
    del key
    ties = np.arange(n, dtype=dtype)  # indices into `order` of entries not yet settled
    rank = np.zeros(depth + n, dtype=dtype)  # rank[depth + j]: group rank + 1 of j; 0 before the start
    while True:
        group_start = np.maximum.accumulate(np.where(start, ties, 0))
        rank[depth + order[ties]] = group_start + 1
        group = np.cumsum(start, dtype=dtype) - 1
        ties = ties[np.bincount(group)[group] > 1]
        if width >= depth or not len(ties):
            break
        positions = order[ties] + depth
        first, second = rank[positions], rank[positions - width]
        by_second = _stable_order(second)
        perm = by_second[_stable_order(first[by_second])]
        order[ties] = positions[perm] - depth
        first, second = first[perm], second[perm]
        start = np.ones(len(ties), dtype=bool)
        start[1:] = (first[1:] != first[:-1]) | (second[1:] != second[:-1])
        width *= 2
    return order[s[order] != 0]


class _Segment:
    """Documents in one array with a suffix array over it (see the module docstring)."""

    def __init__(self, docs: Sequence[np.ndarray], depth: int) -> None:
        parts: list[np.ndarray] = [np.zeros(1, dtype=np.int32)]
        for doc in docs:
            parts.append(doc.astype(np.int32) + 1)
            parts.append(np.zeros(1, dtype=np.int32))
        self.s = np.concatenate(parts)
        self.lengths = np.array([len(d) for d in docs], dtype=np.int64)
        self.n_tokens = int(self.lengths.sum())
        self.sa = _sorted_by_preceding(self.s, depth)
        self.bits = max(int(self.s.max()).bit_length(), 1)
        self.key_tokens = max(1, min(depth, 63 // self.bits))
        # Like the suffix array, the keys read on into earlier documents, and 0 before the start.
        self.keys = _packed_preceding(self.s, self.key_tokens, self.bits)[self.sa]
        self._s = self.s.data
        self._sa = self.sa.data

    def documents(self) -> list[np.ndarray]:
        ends = np.cumsum(self.lengths + 1)
        return [self.s[e - n : e] - 1 for e, n in zip(ends, self.lengths)]

    def _key_range(self, rq: Sequence[int], m: int) -> tuple[int, int]:
        """Suffix-array range whose first m preceding tokens are rq[:m] (m <= key_tokens)."""
        low = 0
        for v in rq[:m]:
            if v >= 1 << self.bits:
                return 0, 0
            low = (low << self.bits) | v
        spare = self.bits * (self.key_tokens - m)
        low <<= spare
        high = low | ((1 << spare) - 1)
        lo = int(np.searchsorted(self.keys, low, "left"))
        return lo, int(np.searchsorted(self.keys, high, "right"))

    def longest(self, rq: Sequence[int], min_n: int, max_n: int) -> tuple[int, int, int] | None:
        """(n, lo, hi) for the longest n in [min_n, max_n] whose preceding tokens rq[:n]
        (the shifted history, backwards) occur; the suffix-array range is [lo, hi)."""
        n = min(self.key_tokens, max_n)
        lo, hi = self._key_range(rq, n)
        while lo == hi and n > min_n:
            n -= 1
            lo, hi = self._key_range(rq, n)
        if lo == hi:
            return None
        while n < max_n:
            token = self._preceding(n + 1)
            a = bisect.bisect_left(range(lo, hi), rq[n], key=token)
            b = bisect.bisect_right(range(lo, hi), rq[n], key=token)
            if a == b:
                break
            lo, hi, n = lo + a, lo + b, n + 1
        return (n, lo, hi) if n >= min_n else None

    def _preceding(self, back: int) -> Callable[[int], int]:
        """Suffix-array entry i -> the shifted token `back` places before its position."""
        s, sa = self._s, self._sa
        return lambda i: s[sa[i] - back]

    def windows(self, positions: np.ndarray, width: int) -> np.ndarray:
        """The `width` shifted tokens from each position on, zeroed from its document's end."""
        idx = np.minimum(positions[:, None] + np.arange(width), len(self.s) - 1)
        rows = self.s[idx]
        return np.where(np.cumprod(rows != 0, axis=1, dtype=np.int8) > 0, rows, 0)


def _greedy(rows: np.ndarray, recency: np.ndarray, max_tokens: int) -> tuple[list[int], list[int]]:
    """Follow the rows (shifted tokens) column by column, each step taking the token most
    rows still agreeing have (ties: the most recent row); the tokens and their counts.
    numpy steps while many rows agree, plain Python once few do."""
    rows = rows[np.argsort(-recency, kind="stable")]  # the most recent first
    tokens: list[int] = []
    support: list[int] = []
    i = 0
    while i < max_tokens and len(rows) > 32:
        column = rows[:, i]
        values, first, counts = np.unique(column, return_index=True, return_counts=True)
        if values[0] == 0:  # document ends
            values, first, counts = values[1:], first[1:], counts[1:]
        if not len(values):
            return tokens, support
        best = int(np.argmin(np.where(counts == counts.max(), first, len(rows))))
        tokens.append(int(values[best]) - 1)
        support.append(int(counts[best]))
        rows = rows[column == values[best]]
        i += 1
    table = rows.tolist()
    for col in range(i, max_tokens):
        rest = table[0][col:]
        if all(row[col:] == rest for row in table[1:]):  # one way on: the rest of any row
            n = rest.index(0) if 0 in rest else len(rest)
            return tokens + [t - 1 for t in rest[:n]], support + [len(table)] * n
        tally: dict[int, list[int]] = {}  # token -> [count, rank of its most recent row]
        for rank, row in enumerate(table):
            if row[col]:
                tally.setdefault(row[col], [0, rank])[0] += 1
        if not tally:
            break
        best = max(tally, key=lambda t: (tally[t][0], -tally[t][1]))
        tokens.append(best - 1)
        support.append(tally[best][0])
        table = [row for row in table if row[col] == best]
    return tokens, support


class SuffixIndex:
    """Pure, in memory: token documents and a depth-limited suffix array over them."""

    def __init__(self, documents: Sequence[Tokens] = (), depth: int = 16,
                 max_occurrences: int = MAX_OCCURRENCES) -> None:
        self.depth = depth
        self.max_occurrences = max_occurrences
        self._segments: list[_Segment] = []
        docs = [d for d in (_as_array(doc) for doc in documents) if len(d)]
        if docs:
            self._segments.append(_Segment(docs, depth))
        self._n_tokens = sum(len(d) for d in docs)
        self._n_documents = len(docs)

    @property
    def n_tokens(self) -> int:
        return self._n_tokens

    @property
    def n_documents(self) -> int:
        return self._n_documents

    @property
    def nbytes(self) -> int:
        """Memory held by the index arrays."""
        return sum(g.s.nbytes + g.sa.nbytes + g.keys.nbytes for g in self._segments)

    def documents(self) -> list[np.ndarray]:
        """Every document, oldest first."""
        return [d for g in self._segments for d in g.documents()]

    def add(self, tokens: Tokens) -> None:
        """One more document (the most recent); an empty one is ignored."""
        doc = _as_array(tokens)
        if not len(doc):
            return
        self._segments.append(_Segment([doc], self.depth))
        self._n_tokens += len(doc)
        self._n_documents += 1
        while len(self._segments) > 1 and self._segments[-2].n_tokens <= 2 * self._segments[-1].n_tokens:
            last, before = self._segments.pop(), self._segments.pop()
            self._segments.append(_Segment(before.documents() + last.documents(), self.depth))

    def lookup(self, history: Tokens, max_tokens: int, min_match: int = 3,
               max_match: int = 12) -> Continuation | None:
        """The continuation after the longest suffix history[-n:] (min_match <= n <=
        max_match, n <= depth) that some document holds followed by a token; built
        greedily within one document (each next token: the one most still-agreeing
        occurrences have; ties: the most recent occurrence). Support counts are exact up to max_occurrences
        occurrences; past that they are scaled up from an evenly spaced sample."""
        max_match = min(max_match, self.depth, len(history))
        min_match = max(min_match, 1)
        if max_tokens < 1 or max_match < min_match or not self._segments:
            return None
        rq = [int(t) + 1 for t in history[-1 : -max_match - 1 : -1]]
        if min(rq) < 1:  # a negative id matches nothing: only the suffix after it can match
            rq = rq[: next(i for i, v in enumerate(rq) if v < 1)]
            max_match = len(rq)
            if max_match < min_match:
                return None
        bases = [0, *itertools.accumulate(len(g.s) for g in self._segments[:-1])]
        found = [(base, g, hit) for base, g in zip(bases, self._segments)
                 if (hit := g.longest(rq, min_match, max_match))]
        if not found:
            return None
        n = max(hit[0] for _, _, hit in found)
        ranges = [(base, g, lo, hi) for base, g, (m, lo, hi) in found if m == n]
        total = sum(hi - lo for _, _, lo, hi in ranges)
        step = -(-total // self.max_occurrences)
        rows, recency = [], []  # recency: position in all segments one after another
        for base, g, lo, hi in ranges:
            positions = g.sa[lo:hi:step].astype(np.int64)
            rows.append(g.windows(positions, max_tokens))
            recency.append(positions + base)
        tokens, support = _greedy(np.concatenate(rows), np.concatenate(recency), max_tokens)
        if step > 1:
            scale = total / sum(len(r) for r in rows)
            support = [max(1, round(c * scale)) for c in support]
        return Continuation(tokens, n, support, total)


def _as_array(tokens: Tokens) -> np.ndarray:
    doc = np.asarray(tokens, dtype=np.int64).reshape(-1)
    if len(doc) and (doc.min() < 0 or doc.max() >= 2**31 - 1):
        raise ValueError("token ids must lie in [0, 2**31 - 1)")
    return doc
