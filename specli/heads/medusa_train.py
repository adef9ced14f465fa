"""Training Medusa heads on a target's own rows, in numpy with hand-written gradients.

A row is one position of text the target decoded: its hidden state and the target's
greedy token there (its logits' argmax: the labels are the target's own, not the
text's). Head i learns the target's token i + 1 rows on, within the same document.
Adam on the cross-entropy over the reduced vocabulary; rows whose label is outside it
teach nothing (they count against acceptance in `evaluate`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from specli.heads.weights import MedusaHeads

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8


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

    def take(self, keep: np.ndarray) -> Rows:
        return Rows(self.hidden[keep], self.top[keep], self.doc[keep], self.token[keep])


def head_labels(rows: Rows, i: int, index: np.ndarray | None = None) -> np.ndarray:
    """Head i's label at every row: the target's token i + 1 rows on (as an index into the
    reduced vocabulary where `index` is given), -1 past its document's end."""
    shift = i + 1
    y = np.full(len(rows), -1, np.int32)
    if len(rows) > shift:
        same = rows.doc[shift:] == rows.doc[:-shift]
        nxt = rows.top[shift:] if index is None else index[rows.top[shift:]]
        y[:-shift] = np.where(same, nxt, -1)
    return y


@dataclass
class Adam:
    """Adam's moments for every head's A and b, and its step count."""

    m_a: np.ndarray
    v_a: np.ndarray
    m_b: np.ndarray
    v_b: np.ndarray
    t: int = 0

    @classmethod
    def like(cls, heads: MedusaHeads) -> Adam:
        return cls(np.zeros_like(heads.a), np.zeros_like(heads.a), np.zeros_like(heads.b), np.zeros_like(heads.b))

    def update(self, param: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float) -> None:
        m *= BETA1
        m += (1 - BETA1) * grad
        v *= BETA2
        v += (1 - BETA2) * grad * grad
        param -= lr * (m / (1 - BETA1 ** self.t)) / (np.sqrt(v / (1 - BETA2 ** self.t)) + EPS)


@dataclass
class Trainer:
    heads: MedusaHeads
    adam: Adam
    lr: float = 1e-3
    batch: int = 256
    losses: list[float] = field(default_factory=list)

    def step(self, h: np.ndarray, labels: list[np.ndarray]) -> float:
        """One Adam step of every head on a batch (labels: reduced-vocabulary indices, -1
        where there is nothing to learn); the mean cross-entropy."""
        self.adam.t += 1
        total, n = 0.0, 0
        hs = self.heads
        for i, y in enumerate(labels):
            keep = y >= 0
            if not keep.any():
                continue
            hk, yk = h[keep].astype(np.float32), y[keep]
            pre = hs.pre(i, hk)
            z = (hk + pre / (1.0 + np.exp(-pre))) @ hs.w.T
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            at = np.arange(len(yk))
            total += float(-np.log(p[at, yk] + 1e-12).mean())
            n += 1
            p[at, yk] -= 1.0
            g_out = (p / len(yk)).astype(np.float32) @ hs.w  # dL/d(out)
            sig = 1.0 / (1.0 + np.exp(-pre))
            g_pre = g_out * (sig * (1.0 + pre * (1.0 - sig)))  # through SiLU
            self.adam.update(hs.a[i], hk.T @ g_pre, self.adam.m_a[i], self.adam.v_a[i], self.lr)
            self.adam.update(hs.b[i], g_pre.sum(axis=0), self.adam.m_b[i], self.adam.v_b[i], self.lr)
        return total / max(n, 1)

    def epoch(self, rows: Rows, index: np.ndarray, rng: np.random.Generator) -> Iterator[float]:
        """One pass over `rows` in a random order: each batch's loss as it is trained."""
        labels = [head_labels(rows, i, index) for i in range(self.heads.n_heads)]
        order = rng.permutation(len(rows))
        for start in range(0, len(order), self.batch):
            b = np.sort(order[start:start + self.batch])
            loss = self.step(rows.hidden[b], [y[b] for y in labels])
            self.losses.append(loss)
            yield loss


@dataclass(frozen=True)
class Acceptance:
    """Held-out agreement of the heads with the target, teacher-forced along the rows:
    `alone[i]` head i by itself, `chain[i]` heads 0..i all (what a chain draft of i + 1
    tokens keeps); `coverage` the share of the target's tokens in the reduced vocabulary."""

    alone: tuple[float, ...]
    chain: tuple[float, ...]
    coverage: float
    rows: int

    def tau(self, k: int) -> float:
        """Expected tokens a verify step emits with a chain of k drafted tokens."""
        return 1.0 + float(sum(self.chain[:k]))


def evaluate(heads: MedusaHeads, rows: Rows, chunk: int = 1024) -> Acceptance:
    """How often each head's argmax is the target's own token on `rows` (rows whose label
    runs past their document are left out)."""
    k = heads.n_heads
    valid = head_labels(rows, k - 1) >= 0
    if not valid.any():
        return Acceptance((0.0,) * k, (0.0,) * k, 0.0, 0)
    pred = np.zeros((k, len(rows)), np.int32)
    for start in range(0, len(rows), chunk):
        h = rows.hidden[start:start + chunk].astype(np.float32)
        for i in range(k):
            pred[i, start:start + len(h)] = heads.vocab[heads.logits(i, h).argmax(axis=1)]
    agree = np.stack([pred[i] == head_labels(rows, i) for i in range(k)])
    alone = tuple(float(agree[i][valid].mean()) for i in range(k))
    chain = tuple(float(np.logical_and.reduce(agree[: i + 1])[valid].mean()) for i in range(k))
    coverage = float(np.isin(rows.top, heads.vocab).mean())
    return Acceptance(alone, chain, coverage, int(valid.sum()))
