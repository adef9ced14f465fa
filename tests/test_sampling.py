"""Tests for specli.engine.sampling: the sampler chain, sample(), residual() and one_hot()."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specli.engine.sampling import one_hot, probs_from_logits, residual, sample
from specli.types import SamplingParams

N_VOCAB_BIG = 152_064  # Qwen-sized vocabulary


def softmax64(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    w = np.exp(z - z.max())
    return w / w.sum()


def logits_of(probs: list[float]) -> np.ndarray:
    return np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)


def support(probs: np.ndarray) -> set[int]:
    return set(np.flatnonzero(probs).tolist())


def reference_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Straightforward full-sort implementation of the same chain (float64 throughout):
    top-k, top-p, min-p on the temperature-1 distribution, then temperature."""
    x = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-x, kind="stable")  # descending, ties -> lowest index
    kept = order
    if 0 < params.top_k < x.size:
        kept = kept[: params.top_k]
    if params.top_p < 1.0:
        p = softmax64(x[kept])
        cum = np.cumsum(p)
        n_keep = int(np.argmax(cum >= params.top_p)) + 1 if cum[-1] >= params.top_p else kept.size
        kept = kept[:n_keep]
    if params.min_p > 0.0:
        p = softmax64(x[kept])
        kept = kept[p >= params.min_p * p.max()]
    out = np.zeros(x.size)
    out[kept] = softmax64(x[kept] / params.temperature)
    return out


# --- greedy / temperature -------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_greedy_is_one_hot_at_argmax_lowest_index_on_ties(temperature: float) -> None:
    logits = np.array([0.1, 2.0, -1.0, 2.0, 0.5], dtype=np.float32)
    probs = probs_from_logits(logits, SamplingParams(temperature=temperature, top_k=3))
    assert probs.dtype == np.float64
    np.testing.assert_array_equal(probs, [0, 1, 0, 0, 0])


def test_temperature_matches_hand_softmax() -> None:
    logits = np.array([1.0, 2.0, 3.0, 0.5, -2.0], dtype=np.float32)
    for temperature in (0.3, 0.7, 1.0, 2.5):
        e = np.exp(np.array([1.0, 2.0, 3.0, 0.5, -2.0]) / temperature)
        expected = e / e.sum()
        got = probs_from_logits(logits, SamplingParams(temperature=temperature))
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_output_shape_dtype_and_sum_on_big_vocab() -> None:
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(N_VOCAB_BIG) * 3).astype(np.float32)
    for params in (
        SamplingParams(temperature=0.8),
        SamplingParams(temperature=0.8, top_k=40),
        SamplingParams(temperature=0.8, top_p=0.9),
        SamplingParams(temperature=1.3, min_p=0.05),
        SamplingParams(temperature=0.6, top_k=50, top_p=0.95, min_p=0.02),
    ):
        probs = probs_from_logits(logits, params)
        assert probs.shape == logits.shape and probs.dtype == np.float64
        assert probs.min() >= 0.0
        assert abs(probs.sum() - 1.0) < 1e-12
        assert probs[int(np.argmax(logits))] > 0.0


def test_minus_inf_logits_get_zero_probability() -> None:
    logits = np.array([1.0, -np.inf, 0.0, -np.inf], dtype=np.float32)
    probs = probs_from_logits(logits, SamplingParams(temperature=1.0, top_p=0.999))
    assert support(probs) == {0, 2}
    with pytest.raises(ValueError):
        probs_from_logits(np.full(4, -np.inf, dtype=np.float32), SamplingParams(temperature=1.0))


# --- top-k -----------------------------------------------------------------------------


def test_top_k_keeps_exactly_k_largest() -> None:
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(1000).astype(np.float32)
    for k in (1, 5, 40, 999):
        probs = probs_from_logits(logits, SamplingParams(temperature=1.0, top_k=k))
        expected = set(np.argsort(-logits, kind="stable")[:k].tolist())
        assert support(probs) == expected
        kept = sorted(expected)
        np.testing.assert_allclose(probs[kept], softmax64(logits[kept]), rtol=1e-12)


def test_top_k_ties_keep_exactly_k_lowest_indices_first() -> None:
    logits = np.array([1.0, 3.0, 0.0, 3.0, 3.0, 2.0], dtype=np.float32)
    assert support(probs_from_logits(logits, SamplingParams(1.0, top_k=2))) == {1, 3}
    assert support(probs_from_logits(logits, SamplingParams(1.0, top_k=4))) == {1, 3, 4, 5}
    flat = np.zeros(10, dtype=np.float32)
    probs = probs_from_logits(flat, SamplingParams(1.0, top_k=3))
    np.testing.assert_allclose(probs, [1 / 3] * 3 + [0] * 7)


def test_top_k_off_or_at_least_vocab_is_noop() -> None:
    logits = np.array([0.3, 1.0, -0.5], dtype=np.float32)
    full = probs_from_logits(logits, SamplingParams(1.0))
    for k in (0, 3, 10):
        np.testing.assert_allclose(probs_from_logits(logits, SamplingParams(1.0, top_k=k)), full)


# --- top-p -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [(0.3, {3}), (0.6, {3, 0}), (0.75, {3, 0}), (0.85, {3, 0, 4}), (0.97, {3, 0, 4, 1})],
)
def test_top_p_keeps_smallest_sorted_prefix(top_p: float, kept: set[int]) -> None:
    #                    0     1      2      3     4
    base = [0.30, 0.04, 0.01, 0.50, 0.15]
    probs = probs_from_logits(logits_of(base), SamplingParams(1.0, top_p=top_p))
    assert support(probs) == kept
    idx = sorted(kept)
    np.testing.assert_allclose(probs[idx], np.array(base)[idx] / sum(base[i] for i in idx))


def test_top_p_is_decided_at_temperature_one() -> None:
    base = [0.30, 0.04, 0.01, 0.50, 0.15]
    for temperature in (0.2, 1.0, 5.0):
        probs = probs_from_logits(logits_of(base), SamplingParams(temperature, top_p=0.75))
        assert support(probs) == {0, 3}


def test_top_p_ties_lowest_index_first() -> None:
    # five equal tokens at 0.2 each: top_p=0.5 needs 3 of them -> indices 0, 1, 2
    probs = probs_from_logits(np.zeros(5, dtype=np.float32), SamplingParams(1.0, top_p=0.5))
    assert support(probs) == {0, 1, 2}


@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.9, 0.95, 0.999])
def test_top_p_big_vocab_matches_full_sort_reference(scale: float, top_p: float) -> None:
    # scale 0.5: flat (wide nucleus, exercises widening), 4.0: peaked (small nucleus)
    rng = np.random.default_rng(int(scale * 100 + top_p * 1000))
    logits = (rng.standard_normal(N_VOCAB_BIG) * scale).astype(np.float32)
    params = SamplingParams(temperature=0.7, top_p=top_p)
    got = probs_from_logits(logits, params)
    ref = reference_probs(logits, params)
    assert support(got) == support(ref)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-15)


def test_top_p_big_vocab_with_ties_matches_reference() -> None:
    rng = np.random.default_rng(7)
    logits = rng.integers(0, 12, N_VOCAB_BIG).astype(np.float32)  # huge tie groups
    for top_p in (0.3, 0.8):
        params = SamplingParams(temperature=1.0, top_p=top_p)
        assert support(probs_from_logits(logits, params)) == support(reference_probs(logits, params))


# --- min-p and combinations ------------------------------------------------------------


def test_min_p_relative_to_max_at_temperature_one() -> None:
    base = [0.06, 0.5, 0.1, 0.3, 0.04]
    for temperature in (0.5, 1.0, 3.0):
        probs = probs_from_logits(logits_of(base), SamplingParams(temperature, min_p=0.15))
        assert support(probs) == {1, 2, 3}  # p >= 0.15 * 0.5 = 0.075
    probs = probs_from_logits(logits_of(base), SamplingParams(1.0, min_p=0.15))
    np.testing.assert_allclose(probs, np.array([0, 0.5, 0.1, 0.3, 0]) / 0.9)
    # min_p > 1 would keep nothing; the argmax always survives
    assert support(probs_from_logits(logits_of(base), SamplingParams(1.0, min_p=2.0))) == {1}


def test_combination_top_k_then_top_p_then_min_p_then_temperature() -> None:
    #        0     1     2     3      4     5
    base = [0.10, 0.35, 0.04, 0.20, 0.06, 0.25]
    params = SamplingParams(temperature=0.5, top_k=4, top_p=0.8, min_p=0.6)
    # top-k 4 -> {1, 5, 3, 0}, renormalised /0.9: .389 .278 .222 .111
    # top-p 0.8 -> cum .389 .667 .889 -> {1, 5, 3}
    # min-p 0.6 -> keep p >= 0.21 -> {1, 5}; temperature 0.5 -> p^2
    probs = probs_from_logits(logits_of(base), params)
    expected = np.zeros(6)
    expected[[1, 5]] = np.array([0.35**2, 0.25**2]) / (0.35**2 + 0.25**2)
    np.testing.assert_allclose(probs, expected, rtol=1e-6)
    np.testing.assert_allclose(probs, reference_probs(logits_of(base), params), rtol=1e-12)


def test_combination_big_vocab_matches_reference() -> None:
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(N_VOCAB_BIG) * 2).astype(np.float32)
    for params in (
        SamplingParams(0.8, top_k=200, top_p=0.9, min_p=0.05),
        SamplingParams(1.2, top_p=0.95, min_p=0.01),
        SamplingParams(0.9, min_p=0.1),
    ):
        got = probs_from_logits(logits, params)
        np.testing.assert_allclose(got, reference_probs(logits, params), rtol=1e-9, atol=1e-15)


@settings(max_examples=200, deadline=None)
@given(
    logits=st.lists(st.floats(-30, 30), min_size=1, max_size=40),
    temperature=st.floats(0.05, 4.0),
    top_k=st.integers(0, 45),
    top_p=st.floats(0.0, 1.0),
    min_p=st.floats(0.0, 1.0),
)
def test_property_valid_distribution(
    logits: list[float], temperature: float, top_k: int, top_p: float, min_p: float
) -> None:
    x = np.asarray(logits, dtype=np.float32)
    params = SamplingParams(temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    probs = probs_from_logits(x, params)
    assert probs.shape == x.shape and probs.min() >= 0.0
    assert abs(probs.sum() - 1.0) < 1e-9
    assert probs[int(np.argmax(x))] > 0.0
    if top_k > 0:
        assert np.count_nonzero(probs) <= top_k
    # the kept set is a prefix of the descending-logit order
    kept = probs > 0
    if not kept.all():
        assert x[kept].min() >= x[~kept].max()
    # kept tokens pass min-p on the temperature-1 distribution
    assert np.all(x[kept] - x.max() >= np.log(max(min_p, 1e-300)) - 1e-4)


# --- sample / residual / one_hot -------------------------------------------------------


def test_sample_never_returns_zero_probability_index() -> None:
    rng = np.random.default_rng(11)
    probs = np.zeros(50)
    probs[[0, 7, 8, 49]] = [0.1, 1e-9, 0.6, 0.3]
    seen = {sample(probs, rng) for _ in range(20_000)}
    assert seen <= {0, 7, 8, 49} and {0, 8, 49} <= seen
    # unnormalised / drifted input is fine
    drifted = probs * (1 - 1e-12)
    assert all(probs[sample(drifted, rng)] > 0 for _ in range(2000))


def test_sample_frequencies() -> None:
    rng = np.random.default_rng(12)
    probs = np.array([0.5, 0.0, 0.25, 0.125, 0.125])
    counts = np.bincount([sample(probs, rng) for _ in range(40_000)], minlength=5)
    assert counts[1] == 0
    assert 0.5 * np.abs(counts / counts.sum() - probs).sum() < 0.01


class _TopUniform:
    """A stand-in generator whose uniform is the largest float below 1."""

    def random(self) -> float:
        return 1.0 - 2.0**-53


def test_sample_top_uniform_never_lands_on_trailing_zeros() -> None:
    probs = np.array([0.2, 0.8, 0.0, 0.0]) * 1.0000000001
    assert sample(probs, cast(np.random.Generator, _TopUniform())) == 1


def test_residual() -> None:
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.2, 0.5, 0.1, 0.2])
    r = residual(p, q)
    assert r is not None
    np.testing.assert_allclose(r, [0.75, 0.0, 0.25, 0.0])
    assert residual(p, p.copy()) is None
    # one-hot q: p with the drafted token zeroed, renormalised
    r = residual(p, one_hot(0, 4))
    assert r is not None
    np.testing.assert_allclose(r, [0, 0.6, 0.4, 0])


def test_one_hot() -> None:
    v = one_hot(3, 6)
    assert v.dtype == np.float64
    np.testing.assert_array_equal(v, [0, 0, 0, 1, 0, 0])


@pytest.mark.parametrize("scale", [0.5, 3.0, 10.0, 40.0])
def test_draft_stop_test_probability_is_the_softmax_top(scale: float) -> None:
    """The draft model's stop test leaves out logits 20 below the top: within 0.03 % of the
    exact softmax probability of the argmax."""
    from specli.drafters.draft_model import top_probability

    row = (np.random.default_rng(int(scale)).standard_normal(151936) * scale).astype(np.float32)
    exact = 1.0 / np.exp(row.astype(np.float64) - row.max()).sum()
    assert top_probability(row) == pytest.approx(exact, rel=3e-4)
    assert top_probability(row, int(row.argmax())) == top_probability(row)
