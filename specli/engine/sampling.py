"""Turning logits into the exact distribution the sampler draws from, and drawing.

Everything here is pure numpy and deterministic given its inputs. Lossless speculative
decoding only needs the *same* function applied to target and draft logits; the chain
below mirrors llama.cpp's common sampler so the output distribution matches what a user
of llama.cpp with the same settings would expect.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from specli.types import SamplingParams

Logits = npt.NDArray[np.floating[Any]]
Probs = npt.NDArray[np.float64]

# First candidate-set size for top-p without top-k, and how fast it widens.
_TOP_P_FIRST = 128
_TOP_P_WIDEN = 8


def one_hot(token: int, n_vocab: int) -> Probs:
    """A float64 vector of length `n_vocab` with a single 1.0 at `token`."""
    out = np.zeros(n_vocab, dtype=np.float64)
    out[token] = 1.0
    return out


def probs_from_logits(logits: Logits, params: SamplingParams) -> Probs:
    """The dense float64 distribution the sampler draws from under `params`.

    Chain, in llama.cpp's common-sampler order: top-k -> top-p -> min-p -> temperature.

    * greedy (``temperature <= 0``): one-hot at ``argmax(logits)`` (lowest index on ties).
    * top-k (``top_k > 0``): keep exactly k tokens with the largest logits; ties at the
      k-th value are broken towards the lowest index.
    * top-p (``top_p < 1``): keep the smallest prefix of the kept tokens, sorted by
      descending logit (ties: lowest index first), whose mass is ``>= top_p``.
    * min-p (``min_p > 0``): keep tokens with ``p >= min_p * p_max``.
    * temperature: softmax of ``logits / temperature`` over the kept set.

    Like llama.cpp (temperature is the last step of its chain), top-p and min-p are
    decided on the distribution at temperature 1, renormalised over the tokens still
    kept (top-p after top-k sees the top-k renormalised distribution). Temperature only
    reshapes the mass inside the kept set. At least one token (the argmax) is always
    kept. The result sums to 1 and is exactly zero outside the kept set.

    Raises ValueError if the logits have no finite maximum (all -inf, +inf or NaN).
    """
    x = np.asarray(logits).reshape(-1)
    n_vocab = x.size
    if params.greedy:
        return one_hot(int(np.argmax(x)), n_vocab)
    x_max = float(x.max())
    if not np.isfinite(x_max):
        raise ValueError(f"logits have no finite maximum ({x_max})")

    kept: npt.NDArray[np.intp] | None = None  # None = the whole vocabulary
    if 0 < params.top_k < n_vocab:
        kept = _top_k(x, params.top_k)
    if params.top_p < 1.0:
        kept = _top_p(x, params.top_p) if kept is None else kept[_top_p(x[kept], params.top_p)]

    z = x.astype(np.float64) if kept is None else x[kept].astype(np.float64)
    if params.min_p > 0.0:
        # p_i >= min_p * p_max  <=>  z_i - z_max >= log(min_p)
        # (capped at 0 so the argmax always survives, even for min_p > 1)
        keep = (z - z.max()) >= min(float(np.log(params.min_p)), 0.0)
        kept = np.flatnonzero(keep) if kept is None else kept[keep]
        z = z[keep]

    # Temperature softmax over the kept set, in float64.
    w: Probs = np.exp((z - z.max()) / params.temperature)
    w /= w.sum()
    if kept is None:
        return w
    out = np.zeros(n_vocab, dtype=np.float64)
    out[kept] = w
    return out


def _top_k(z: Logits, k: int, kth: Any = None) -> npt.NDArray[np.intp]:
    """Ascending positions of exactly the k largest values of z; ties at the k-th
    value go to the lowest positions. `kth` (the k-th largest value) if already known."""
    if kth is None:
        kth = np.partition(z, z.size - k)[z.size - k]
    above = np.flatnonzero(z > kth)
    ties = np.flatnonzero(z == kth)[: k - above.size]
    return np.sort(np.concatenate((above, ties)))


def _nucleus_cut(top_desc: Logits, z_max: float, total: float, top_p: float) -> int | None:
    """Given the largest values of z sorted descending (a prefix of z's sorted order),
    the number of tokens top-p keeps, or None if this prefix holds less than top_p."""
    p = np.exp(top_desc.astype(np.float64) - z_max) / total
    cum = np.cumsum(p)
    cut = int(np.searchsorted(cum, top_p, side="left"))
    if cut < cum.size:
        return cut + 1
    return None


def _top_p(z: Logits, top_p: float) -> npt.NDArray[np.intp]:
    """Ascending positions into z kept by top-p over softmax(z) (temperature 1).

    Avoids a full sort: sorts the c largest values (np.partition + np.sort on values,
    not an argsort) and widens c until they hold top_p of the mass. The cut gives a
    count k; the kept set is then the top k by value, ties to the lowest position, so
    it is exactly the smallest prefix of the (descending value, ascending index) order
    with mass >= top_p. Large z are normalised with float32 exps summed in float64.
    """
    n = z.size
    z_max = float(z.max())
    if n <= _TOP_P_FIRST:
        total = float(np.exp(z.astype(np.float64) - z_max).sum())
    else:
        total = float(np.exp(z - z.dtype.type(z_max)).sum(dtype=np.float64))
    c = _TOP_P_FIRST
    while True:
        # the c largest values, descending (all of z once c reaches n)
        top_desc = np.sort(z if c >= n else np.partition(z, n - c)[n - c :])[::-1]
        k = _nucleus_cut(top_desc, z_max, total, top_p)
        if k is None and c >= n:
            k = n  # float drift with top_p ~ 1: keep everything
        if k is not None:
            return _top_k(z, k, kth=top_desc[k - 1])
        c *= _TOP_P_WIDEN


def sample(probs: Probs, rng: np.random.Generator) -> int:
    """Draw one index from a (non-negative, roughly normalised) probability vector.

    Uses one uniform scaled by the actual total mass, so small float drift in the sum
    is harmless; a zero-probability index is never returned.
    """
    cdf = np.cumsum(probs, dtype=np.float64)
    total = float(cdf[-1])
    if not total > 0.0:
        raise ValueError("cannot sample from a distribution with no mass")
    u = rng.random() * total
    # First index whose cdf exceeds u: a zero-probability index never does first.
    idx = int(np.searchsorted(cdf, u, side="right"))
    if idx >= cdf.size or probs[idx] <= 0.0:
        # Only when rounding put u at the very top: take the last index with mass.
        idx = int(np.flatnonzero(np.asarray(probs) > 0.0)[-1])
    return idx


def residual(p_target: Probs, q_draft: Probs) -> Probs | None:
    """normalize(max(p_target - q_draft, 0)); None when that is all zero (p <= q
    everywhere, i.e. p == q for two distributions): the caller then samples p_target.

    Its support is inside p_target's (p - q > 0 needs p > 0)."""
    r = np.maximum(np.asarray(p_target, dtype=np.float64) - q_draft, 0.0)
    mass = float(r.sum())
    if mass <= 0.0:
        return None
    r /= mass
    return r
