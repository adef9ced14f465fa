"""The training kernel both learned drafters share, in numpy with hand-written gradients:
Adam over named parameters, softmax cross-entropy with its gradient, SiLU's derivative."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8


def dsilu(x: np.ndarray) -> np.ndarray:
    """d SiLU(x) / dx (weights.silu is SiLU itself)."""
    sig = 1.0 / (1.0 + np.exp(-x))
    return sig * (1.0 + x * (1.0 - sig))


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """The mean softmax cross-entropy of rows of logits (n, V) against label indices (n,),
    and its gradient with respect to the logits. `logits` is used up (shifted in place)."""
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    at = np.arange(len(labels))
    loss = float(-np.log(p[at, labels] + 1e-12).mean())
    p[at, labels] -= 1.0
    return loss, (p / len(labels)).astype(np.float32, copy=False)  # float32, as the weights it meets


@dataclass
class Adam:
    """Adam's moments (m, v) for each named parameter, and the step count they share."""

    moments: dict[str, tuple[np.ndarray, np.ndarray]]
    t: int = 0

    @classmethod
    def like(cls, params: Mapping[str, np.ndarray]) -> Adam:
        return cls({name: (np.zeros_like(p), np.zeros_like(p)) for name, p in params.items()})

    def tick(self) -> None:
        """A new step: the updates until the next tick are bias-corrected for it."""
        self.t += 1

    def update(self, name: str, param: np.ndarray, grad: np.ndarray, lr: float, row: int | None = None) -> None:
        """Move `param` (parameter `name`, or its `row` where rows train apart, as Medusa's
        heads do) against `grad`, in place."""
        m, v = self.moments[name]
        if row is not None:
            m, v = m[row], v[row]
        m *= BETA1
        m += (1 - BETA1) * grad
        v *= BETA2
        v += (1 - BETA2) * grad * grad
        param -= lr * (m / (1 - BETA1 ** self.t)) / (np.sqrt(v / (1 - BETA2 ** self.t)) + EPS)
