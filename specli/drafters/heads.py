"""The learned drafters (Medusa heads and the EAGLE-style feature drafter): trained
weights draft from the target's own last hidden state, with no forward pass of any model.
The weights, their training and their loading are specli.heads'; this module reads them
through the protocols below, so drafters never import heads.

The hidden state is the row of the target's last verify batch (or first-token decode)
whose logits gave the token not yet decoded: read from the target (features on).
- `MedusaDrafter`: head i's argmax (or a draw) for position i + 2, all from that state.
- `EagleDrafter`: the feature drafter (heads.eagle) fed that state and the token after
  it, then its own guesses, one token at a time.
Sampled drafts carry each token's q, the sampler's chain applied to the drafter's
logits over the reduced vocabulary (zero outside it), drawn given the tokens drafted
before it, so rejection sampling keeps the target's distribution.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from specli.engine.sampling import probs_from_logits, sample
from specli.types import Draft, Drafter, SamplingParams

Pick = Callable[[np.ndarray], int]  # a row of reduced-vocabulary logits -> the token drafted


class Features(Protocol):
    """What the heads read of the target (backend.Model and its slots, features on)."""

    def hidden_at(self, pos: int) -> np.ndarray | None: ...

    def rest_features(self, rest: bool) -> None: ...


class ChainHeads(Protocol):
    """Medusa heads as they draft (heads.weights.MedusaHeads)."""

    vocab: np.ndarray  # the reduced vocabulary: target token ids

    @property
    def n_heads(self) -> int: ...

    def chain_logits(self, h: np.ndarray, k: int) -> np.ndarray: ...


class FeatureHead(Protocol):
    """The feature drafter as it drafts (heads.eagle.EagleHead)."""

    vocab: np.ndarray

    def chain_logits(self, h: np.ndarray, token: int, k: int, pick: Pick | None = None) -> list[np.ndarray]: ...


class LearnedDrafter(Drafter):
    """Chains of tokens from the target's hidden state; subclasses say how (`_chain`)."""

    name = "learned"
    vocab: np.ndarray  # the reduced vocabulary: target token ids
    n_heads: int  # most tokens one chain drafts

    def __init__(self, target: Features, n_vocab: int, sampling: SamplingParams = SamplingParams(),
                 sample_draft: bool = True, prior: float = 0.3, ceiling: Sequence[float] = ()) -> None:
        """`n_vocab`: the target's (q is dense over it); `sample_draft`: at temperature > 0
        draw drafts from q (else the argmax, a one-hot q: lossless too); `prior`: the
        first token's acceptance on unseen text, where a controller's estimate starts;
        `ceiling`: the conditional acceptance per drafted position at best (on the
        training's held-out documents), beyond which a controller need not hope."""
        self.target, self.n_vocab, self.sampling = target, n_vocab, sampling
        self.stochastic = sample_draft and not sampling.greedy
        self.prior = prior
        self.ceiling = tuple(ceiling) or (prior,)
        self.rng = np.random.default_rng(None if sampling.seed is None else sampling.seed + 2)
        # spent in the drafter's arithmetic (drafting work: the engine's clock files it under
        # draft, as it does a lookup's; control_seconds stays a controller's own)
        self.seconds = 0.0
        self.last_seconds = 0.0  # ...by the last proposal
        self.missed = 0  # proposals without a hidden state to draft from
        target.rest_features(False)  # an auto before it on this sequence may have let them rest

    def _hidden(self, history: Sequence[int]) -> np.ndarray | None:
        """The row that predicted history[-1]: it sits at the position before it."""
        return self.target.hidden_at(len(history) - 2) if len(history) >= 2 else None

    def rest(self, rest: bool) -> None:
        """The drafter cannot pay for now: the target may decode without hidden states
        (ready is False from the next decode on, until it is woken)."""
        self.target.rest_features(rest)

    def ready(self, history: Sequence[int]) -> bool:
        """Whether a chain can start after `history` (its last row's hidden state is at hand)."""
        return self._hidden(history) is not None

    def _chain(self, h: np.ndarray, token: int, k: int, pick: Pick) -> None:
        raise NotImplementedError

    def propose(self, history: Sequence[int], k: int) -> Draft:
        h = self._hidden(history) if k > 0 else None
        if h is None:
            self.missed += k > 0
            return Draft(source=self.name)
        t0 = time.perf_counter()
        tokens: list[int] = []
        qs: list[np.ndarray | None] = []
        if self.stochastic:
            row = np.full(self.n_vocab, -np.inf, np.float32)

            def pick(z: np.ndarray) -> int:
                row[self.vocab] = z
                q = probs_from_logits(row, self.sampling)
                qs.append(q)
                tokens.append(sample(q, self.rng))
                return tokens[-1]
        else:
            def pick(z: np.ndarray) -> int:
                tokens.append(int(self.vocab[int(z.argmax())]))
                return tokens[-1]
        self._chain(h.astype(np.float32), history[-1], min(k, self.n_heads), pick)
        self.last_seconds = time.perf_counter() - t0
        self.seconds += self.last_seconds
        return Draft(tokens, qs if self.stochastic else None, self.name)


class MedusaDrafter(LearnedDrafter):
    name = "medusa"

    def __init__(self, heads: ChainHeads, target: Features, n_vocab: int, sampling: SamplingParams = SamplingParams(),
                 sample_draft: bool = True, prior: float = 0.3, ceiling: Sequence[float] = ()) -> None:
        super().__init__(target, n_vocab, sampling, sample_draft, prior, ceiling)
        self.heads, self.vocab, self.n_heads = heads, heads.vocab, heads.n_heads

    def _chain(self, h: np.ndarray, token: int, k: int, pick: Pick) -> None:
        for z in self.heads.chain_logits(h, k):  # every head from the same state: one matmul
            pick(z)


class EagleDrafter(LearnedDrafter):
    name = "eagle"

    def __init__(self, head: FeatureHead, target: Features, n_vocab: int, sampling: SamplingParams = SamplingParams(),
                 sample_draft: bool = True, prior: float = 0.3, ceiling: Sequence[float] = (),
                 n_heads: int = 4) -> None:
        super().__init__(target, n_vocab, sampling, sample_draft, prior, ceiling)
        self.head, self.vocab, self.n_heads = head, head.vocab, n_heads

    def _chain(self, h: np.ndarray, token: int, k: int, pick: Pick) -> None:
        self.head.chain_logits(h, token, k, pick)
