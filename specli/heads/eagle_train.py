"""Training the EAGLE-style feature drafter (heads.eagle) on a target's rows (heads.rows),
in numpy with hand-written gradients (heads.kernel).

An example is a row j with a next row j + 1 in the same document: the input is the
feature at j (with a little noise, as EAGLE adds, so that the drafter's own guesses of
later features do not throw it) and the token decoded at j + 1; the targets are the
feature at j + 1 (smooth L1) and the target's greedy token there (cross-entropy through
the lm_head on the reduced vocabulary, rows outside it teaching only the feature).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from specli.heads.eagle import EagleHead
from specli.heads.kernel import Adam, cross_entropy, dsilu
from specli.heads.rows import Acceptance, Rows, head_labels
from specli.heads.weights import silu

FEATURE_WEIGHT = 1.0  # the feature loss beside the token's
NOISE = 0.1  # input features' noise, in units of their own standard deviation
PARAMS = ("fc", "c", "up", "down")  # what training moves; the lm_head (w) is frozen


def fresh_adam(head: EagleHead) -> Adam:
    return Adam.like({name: getattr(head, name) for name in PARAMS})


def examples(rows: Rows) -> np.ndarray:
    """Rows j that have a row j + 1 in the same document."""
    if len(rows) < 2:
        return np.zeros(0, np.int64)
    return np.flatnonzero(rows.doc[1:] == rows.doc[:-1])


@dataclass
class EagleTrainer:
    head: EagleHead
    adam: Adam
    lr: float = 1e-3
    batch: int = 256
    seed: int = 0
    unroll: int = 3  # steps deep each example is trained, on the drafter's own guesses after the first

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def step(self, f: np.ndarray, nxt: np.ndarray, f_next: np.ndarray, label: np.ndarray) -> float:
        """One Adam step on a batch: features f, the next token ids, the next features and
        the target's token after them (reduced-vocabulary index, -1 outside); the loss."""
        hd = self.head
        f = f + self.rng.normal(0, NOISE * float(f.std()), f.shape).astype(np.float32)
        x = np.concatenate([f, hd.embed(nxt)], axis=1)
        out, z, pre = hd.forward(f, x[:, hd.n_embd:])
        diff = out - f_next
        loss = FEATURE_WEIGHT * float(np.where(np.abs(diff) < 1, 0.5 * diff * diff, np.abs(diff) - 0.5).mean())
        g = FEATURE_WEIGHT * np.clip(diff, -1, 1) / diff.size
        keep = label >= 0
        if keep.any():
            token_loss, g_logits = cross_entropy(out[keep] @ hd.w.T, label[keep])
            loss += token_loss
            g[keep] += g_logits @ hd.w
        g = g.astype(np.float32)
        g_pre = (g @ hd.down.T) * dsilu(pre)
        g_z = g + g_pre @ hd.up.T
        grads = {"down": silu(pre).T @ g, "up": z.T @ g_pre, "fc": x.T @ g_z, "c": g_z.sum(axis=0)}
        self.adam.tick()
        for name in PARAMS:
            self.adam.update(name, getattr(hd, name), grads[name], self.lr)
        return loss

    def epoch(self, rows: Rows, index: np.ndarray, rng: np.random.Generator) -> Iterator[float]:
        """One pass over the examples in `rows`, in a random order: each batch's loss."""
        at = examples(rows)
        order = at[rng.permutation(len(at))]
        for start in range(0, len(order), self.batch):
            j = np.sort(order[start:start + self.batch])
            yield self.step(*self.unrolled(rows, j, index))

    def unrolled(self, rows: Rows, j: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, ...]:
        """A batch's examples: from the real feature at each row j, then (`unroll` steps
        deep) from the drafter's own guess of the next feature, as drafting feeds it: a
        drafter trained on real features alone loses its way at the second token
        (held-out 72 % at the first, 5 % at the second)."""
        f = rows.hidden[j].astype(np.float32)
        parts = [(f, rows.token[j + 1], rows.hidden[j + 1].astype(np.float32), index[rows.top[j + 1]])]
        for step in range(1, self.unroll):
            f = self.head.forward(f, self.head.embed(rows.token[j + step]))[0]  # the guess of f at j + step
            ok = j + step + 1 < len(rows)
            ok[ok] &= rows.doc[j[ok] + step + 1] == rows.doc[j[ok]]
            j, f = j[ok], f[ok]
            if not len(j):
                break
            parts.append((f, rows.token[j + step + 1], rows.hidden[j + step + 1].astype(np.float32),
                          index[rows.top[j + step + 1]]))
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))


def evaluate_eagle(head: EagleHead, rows: Rows, k: int, limit: int = 2000) -> Acceptance:
    """Held-out agreement along the rows, each chain drafted from the real feature at j and
    the token decoded at j + 1, then from the drafter's own guesses: `chain[i]` is the
    share of rows where drafted tokens 1..i + 1 all equal the target's (what a chain
    keeps), `alone[i]` token i + 1 alone."""
    valid = np.flatnonzero(head_labels(rows, k) >= 0)[:limit]  # the target's tokens k + 1 rows on exist
    if not len(valid):
        return Acceptance.none(k)
    agree = np.zeros((k, len(valid)), bool)
    for n, j in enumerate(valid):
        drafted = head.draft(rows.hidden[j].astype(np.float32), int(rows.token[j + 1]), k)
        agree[:, n] = [drafted[i] == rows.top[j + 1 + i] for i in range(k)]
    alone = tuple(float(a.mean()) for a in agree)
    chain = tuple(float(np.logical_and.reduce(agree[: i + 1]).mean()) for i in range(k))
    return Acceptance(alone, chain, float(np.isin(rows.top, head.vocab).mean()), len(valid))
