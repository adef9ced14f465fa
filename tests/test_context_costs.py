"""Batches priced by the context they attend to: the calibrated growth of the batch
curve with cached tokens, as auto's cost model uses it (pure), and its measurement on
a real model."""

from __future__ import annotations

from typing import Any

import numpy as np

from specli.drafters.auto.costs import CostModel, interpolate
from specli.drafters.auto.policy import AcceptanceStats, choose
from specli.runtime.measure.calibration import CONTEXT_SIZES, Calibration, context_points, with_contexts

SIZES = [1, 2, 4, 8, 16, 33]
# the F16 target on this machine (2 threads): plain steps per batch at 128 cached tokens,
# and at 2048, 4096 and 8192 (issue #28's measurement)
TABLE = [1.0, 1.31, 1.44, 2.06, 2.80, 5.03]
CONTEXTS = [2048, 4096, 8192]
AT = [[1.34, 1.63, 2.55, 3.87, 7.08], [1.19, 1.59, 2.50, 3.80, 7.20], [1.46, 2.07, 3.63, 6.29, 13.43]]
GROWTH_SIZES = [2, 4, 8, 16, 33]


def model(sizes: list[int] = GROWTH_SIZES, at: list[list[float]] = AT) -> CostModel:
    growth = [[r / interpolate(SIZES, TABLE, n) for n, r in zip(sizes, row)] for row in at]
    return CostModel(0.08, list(SIZES), list(TABLE), contexts=list(CONTEXTS), growth_sizes=list(sizes),
                     growth=growth)


def test_a_batch_costs_what_was_measured_at_its_context() -> None:
    costs = model()
    assert costs.batch_ratio(16) == interpolate(SIZES, TABLE, 16)  # no context set: the table
    for ctx, row in zip(CONTEXTS, AT):
        costs.context = ctx
        for n, r in zip(GROWTH_SIZES, row):
            assert abs(costs.batch_ratio(n) - r) < 1e-6
            assert abs(costs.batch_ratios(33)[n - 1] - r) < 1e-6
    costs.context = 6144  # between two points: between their costs
    assert AT[1][3] < costs.batch_ratio(16) < AT[2][3]
    costs.context = 12288  # past the last point: attention keeps growing with the context
    assert costs.batch_ratio(16) > AT[2][3]


def test_auto_drafts_shorter_where_long_context_makes_long_batches_dear() -> None:
    costs = model()
    stats = {"ngram": AcceptanceStats(prior=0.9, prior_weight=1e9)}
    ks = []
    for ctx in (128, 4096, 8192):
        costs.context = ctx
        ks.append(choose(costs, stats, {"ngram": 32}).k)
    assert ks[0] > ks[2] >= 1 and ks[0] >= ks[1] >= ks[2]


def test_auto_drafts_to_the_batch_size_that_is_cheap_at_its_context() -> None:
    """The Q4_K_M target at ~4.7k cached tokens (2 threads): 63 rows cost 26 plain steps,
    64 rows 13.9 (CPU flash attention tiled from 64 query rows), 65 rows 18.4. A draft
    that is nearly certain goes to 64 rows there."""
    sizes = [*GROWTH_SIZES, 63, 64, 65]
    long_ctx = [12.9 * n / 33 if n <= 63 else {64: 13.9, 65: 18.4}[n] for n in sizes]
    costs = model(sizes, [[interpolate(SIZES, TABLE, n) for n in sizes]] * 2 + [long_ctx])
    stats = {"ngram": AcceptanceStats(prior=0.98, prior_weight=1e9)}
    costs.context = 8192
    assert choose(costs, stats, {"ngram": 64}).k == 63
    assert costs.batch_ratio(64) < costs.batch_ratio(63) and costs.batch_ratio(64) < costs.batch_ratio(65)


def test_costs_as_measured_at_long_context_are_no_drift() -> None:
    """Verifications that cost what the context axis says: nothing to correct."""
    costs = model()
    rng = np.random.default_rng(0)
    for _ in range(80):
        ctx = int(rng.integers(3000, 9000))
        costs.context = ctx
        k = int(rng.integers(1, 33))
        truth = 0.08 * float(costs.growth_at(k + 1, ctx)[k]) * interpolate(SIZES, TABLE, k + 1)
        costs.observe_verify(k, truth, k, context=ctx)
    assert not costs.drifted and abs(costs.level - 1) < 0.02
    costs.context = 8192
    assert abs(costs.batch_ratio(16) / AT[2][3] - 1) < 0.05


def test_context_points_and_their_measurement(smol: Any) -> None:
    assert context_points(4096) == [1024, 2048, 4023] and context_points(512) == []
    cal = Calibration(0.01, [1, 2, 33], [1.0, 1.5, 10.0])
    longer = with_contexts(cal, smol, smol.tokenize("def f(x):\n    return x * 2\n\n" * 8))
    assert longer is not None and longer.contexts == context_points(smol.n_ctx) and len(longer.contexts) >= 3
    assert all(len(row) == len(CONTEXT_SIZES) and min(row) > 0.3 for row in longer.context_ratios)
    assert all(t > 0 for t in longer.context_t1) and smol.n_past == 0
    assert with_contexts(longer, smol, [1, 2, 3]) is None  # measured once per context length
