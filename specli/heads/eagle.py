"""An EAGLE-style feature drafter: it extrapolates the target's hidden state one token
at a time, in feature space, through the target's own lm_head.

Step j reads the feature f_j (the target's hidden state at position j, or the drafter's
own guess of it) and the embedding of the token at j + 1, and guesses f_{j+1}:

    z = [f_j ; e(x_{j+1})] Fc + c          (FC over the pair, as EAGLE's)
    f_{j+1} = z + SiLU(z Up) Down          (one residual MLP block)

whose argmax through the lm_head (restricted to the reduced vocabulary) is the token at
j + 2. The embedding table is the lm_head's rows (the tied embeddings of the targets
specli pulls; a token outside the reduced vocabulary embeds as zeros). Unlike EAGLE's
decoder layer there is no attention over earlier features: the block sees the last
feature and the token after it, which is what the first drafted token needs most (the
token the target just chose, that Medusa's heads never see).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specli.heads.weights import OverLmHead, silu, vocab_index


@dataclass
class EagleHead(OverLmHead):
    vocab: np.ndarray  # (V_r,) int32 target token ids
    w: np.ndarray  # (V_r, d) the lm_head on them (frozen); its rows embed tokens too
    index: np.ndarray  # (n_vocab,) int32: target token id -> row of w, -1 outside
    fc: np.ndarray  # (2d, d)
    c: np.ndarray  # (d,)
    up: np.ndarray  # (d, m)
    down: np.ndarray  # (m, d)

    @classmethod
    def fresh(cls, vocab: np.ndarray, w: np.ndarray, n_vocab: int, hidden: int, seed: int = 0) -> EagleHead:
        d = w.shape[1]
        rng = np.random.default_rng(seed)
        index = vocab_index(vocab, n_vocab)
        fc = np.concatenate([np.eye(d), np.zeros((d, d))]).astype(np.float32)  # starts as f_{j+1} = f_j
        fc[d:] = rng.normal(0, 0.02 / np.sqrt(d), (d, d))
        return cls(vocab.astype(np.int32), w.astype(np.float32), index, fc, np.zeros(d, np.float32),
                   rng.normal(0, 1 / np.sqrt(d), (d, hidden)).astype(np.float32),
                   np.zeros((hidden, d), np.float32))

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        """Token ids -> their lm_head rows ((n, d); zeros outside the reduced vocabulary)."""
        rows = self.index[tokens]
        out = self.w[np.maximum(rows, 0)].copy()
        out[rows < 0] = 0.0
        return out

    def forward(self, f: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(next features, z, the MLP's pre-activation) for features f and embeddings e ((n, d) each)."""
        z = np.concatenate([f, e], axis=1) @ self.fc + self.c
        pre = z @ self.up
        return z + silu(pre) @ self.down, z, pre

    def chain_logits(self, h: np.ndarray, token: int, k: int,
                     pick: Callable[[np.ndarray], int] | None = None) -> list[np.ndarray]:
        """Logits over the reduced vocabulary of k tokens drafted one after another from the
        hidden state h and the token after it; `pick(logits) -> token id` chooses each
        (default: the argmax)."""
        f = h.reshape(1, -1).astype(np.float32)
        out = []
        for _ in range(k):
            f, _, _ = self.forward(f, self.embed(np.array([token])))
            z = (f @ self.w.T)[0]
            out.append(z)
            token = pick(z) if pick is not None else int(self.vocab[int(z.argmax())])
        return out

    def draft(self, h: np.ndarray, token: int, k: int) -> list[int]:
        return [int(self.vocab[int(z.argmax())]) for z in self.chain_logits(h, token, k)]

    def arrays(self) -> dict[str, np.ndarray]:
        return {"vocab": self.vocab, "w": self.w, "fc": self.fc, "c": self.c, "up": self.up, "down": self.down}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray], n_vocab: int) -> EagleHead:
        return cls(a["vocab"].astype(np.int32), a["w"].astype(np.float32), vocab_index(a["vocab"], n_vocab),
                   *(a[k].astype(np.float32) for k in ("fc", "c", "up", "down")))
