"""Rows, what both learned drafters learn from and are judged on, and the one rule that
holds documents out.

A row is one position of text the target decoded: its hidden state and the target's
greedy token there (its logits' argmax: the labels are the target's own, not the
text's). Rows come a document at a time (an answer, a window of a file); a drafter's
label never reaches past its document's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HELD_OUT_EVERY = 10


def held_out(doc: int) -> bool:
    """Whether document number `doc` (counted from 0 in the order documents come) is held
    out: every tenth, from the tenth on. Training and online learning both ask here."""
    return doc % HELD_OUT_EVERY == HELD_OUT_EVERY - 1


@dataclass
class Rows:
    """Decoded positions: hidden states (n, d), the target's greedy token at each (the
    token after it), the document each belongs to and the token decoded there."""

    hidden: np.ndarray
    top: np.ndarray
    doc: np.ndarray
    token: np.ndarray

    def __len__(self) -> int:
        return len(self.top)

    @classmethod
    def document(cls, tokens: np.ndarray, hidden: np.ndarray, top: np.ndarray) -> Rows:
        """One document's rows: the tokens decoded, their hidden states, the target's argmax."""
        return cls(hidden, top, np.zeros(len(top), np.int32), tokens)

    @classmethod
    def join(cls, docs: Sequence[Rows]) -> Rows:
        """Documents one after another, each its own document id (its place in `docs`)."""
        if not docs:
            return cls(np.zeros((0, 0), np.float16), *(np.zeros(0, np.int32) for _ in range(3)))
        return cls(np.concatenate([d.hidden for d in docs]), np.concatenate([d.top for d in docs]),
                   np.concatenate([np.full(len(d), i, np.int32) for i, d in enumerate(docs)]),
                   np.concatenate([d.token for d in docs]))


def head_labels(rows: Rows, i: int, index: np.ndarray | None = None) -> np.ndarray:
    """The target's token i + 1 rows on at every row (what Medusa head i learns; as an
    index into the reduced vocabulary where `index` is given), -1 past its document's end."""
    shift = i + 1
    y = np.full(len(rows), -1, np.int32)
    if len(rows) > shift:
        same = rows.doc[shift:] == rows.doc[:-shift]
        nxt = rows.top[shift:] if index is None else index[rows.top[shift:]]
        y[:-shift] = np.where(same, nxt, -1)
    return y


@dataclass(frozen=True)
class Acceptance:
    """Held-out agreement of a learned drafter with the target, teacher-forced along the
    rows: `alone[i]` drafted token i + 1 by itself, `chain[i]` tokens 1..i + 1 all (what a
    chain draft of i + 1 tokens keeps); `coverage` the share of the target's tokens in the
    reduced vocabulary."""

    alone: tuple[float, ...]
    chain: tuple[float, ...]
    coverage: float
    rows: int

    @classmethod
    def none(cls, k: int) -> Acceptance:
        """Nothing to judge on: no row had the k tokens after it in its document."""
        return cls((0.0,) * k, (0.0,) * k, 0.0, 0)

    def tau(self, k: int) -> float:
        """Expected tokens a verify step emits with a chain of k drafted tokens."""
        return 1.0 + float(sum(self.chain[:k]))

    def to_json(self) -> dict[str, object]:
        return {"alone": self.alone, "chain": self.chain, "coverage": self.coverage, "rows": self.rows}
