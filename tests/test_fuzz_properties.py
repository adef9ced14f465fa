"""Property tests (hypothesis) for specli.engine.verify: whatever the rows, drafts and seeds,
verification returns a well-formed Verdict and cut_at_stop a well-formed prefix."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specli.engine.verify import cut_at_stop, verify_greedy, verify_rejection
from specli.types import Verdict

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MAX_DRAFT = 6


@st.composite
def prob_row(draw: Any, n_vocab: int) -> np.ndarray:
    """A probability vector over n_vocab tokens, often with exact zeros, never all zero."""
    w = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-9, 1.0), st.just(1.0)),
                      min_size=n_vocab, max_size=n_vocab))
    if sum(w) <= 0.0:
        w[draw(st.integers(0, n_vocab - 1))] = 1.0
    row = np.asarray(w, dtype=np.float64)
    return row / row.sum()


@st.composite
def rejection_case(draw: Any) -> tuple[list[int], list[np.ndarray], list[np.ndarray] | None, int]:
    n_vocab = draw(st.integers(1, 8))
    draft = draw(st.lists(st.integers(0, n_vocab - 1), min_size=0, max_size=MAX_DRAFT))
    p_rows = [draw(prob_row(n_vocab)) for _ in range(len(draft) + 1)]
    q_rows = draw(st.one_of(st.none(), st.just([draw(prob_row(n_vocab)) for _ in draft])))
    seed = draw(st.integers(0, 2**63 - 1))
    return draft, p_rows, q_rows, seed


@FAST
@given(rejection_case())
def test_verify_rejection_well_formed(case: tuple[list[int], list[np.ndarray], list[np.ndarray] | None, int]) -> None:
    draft, p_rows, q_rows, seed = case
    v = verify_rejection(draft, p_rows, q_rows, np.random.default_rng(seed))
    assert isinstance(v, Verdict)
    assert 0 <= v.n_accepted <= len(draft)
    n_vocab = p_rows[0].size
    assert 0 <= v.next_token < n_vocab
    assert p_rows[v.n_accepted][v.next_token] > 0.0
    # an accepted draft token always had target mass; a rejected one is never re-emitted
    for i in range(v.n_accepted):
        assert p_rows[i][draft[i]] > 0.0
    if v.n_accepted < len(draft):
        assert v.next_token != draft[v.n_accepted]
    # same seed, same verdict
    assert verify_rejection(draft, p_rows, q_rows, np.random.default_rng(seed)) == v


@FAST
@given(rejection_case())
def test_verify_rejection_with_matching_q_never_rejects_where_p_equals_q(
    case: tuple[list[int], list[np.ndarray], list[np.ndarray] | None, int],
) -> None:
    """q == p accepts every draft token with p(d) > 0 (u * q < p with u < 1)."""
    draft, p_rows, _, seed = case
    v = verify_rejection(draft, p_rows, p_rows[: len(draft)], np.random.default_rng(seed))
    first_zero = next((i for i, d in enumerate(draft) if p_rows[i][d] <= 0.0), len(draft))
    assert v.n_accepted == first_zero
    assert p_rows[v.n_accepted][v.next_token] > 0.0


@st.composite
def greedy_case(draw: Any) -> tuple[list[int], list[np.ndarray]]:
    n_vocab = draw(st.integers(1, 8))
    draft = draw(st.lists(st.integers(0, n_vocab - 1), min_size=0, max_size=MAX_DRAFT))
    # small integer-valued logits make ties (lowest index wins) frequent
    rows = [np.asarray(draw(st.lists(st.integers(-3, 3), min_size=n_vocab, max_size=n_vocab)), dtype=np.float32)
            for _ in range(len(draft) + 1)]
    return draft, rows


@FAST
@given(greedy_case())
def test_verify_greedy_argmax_rule(case: tuple[list[int], list[np.ndarray]]) -> None:
    draft, rows = case
    v = verify_greedy(draft, rows)
    assert 0 <= v.n_accepted <= len(draft)
    best = [int(np.flatnonzero(r == r.max())[0]) for r in rows]  # lowest index on ties
    assert draft[: v.n_accepted] == best[: v.n_accepted]
    if v.n_accepted < len(draft):
        assert draft[v.n_accepted] != best[v.n_accepted]
    assert v.next_token == best[v.n_accepted]
    assert 0 <= v.next_token < rows[0].size


@FAST
@given(rejection_case())
def test_verify_greedy_on_probability_rows(case: tuple[list[int], list[np.ndarray], Any, int]) -> None:
    draft, p_rows, _, _ = case
    v = verify_greedy(draft, p_rows)
    assert 0 <= v.n_accepted <= len(draft)
    assert p_rows[v.n_accepted][v.next_token] > 0.0
    assert p_rows[v.n_accepted][v.next_token] == p_rows[v.n_accepted].max()


@FAST
@given(
    tokens=st.lists(st.integers(0, 9), max_size=12),
    eog=st.frozensets(st.integers(0, 9), max_size=3),
    max_new=st.integers(-2, 14),
)
def test_cut_at_stop_properties(tokens: list[int], eog: frozenset[int], max_new: int) -> None:
    asked: list[int] = []

    def is_eog(t: int) -> bool:
        asked.append(t)
        return t in eog

    out, reason = cut_at_stop(tokens, is_eog, max_new)
    assert len(out) <= max(max_new, 0)
    assert out == tokens[: len(out)]  # a prefix of the input
    assert all(t not in eog for t in out[:-1])  # nothing after the first EOG
    assert reason in (None, "stop", "length")
    if reason == "stop":
        assert out and out[-1] in eog
    elif out:
        assert out[-1] not in eog
    if reason is None:
        assert out == tokens and len(tokens) < max(max_new, 0)
    if reason == "length":
        assert len(out) == max(max_new, 0)
    # the whole input is emitted unless an EOG or the limit cut it
    first_eog = next((i for i, t in enumerate(tokens) if t in eog), None)
    expected = len(tokens) if first_eog is None else first_eog + 1
    assert len(out) == min(expected, max(max_new, 0))
    assert asked == tokens[: len(asked)] and len(asked) <= len(out)
