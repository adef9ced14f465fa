"""Training Medusa heads on a target's own rows (heads.rows), in numpy with hand-written
gradients (heads.kernel).

Head i learns the target's token i + 1 rows on, within the same document. Adam on the
cross-entropy over the reduced vocabulary; rows whose label is outside it teach nothing
(they count against acceptance in `evaluate`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from specli.heads.kernel import Adam, cross_entropy, dsilu
from specli.heads.rows import Acceptance, Rows, head_labels
from specli.heads.weights import MedusaHeads, silu

PARAMS = ("a", "b")  # what training moves; the lm_head (w) is frozen


def fresh_adam(heads: MedusaHeads) -> Adam:
    return Adam.like({name: getattr(heads, name) for name in PARAMS})


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
        self.adam.tick()
        total, n = 0.0, 0
        hs = self.heads
        for i, y in enumerate(labels):
            keep = y >= 0
            if not keep.any():
                continue
            hk, yk = h[keep].astype(np.float32), y[keep]
            pre = hs.pre(i, hk)
            loss, g_logits = cross_entropy((hk + silu(pre)) @ hs.w.T, yk)
            total += loss
            n += 1
            g_pre = (g_logits @ hs.w) * dsilu(pre)  # through the lm_head, then SiLU
            self.adam.update("a", hs.a[i], hk.T @ g_pre, self.lr, row=i)
            self.adam.update("b", hs.b[i], g_pre.sum(axis=0), self.lr, row=i)
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


def evaluate(heads: MedusaHeads, rows: Rows, chunk: int = 1024) -> Acceptance:
    """How often each head's argmax is the target's own token on `rows` (rows whose label
    runs past their document are left out)."""
    k = heads.n_heads
    valid = head_labels(rows, k - 1) >= 0
    if not valid.any():
        return Acceptance.none(k)
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
