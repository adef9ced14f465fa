"""Tests for specli.engine.verify: greedy and rejection-sampling verification, cut_at_stop.

The statistical tests check losslessness: the first token(s) emitted after one round of
speculative sampling must be distributed exactly as the target p, whatever q is.

Bound used for total variation (TV) between the empirical frequencies of N draws and p
over V outcomes: E[TV] <= 0.5 * sum_i sqrt(p_i (1 - p_i) / N) <= 0.5 * sqrt(V / N)
(Cauchy-Schwarz), and TV moves by at most 1/N per draw, so by McDiarmid
P(TV > E[TV] + t) <= exp(-2 N t^2). With V <= 16 and N = 40_000: E[TV] <= 0.01, and
t = 0.01 gives a false-failure probability <= exp(-8) ~ 3e-4 (the seeds are fixed
anyway). Hence TV_BOUND = 0.02. Each check is paired with a deliberately broken
residual step whose exact TV (computed analytically) is far above the bound, and the
test asserts the broken run fails it, so the check has teeth.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import pytest

import specli.engine.verify as verify_mod
from specli.engine.sampling import probs_from_logits, sample
from specli.engine.verify import cut_at_stop, verify_greedy, verify_rejection
from specli.types import SamplingParams, Verdict

V = 8
N_DRAWS = 40_000
TV_BOUND = 0.02  # 2 * 0.5 * sqrt(16 / 40_000), see module docstring
EOS = 2


def peaked(winner: int, n_vocab: int = V) -> np.ndarray:
    row = np.zeros(n_vocab, dtype=np.float32)
    row[winner] = 5.0
    return row


def point(token: int, n_vocab: int = V) -> np.ndarray:
    row = np.zeros(n_vocab)
    row[token] = 1.0
    return row


class Recording(Sequence[Any]):
    """A lazy Sequence that records which indices were read."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows
        self.accessed: list[int] = []

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            raise AssertionError("verification must index rows one at a time")
        self.accessed.append(i)
        return self._rows[i]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Any]:
        raise AssertionError("verification must index rows, not iterate them")


def tv(counts: np.ndarray, p: np.ndarray) -> float:
    return 0.5 * float(np.abs(counts / counts.sum() - p).sum())


# --- greedy ----------------------------------------------------------------------------


def test_greedy_all_accepted_plus_bonus() -> None:
    rows = [peaked(3), peaked(1), peaked(4), peaked(6)]
    assert verify_greedy([3, 1, 4], rows) == Verdict(n_accepted=3, next_token=6)


def test_greedy_mismatch_at_first_position() -> None:
    rows = [peaked(5), peaked(1), peaked(4), peaked(6)]
    assert verify_greedy([3, 1, 4], rows) == Verdict(n_accepted=0, next_token=5)


def test_greedy_mismatch_mid_draft_is_lazy() -> None:
    rows = Recording([peaked(3), peaked(7), peaked(4), peaked(6)])
    assert verify_greedy([3, 1, 4], rows) == Verdict(n_accepted=1, next_token=7)
    assert rows.accessed == [0, 1]


def test_greedy_empty_draft_returns_target_token() -> None:
    assert verify_greedy([], [peaked(2)]) == Verdict(n_accepted=0, next_token=2)


def test_greedy_ties_resolve_to_lowest_index() -> None:
    row = np.array([0.0, 1.0, 1.0, 0.5], dtype=np.float32)
    assert verify_greedy([2], [row, row]) == Verdict(0, 1)
    assert verify_greedy([1], [row, row]) == Verdict(1, 1)


# --- cut_at_stop -----------------------------------------------------------------------


def is_eos(token: int) -> bool:
    return token == EOS


def test_eos_inside_draft_cuts_after_it() -> None:
    draft = [5, EOS, 7]
    verdict = verify_greedy(draft, [peaked(5), peaked(EOS), peaked(7), peaked(1)])
    assert verdict == Verdict(3, 1)
    emitted = draft[: verdict.n_accepted] + [verdict.next_token]
    assert cut_at_stop(emitted, is_eos, max_new=100) == ([5, EOS], "stop")


def test_max_tokens_mid_draft() -> None:
    draft = [5, 6, 7]
    verdict = verify_greedy(draft, [peaked(5), peaked(6), peaked(7), peaked(1)])
    emitted = draft[: verdict.n_accepted] + [verdict.next_token]
    assert cut_at_stop(emitted, is_eos, max_new=2) == ([5, 6], "length")


def test_cut_at_stop_edge_cases() -> None:
    assert cut_at_stop([5, 6, EOS], is_eos, max_new=3) == ([5, 6, EOS], "stop")  # EOG wins
    assert cut_at_stop([5, 6, EOS], is_eos, max_new=2) == ([5, 6], "length")
    assert cut_at_stop([5, 6, 7], is_eos, max_new=3) == ([5, 6, 7], "length")  # budget spent
    assert cut_at_stop([5, 6, 7], is_eos, max_new=4) == ([5, 6, 7], None)
    assert cut_at_stop([EOS], is_eos, max_new=1) == ([EOS], "stop")
    assert cut_at_stop([5], is_eos, max_new=0) == ([], "length")
    assert cut_at_stop([], is_eos, max_new=3) == ([], None)
    seen: list[int] = []

    def record(token: int) -> bool:
        seen.append(token)
        return token == EOS

    cut_at_stop([5, EOS, 7, 8], record, max_new=10)
    assert seen == [5, EOS]


# --- rejection sampling: certain outcomes ----------------------------------------------


def test_rejection_p_equals_one_hot_q_always_accepted() -> None:
    draft = [3, 1, 4]
    p_rows = [point(3), point(1), point(4), point(6)]
    for seed in range(50):
        rng = np.random.default_rng(seed)
        assert verify_rejection(draft, p_rows, None, rng) == Verdict(3, 6)
        assert verify_rejection(draft, p_rows, p_rows[:3], rng) == Verdict(3, 6)


def test_rejection_q_mass_where_p_has_none_always_rejected() -> None:
    p = np.array([0.0, 0.3, 0.7, 0, 0, 0, 0, 0])
    q = np.array([0.6, 0.4, 0.0, 0, 0, 0, 0, 0])
    # residual = max(p - q, 0) = only token 2
    for seed in range(50):
        rng = np.random.default_rng(seed)
        assert verify_rejection([0], [p, point(5)], [q], rng) == Verdict(0, 2)
        # deterministic drafter proposing an impossible token: residual is p itself
        verdict = verify_rejection([0], [p, point(5)], None, rng)
        assert verdict.n_accepted == 0 and verdict.next_token in (1, 2)


def test_rejection_residual_none_falls_back_to_p() -> None:
    p = np.array([0.5, 0.5, 0.0, 0.0, 0, 0, 0, 0])
    for seed in range(20):
        # q == p but the token has zero mass under both (a buggy drafter): reject, draw p
        verdict = verify_rejection([3], [p, point(5)], [p.copy()], np.random.default_rng(seed))
        assert verdict.n_accepted == 0 and verdict.next_token in (0, 1)


def test_rejection_is_lazy_after_rejection() -> None:
    draft = [3, 4, 5, 6]
    p_rows = Recording([point(3), point(1), point(5), point(6), point(7)])
    q_rows = Recording([point(3), point(4), point(5), point(6)])
    for seed in range(10):
        p_rows.accessed.clear()
        q_rows.accessed.clear()
        verdict = verify_rejection(draft, p_rows, q_rows, np.random.default_rng(seed))
        assert verdict == Verdict(1, 1)
        assert p_rows.accessed == [0, 1] and q_rows.accessed == [0, 1]


def test_rejection_empty_draft_samples_from_p() -> None:
    rows = Recording([point(4)])
    assert verify_rejection([], rows, None, np.random.default_rng(0)) == Verdict(0, 4)
    assert rows.accessed == [0]


# --- rejection sampling: distributions -------------------------------------------------

P_HAND = np.array([0.30, 0.25, 0.15, 0.10, 0.08, 0.06, 0.04, 0.02])
Q_HAND = np.array([0.05, 0.10, 0.40, 0.05, 0.25, 0.05, 0.00, 0.10])


def first_token_counts(
    p: np.ndarray, q: np.ndarray, seed: int, deterministic: bool = False, n: int = N_DRAWS
) -> np.ndarray:
    """Draft one token from q (or argmax q), verify it, count the first emitted token."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(p.size, dtype=np.int64)
    bonus = np.full(p.size, 1.0 / p.size)
    d_fixed = int(np.argmax(q))
    for _ in range(n):
        d = d_fixed if deterministic else sample(q, rng)
        verdict = verify_rejection([d], [p, bonus], None if deterministic else [q], rng)
        counts[d if verdict.n_accepted == 1 else verdict.next_token] += 1
    return counts


def broken_tv(p: np.ndarray, q: np.ndarray, replacement: np.ndarray) -> float:
    """Exact TV to p when rejections draw from `replacement` instead of the residual."""
    overlap = np.minimum(p, q)
    out = overlap + (1.0 - overlap.sum()) * replacement
    return 0.5 * float(np.abs(out - p).sum())


def chi_square_ok(counts: np.ndarray, p: np.ndarray, z: float = 3.09) -> bool:
    """Pearson chi-square goodness of fit over p's support at alpha ~ 1e-3, critical
    value by the Wilson-Hilferty approximation (no scipy). Zero-p cells must be empty."""
    on = p > 0
    if counts[~on].any():
        return False
    expected = p[on] * counts.sum()
    stat = float(((counts[on] - expected) ** 2 / expected).sum())
    df = int(on.sum()) - 1
    if df == 0:
        return True
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat < critical


def truncated_pair(params: SamplingParams, seed: int, n_vocab: int = 16) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    target = (rng.standard_normal(n_vocab) * 2).astype(np.float32)
    drafty = target + (rng.standard_normal(n_vocab) * 1.5).astype(np.float32)
    return probs_from_logits(target, params), probs_from_logits(drafty, params)


def test_lossless_hand_made_overlapping() -> None:
    counts = first_token_counts(P_HAND, Q_HAND, seed=1)
    assert tv(counts, P_HAND) < TV_BOUND
    assert chi_square_ok(counts, P_HAND)


def test_lossless_disjoint_supports() -> None:
    p = np.array([0, 0, 0, 0.4, 0.3, 0.2, 0.1, 0])
    q = np.array([0.5, 0.3, 0.2, 0, 0, 0, 0, 0])
    counts = first_token_counts(p, q, seed=2)
    assert tv(counts, p) < TV_BOUND
    assert chi_square_ok(counts, p)


def test_lossless_deterministic_drafter() -> None:
    counts = first_token_counts(P_HAND, Q_HAND, seed=3, deterministic=True)
    assert tv(counts, P_HAND) < TV_BOUND
    assert chi_square_ok(counts, P_HAND)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.9, top_k=6),
        SamplingParams(temperature=1.1, top_p=0.8),
        SamplingParams(temperature=0.7, top_k=10, top_p=0.9, min_p=0.05),
    ],
    ids=["top_k", "top_p", "combined"],
)
def test_lossless_truncated_distributions(params: SamplingParams) -> None:
    p, q = truncated_pair(params, seed=4)
    # truncation gives p and q different supports: that is the interesting case
    assert set(np.flatnonzero(p)) != set(np.flatnonzero(q))
    counts = first_token_counts(p, q, seed=5)
    assert tv(counts, p) < TV_BOUND
    assert chi_square_ok(counts, p)


@pytest.mark.parametrize(
    ("p", "q", "broken"),
    [
        (P_HAND, Q_HAND, "p"),
        (P_HAND, Q_HAND, "q"),
        (np.array([0, 0, 0, 0.4, 0.3, 0.2, 0.1, 0]), np.array([0.5, 0.3, 0.2, 0, 0, 0, 0, 0]), "q"),
    ],
    ids=["from_p", "from_q", "disjoint_from_q"],
)
def test_broken_residual_is_detected(
    p: np.ndarray, q: np.ndarray, broken: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bad_residual(p_target: np.ndarray, q_draft: np.ndarray) -> np.ndarray:
        return p_target if broken == "p" else q_draft

    expected_tv = broken_tv(p, q, p if broken == "p" else q)
    assert expected_tv > 5 * TV_BOUND
    monkeypatch.setattr(verify_mod, "residual", bad_residual)
    counts = first_token_counts(p, q, seed=6)
    assert tv(counts, p) > TV_BOUND
    assert abs(tv(counts, p) - expected_tv) < TV_BOUND
    assert not chi_square_ok(counts, p)


def test_lossless_two_token_draft_joint() -> None:
    """Two-token draft, context-dependent rows: the first emitted token follows p0 and
    the first two emitted tokens follow p0(a) * p1[a](b)."""
    n_vocab = 6
    rng_setup = np.random.default_rng(8)

    def dirichlet(*shape: int) -> np.ndarray:
        return rng_setup.dirichlet(np.full(n_vocab, 0.7), size=shape or None)

    p0, q0 = dirichlet(), dirichlet()
    p1, q1 = dirichlet(n_vocab), dirichlet(n_vocab)  # row per previous token
    p2 = dirichlet(n_vocab, n_vocab)
    rng = np.random.default_rng(9)
    joint = np.zeros((n_vocab, n_vocab), dtype=np.int64)
    for _ in range(N_DRAWS):
        d0 = sample(q0, rng)
        d1 = sample(q1[d0], rng)
        verdict = verify_rejection([d0, d1], [p0, p1[d0], p2[d0, d1]], [q0, q1[d0]], rng)
        emitted = [d0, d1][: verdict.n_accepted] + [verdict.next_token]
        if len(emitted) == 1:  # rejected at 0: the next step is a plain target draw
            emitted.append(sample(p1[emitted[0]], rng))
        joint[emitted[0], emitted[1]] += 1
    assert tv(joint.sum(axis=1), p0) < TV_BOUND
    assert chi_square_ok(joint.sum(axis=1), p0)
    # 36 cells: E[TV] <= 0.5 * sqrt(36 / 40_000) = 0.015, plus t = 0.01 -> 0.025
    assert tv(joint.ravel(), (p0[:, None] * p1).ravel()) < 0.025
    assert chi_square_ok(joint.ravel(), (p0[:, None] * p1).ravel())


def cut_draft_counts(p: np.ndarray, q: np.ndarray, allowed: np.ndarray, seed: int, use_q_after: bool) -> np.ndarray:
    """Draft one token from q; a grammar forbids some (p is 0 there): such a draft is cut
    before verification and only q_after is passed on. Count the first emitted token."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(p.size, dtype=np.int64)
    bonus = np.full(p.size, 1.0 / p.size)
    for _ in range(N_DRAWS):
        d = sample(q, rng)
        if allowed[d]:
            verdict = verify_rejection([d], [p, bonus], [q], rng)
            counts[d if verdict.n_accepted == 1 else verdict.next_token] += 1
        else:
            counts[verify_rejection([], [p], None, rng, q_after=q if use_q_after else None).next_token] += 1
    return counts


def test_cut_draft_with_q_after_keeps_the_masked_distribution() -> None:
    """A draft cut where the grammar forbids its token draws the next token from
    residual(p, q): the rejection verification would have made. Drawing from p there
    instead over-weights what q under-proposes (detected)."""
    allowed = np.array([True, True, False, True, False, True, True, True])
    p = np.where(allowed, P_HAND, 0.0)
    p /= p.sum()
    assert chi_square_ok(cut_draft_counts(p, Q_HAND, allowed, 11, True), p)
    assert not chi_square_ok(cut_draft_counts(p, Q_HAND, allowed, 11, False), p)
