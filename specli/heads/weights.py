"""Medusa-1 heads over a target's last hidden state, as numpy arrays.

Head i (i = 0..K-1) predicts the token i + 2 positions after the hidden state's own
token (the target's lm_head predicts the one after it): a residual block
out = h + SiLU(h A_i + b_i) through the target's lm_head restricted to a reduced draft
vocabulary (`vocab`: the target's token ids, most written first). A_i and b_i start at
zero, so an untrained head repeats the lm_head's own prediction (Medusa's init).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class OverLmHead:
    """What both learned drafters are: weights over the target's lm_head on a reduced
    vocabulary (`vocab` its token ids, `w` its rows), saved as named arrays."""

    vocab: np.ndarray
    w: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    @property
    def n_embd(self) -> int:
        return int(self.w.shape[1])

    @property
    def n_bytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays().values()))


@dataclass
class MedusaHeads(OverLmHead):
    vocab: np.ndarray  # (V_r,) int32: the reduced draft vocabulary, target token ids
    w: np.ndarray  # (V_r, d) float32: the target's lm_head on those tokens (frozen)
    a: np.ndarray  # (K, d, d) float32
    b: np.ndarray  # (K, d) float32

    @classmethod
    def fresh(cls, vocab: np.ndarray, w: np.ndarray, n_heads: int) -> MedusaHeads:
        d = w.shape[1]
        return cls(vocab.astype(np.int32), w.astype(np.float32), np.zeros((n_heads, d, d), np.float32),
                   np.zeros((n_heads, d), np.float32))

    @property
    def n_heads(self) -> int:
        return int(self.a.shape[0])

    def pre(self, i: int, h: np.ndarray) -> np.ndarray:
        """Head i's pre-activation for hidden states h (n, d)."""
        return h @ self.a[i] + self.b[i]

    def logits(self, i: int, h: np.ndarray) -> np.ndarray:
        """Head i's logits over the reduced vocabulary for hidden states h ((n, d) or (d,))."""
        return (h + silu(self.pre(i, h))) @ self.w.T

    def chain_logits(self, h: np.ndarray, k: int) -> np.ndarray:
        """The first k heads' logits over the reduced vocabulary for one hidden state (k, V_r):
        one matmul with the lm_head, read once (it is the heads' largest array)."""
        k = min(k, self.n_heads)
        pre = np.einsum("d,kde->ke", h, self.a[:k]) + self.b[:k]
        return (h + silu(pre)) @ self.w.T

    def draft(self, h: np.ndarray, k: int) -> list[int]:
        """The chain of k target token ids the first k heads predict from one hidden state."""
        return [int(t) for t in self.vocab[self.chain_logits(h, k).argmax(axis=1)]]

    def arrays(self) -> dict[str, np.ndarray]:
        return {"vocab": self.vocab, "w": self.w, "a": self.a, "b": self.b}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> MedusaHeads:
        return cls(arrays["vocab"].astype(np.int32), arrays["w"].astype(np.float32),
                   arrays["a"].astype(np.float32), arrays["b"].astype(np.float32))


def vocab_index(vocab: np.ndarray, n_vocab: int) -> np.ndarray:
    """Target token id -> its place in the reduced vocabulary (-1 outside it)."""
    index = np.full(n_vocab, -1, np.int32)
    index[vocab] = np.arange(len(vocab), dtype=np.int32)
    return index


def fit_lm_head(hidden: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """The lm_head on the reduced vocabulary, solved from hidden states (n, d) and the
    target's logits on those tokens (n, V_r): logits = W h is linear, so n >= d rows fix
    W (up to the quantized matmul's noise) without reading the model's weights."""
    return np.linalg.lstsq(hidden.astype(np.float64), logits.astype(np.float64), rcond=None)[0].T.astype(np.float32)
