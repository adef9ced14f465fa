"""Verifying a draft against the target: greedy matching and lossless rejection sampling.

Pure functions over rows the caller supplies. Rows are read lazily and in order, so a
caller may pass a lazy Sequence that only materialises (or even computes) row i when
it is indexed; nothing past the first rejected position is touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from specli.engine.grammar import MaskedRows
from specli.engine.sampling import one_hot, probs_from_logits, residual, sample
from specli.types import Draft, FinishReason, SamplingParams, Verdict

Row = npt.NDArray[Any]
Rows = Sequence[np.ndarray] | np.ndarray  # target logits rows, one per batch token
# verify(draft, rows, sampling, rng) -> Verdict; rows are read in order
Verifier = Callable[[Draft, Rows, SamplingParams, np.random.Generator], Verdict]


def verify_step(draft: Draft, logits: Rows, sampling: SamplingParams, rng: np.random.Generator) -> Verdict:
    """Greedy match at temperature 0, rejection sampling otherwise."""
    if sampling.greedy:
        if isinstance(logits, MaskedRows):  # the allowed argmax: a bit test where the argmax is allowed
            return match_greedy(draft.tokens, logits.argmax_at)
        return verify_greedy(draft.tokens, logits)  # type: ignore[arg-type]
    return verify_rejection(draft.tokens, _LazyProbs(logits, sampling), draft.q_draft, rng, draft.q_after)


class _LazyProbs(Sequence[np.ndarray]):
    """Target probabilities per row, computed only when verification reaches a row."""

    def __init__(self, logits: Rows, params: SamplingParams) -> None:
        self._logits = logits
        self._params = params
        self._rows: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._logits)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if i not in self._rows:
            self._rows[i] = probs_from_logits(self._logits[i], self._params)
        return self._rows[i]


def verify_greedy(draft_tokens: Sequence[int], target_logits: Sequence[Row]) -> Verdict:
    """Greedy verification.

    `target_logits[i]` is the target's logits row after the context plus
    `draft_tokens[:i]` (len(draft) + 1 rows). Draft token i is accepted while it equals
    the row's argmax (lowest index on ties); `next_token` is the argmax of the first
    mismatching row, or of the last row (the bonus token) when everything matched.
    """
    return match_greedy(draft_tokens, lambda i: int(target_logits[i].argmax()))


def match_greedy(draft_tokens: Sequence[int], argmax_at: Callable[[int], int]) -> Verdict:
    """`verify_greedy` given each row's argmax (`argmax_at(i)`, asked in order, only as far
    as the first mismatch)."""
    for i, d_i in enumerate(draft_tokens):
        best = argmax_at(i)
        if best != d_i:
            return Verdict(n_accepted=i, next_token=best)
    n_draft = len(draft_tokens)
    return Verdict(n_accepted=n_draft, next_token=argmax_at(n_draft))


def verify_rejection(
    draft_tokens: Sequence[int],
    p_target: Sequence[Row],
    q_draft: Sequence[Row | None] | None,
    rng: np.random.Generator,
    q_after: Row | None = None,
) -> Verdict:
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023); the emitted tokens
    are distributed exactly as if sampled from the target one by one.

    `p_target` has len(draft) + 1 rows, already under the sampler settings; row i is
    indexed only once position i is reached. `q_draft[i]` is the distribution
    `draft_tokens[i]` was drawn from; None (the list, or an entry) means a deterministic
    draft (one-hot q).

    Position i: accept d_i with probability min(1, p_i(d_i) / q_i(d_i)) using one
    uniform; on rejection draw from residual(p_i, q_i) (p_i if that is None) and stop.
    If every draft token is accepted, the bonus token is drawn from the last p row, or
    from residual(p, q_after) when a drafted token was cut there (the grammar forbids
    it, so p gives it 0 and it would have been rejected: the same draw, no row spent).
    With one-hot q: accept with probability p_i(d_i); on rejection draw from p_i with
    d_i zeroed and renormalised.
    """
    for i, d_i in enumerate(draft_tokens):
        p_i = p_target[i]
        q_i = None if q_draft is None else q_draft[i]
        q_d = 1.0 if q_i is None else float(q_i[d_i])
        # u < p/q written as u*q < p: never accepts p(d) == 0, accepts q(d) <= p(d).
        if rng.random() * q_d < float(p_i[d_i]):
            continue
        if q_i is None:
            q_i = one_hot(d_i, p_i.size)
        r = residual(p_i, q_i)
        return Verdict(n_accepted=i, next_token=sample(p_i if r is None else r, rng))
    n_draft = len(draft_tokens)
    p_last = p_target[n_draft]
    r = None if q_after is None else residual(p_last, q_after)
    return Verdict(n_accepted=n_draft, next_token=sample(p_last if r is None else r, rng))


def cut_at_stop(
    tokens: Sequence[int], is_eog: Callable[[int], bool], max_new: int
) -> tuple[list[int], FinishReason | None]:
    """Trim the tokens about to be emitted (accepted draft prefix + next token).

    Returns (tokens_to_emit, finish_reason):
    * "stop": cut just after the first end-of-generation token; the EOG token itself
      IS the last returned token, so the caller can see (and decide not to print) it.
    * "length": `max_new` (tokens still allowed) is reached, i.e. more than max_new
      tokens were offered or exactly max_new were emitted; the list is the first
      max_new tokens.
    * None: all tokens emitted, generation may continue.
    An EOG at the last allowed position wins over "length". `is_eog` is only called on
    tokens up to the cut.
    """
    limit = max(max_new, 0)
    for i, token in enumerate(tokens):
        if i >= limit:
            break
        if is_eog(token):
            return list(tokens[: i + 1]), "stop"
    if len(tokens) >= limit:
        return list(tokens[:limit]), "length"
    return list(tokens), None


CONTENDERS = 8  # tokens after the top one whose gaps are recorded


def contenders(row: Row, n: int = CONTENDERS) -> dict[int, float]:
    """The n most likely tokens after the top one -> their logit gap to it. A batch can
    pick any of them whose gap is within the batching noise, not only the runner-up
    (seen: Spec-Bench rag 482, third token 0.174 behind, runner-up 0.147)."""
    top = int(row.argmax())
    best = float(row[top])
    idx = np.argpartition(row, -(n + 1))[-(n + 1):]
    return {int(t): best - float(row[t]) for t in idx if int(t) != top}


class MarginRecorder:
    """Wraps a verifier; records, for each token it emits, the target's runner-up and
    logit gap at that row, and the gaps of the next few contenders (the baseline emits
    one token per call)."""

    def __init__(self, verifier: Callable[..., Verdict]) -> None:
        self.verifier = verifier
        self.margins: list[tuple[int, float]] = []
        self.contenders: list[dict[int, float]] = []
        self.seconds = 0.0  # spent recording
        self.first_seconds = 0.0  # of which in the prefill's call

    def __call__(self, draft: Any, rows: Any, sampling: Any, rng: Any) -> Verdict:
        verdict = self.verifier(draft, rows, sampling, rng)
        t0 = time.perf_counter()
        gaps = contenders(rows[verdict.n_accepted])
        runner_up = min(gaps, key=lambda t: (gaps[t], t))  # the lowest id among equals, as argmax picks
        self.margins.append((runner_up, gaps[runner_up]))
        self.contenders.append(gaps)
        dt = time.perf_counter() - t0
        self.seconds += dt
        if len(self.margins) == 1:
            self.first_seconds = dt
        return verdict
