"""This machine's costs as auto's pricing sees them: a plain target step `t1`, tracked
online, and a batch of n tokens as a ratio to it (the calibrated table, corrected by
the batches actually verified).

Costs are held as ratios to a plain step, so a machine that is uniformly slower or
faster than at calibration changes nothing but t1. A batch-cost curve that is wrong in
shape or level (a calibration taken on a busy machine) is caught by the batches
actually verified: their seconds correct the curve's level at once when they disagree
with it twice in a row by more than DRIFT, and `drifted` tells the caller to store the
corrected table.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

DRIFT = 1.5  # observed / predicted cost beyond this factor (either way) is drift, not noise
# steps between the plain steps that measure t1 again while auto keeps drafting (else a
# wrong t1 is never corrected); doubles while t1 holds, up to the cap
PLAIN_EVERY = (32, 256)
SEEN_MIN, SEEN_KEEP = 3, 5  # a batch size verified this often is priced by the median of its last costs


def chunked_verify_costs(batch_cost: Sequence[float], chunk: int, reach: Sequence[float]) -> list[float]:
    """Expected seconds to verify k + 1 tokens in chunks of `chunk` rows that stop at the
    first rejected token: chunk j (rows j*chunk ..) is decoded only when the draft
    tokens before it were all accepted. batch_cost[n - 1]: one batch of n tokens."""
    out = []
    for k in range(len(reach)):
        n, total, start = k + 1, 0.0, 0
        while start < n:
            size = min(chunk, n - start)
            total += reach[min(start, k)] * batch_cost[size - 1]
            start += size
        out.append(total)
    return out


class Ema:
    """Exponential moving average."""

    def __init__(self, value: float, alpha: float = 0.1) -> None:
        self.value, self.alpha = value, alpha

    def add(self, x: float) -> None:
        self.value += self.alpha * (x - self.value)


def interpolate(sizes: Sequence[int], values: Sequence[float], n: int) -> float:
    """Piecewise-linear value at n through the points (sizes[i], values[i]); past the
    last point the last segment's slope continues (never decreasing)."""
    i = bisect.bisect_left(sizes, n)
    if i < len(sizes) and sizes[i] == n:
        return values[i]
    if i == 0:
        return values[0]
    if i == len(sizes):
        if len(sizes) == 1:
            return values[0] * n / sizes[0]
        i = len(sizes) - 1
        slope = max(0.0, (values[i] - values[i - 1]) / (sizes[i] - sizes[i - 1]))
        return values[i] + slope * (n - sizes[i])
    lo, hi = sizes[i - 1], sizes[i]
    return values[i - 1] + (values[i] - values[i - 1]) * (n - lo) / (hi - lo)


@dataclass
class CostModel:
    """This machine's costs: `t1` seconds for a plain target step, tracked online;
    `ratios[i]`: a target batch of `sizes[i]` tokens in plain steps (sizes[0] = 1);
    `draft_ratio`: one draft-model token in plain steps; `chunk`: verify in chunks of
    this many rows (exact mode), None = the whole draft in one batch."""

    t1: float
    sizes: list[int]
    ratios: list[float]
    draft_ratio: float = 0.0
    chunk: int | None = None
    level: float = 1.0  # online correction of every batch ratio (n >= 2)
    ngram_step: float = 2e-5
    drifted: bool = False  # observations disagreed with the table: store the corrected one
    corrections: int = 0  # times the table's level or t1 was corrected for drift
    _t1: Ema = field(init=False, repr=False)
    _off: int = field(default=0, init=False, repr=False)  # consecutive observations off by > DRIFT
    _t1_off: int = field(default=0, init=False, repr=False)  # consecutive plain steps off by > DRIFT
    _since_plain: int = field(default=0, init=False, repr=False)  # verifications since a plain step
    _plain_every: int = field(default=PLAIN_EVERY[0], init=False, repr=False)
    # batch size -> its last SEEN_KEEP costs in plain steps (one-batch verification), and
    # the correction of the table they make (sizes ascending, observed / table)
    _seen: dict[int, deque[float]] = field(default_factory=dict, init=False, repr=False)
    _fix_sizes: list[int] = field(default_factory=list, init=False, repr=False)
    _fix_values: list[float] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self._t1 = Ema(self.t1, 0.2)

    @classmethod
    def from_measured(cls, verify: Sequence[float], draft_step: float) -> CostModel:
        """From seconds per batch of 1, 2, ... tokens and per draft-model token."""
        t1 = verify[0]
        return cls(t1, list(range(1, len(verify) + 1)), [v / t1 for v in verify], draft_step / t1)

    @property
    def step(self) -> float:
        """Seconds of a plain target step, as observed lately."""
        return self._t1.value

    @property
    def doubting(self) -> bool:
        """The last verification disagreed with the table by more than DRIFT."""
        return self._off > 0

    @property
    def plain_step_due(self) -> bool:
        """Time for a plain step, to measure t1 again (a drafter never shows it)."""
        return self._since_plain >= (1 if self._t1_off else self._plain_every)

    def batch_ratio(self, n: int) -> float:
        """A batch of n tokens, in plain steps (one batch, however large): the table,
        corrected by what batches verified lately cost (the median of each size's last
        costs, SEEN_MIN of them at least; between sizes seen the correction is
        interpolated, beyond them it stays flat), or at the current level where no size
        has been seen enough. The table's shape drifts with the context, so what batches
        cost now outweighs what the calibration measured."""
        if n <= 1:
            return 1.0
        table = interpolate(self.sizes, self.ratios, n)
        if not self._fix_sizes:
            return max(1.0, table * self.level)
        m = min(max(n, self._fix_sizes[0]), self._fix_sizes[-1])
        return max(1.0, table * interpolate(self._fix_sizes, self._fix_values, m))

    def _refit(self, n: int) -> None:
        """Size n's correction, once seen SEEN_MIN times: its median cost / the table (only
        the size just observed changes; the others' medians and table values stay)."""
        costs = self._seen[n]
        if len(costs) < SEEN_MIN:
            return
        fix = sorted(costs)[len(costs) // 2] / interpolate(self.sizes, self.ratios, n)
        i = bisect.bisect_left(self._fix_sizes, n)
        if i < len(self._fix_sizes) and self._fix_sizes[i] == n:
            self._fix_values[i] = fix
        else:
            self._fix_sizes.insert(i, n)
            self._fix_values.insert(i, fix)

    def batch_ratios(self, n_max: int) -> np.ndarray:
        """batch_ratio(n) for n = 1..n_max at once (auto prices every k each step)."""
        ns = np.arange(1, n_max + 1, dtype=np.float64)
        sizes = np.asarray(self.sizes, dtype=np.float64)
        table = np.interp(ns, sizes, self.ratios)
        if len(sizes) > 1:  # past the last size the last segment's slope continues (never down)
            slope = max(0.0, (self.ratios[-1] - self.ratios[-2]) / (sizes[-1] - sizes[-2]))
            table = np.where(ns > sizes[-1], self.ratios[-1] + slope * (ns - sizes[-1]), table)
        else:
            table = self.ratios[0] * ns / sizes[0]
        if self._fix_sizes:
            fix = np.interp(ns, self._fix_sizes, self._fix_values)  # flat beyond the sizes seen
        else:
            fix = np.full(n_max, self.level)
        out = np.maximum(1.0, table * fix)
        out[0] = 1.0
        return out

    def verify_costs(self, k_max: int, reach: Sequence[float] | None = None) -> list[float]:
        """Seconds to verify k + 1 tokens, k = 0..k_max; in exact mode the expected
        seconds given reach probabilities (see chunked_verify_costs)."""
        batch = (self.batch_ratios(k_max + 1) * self.step).tolist()
        if self.chunk is None or self.chunk > k_max:
            return batch
        return chunked_verify_costs(batch, self.chunk, reach or [1.0] * (k_max + 1))

    def decoded_batches(self, k: int, n_accepted: int | None = None) -> list[int]:
        """Sizes of the target batches that verifying k + 1 tokens decoded: one batch, or
        exact chunks up to the one holding the first rejected token."""
        n = k + 1
        if self.chunk is None:
            return [n]
        if n_accepted is not None:
            n = min(n, (n_accepted // self.chunk + 1) * self.chunk)
        return [min(self.chunk, n - start) for start in range(0, n, self.chunk)]

    def observe_verify(self, k: int, seconds: float, n_accepted: int | None = None) -> None:
        """A verification of k + 1 tokens took `seconds` (drafting excluded)."""
        if seconds <= 0:
            return
        if k == 0:
            self._observe_plain(seconds)
            return
        self._since_plain += 1
        batches = self.decoded_batches(k, n_accepted)
        raw = sum(interpolate(self.sizes, self.ratios, n) for n in batches) * self.level * self.step
        if self.chunk is None:
            self._seen.setdefault(k + 1, deque(maxlen=SEEN_KEEP)).append(seconds / self.step)
            self._refit(k + 1)
        off = seconds / max(raw, self.step * len(batches))  # against the table as priced without memory
        fix = seconds / raw if raw > 0 else 1.0  # against the table itself (it may be below 1)
        if off > DRIFT or off < 1 / DRIFT:
            self._off += 1
            if self._off >= 2:  # twice in a row: the table is wrong, not the moment
                self.level *= fix
                self.drifted = True
                self.corrections += 1
                self._off = 0
        else:
            self._off = 0
            self.level *= fix ** 0.1  # slow refinement in log space

    def _observe_plain(self, seconds: float) -> None:
        off = seconds / self.step if self.step > 0 else 1.0
        self._since_plain = 0
        if off > DRIFT or off < 1 / DRIFT:
            self._t1_off += 1
            self._plain_every = PLAIN_EVERY[0]
            if self._t1_off >= 2:  # twice in a row: t1 is wrong, not the moment
                self._t1.value = seconds
                self._seen.clear()  # ratios to the wrong t1
                self._fix_sizes.clear()
                self._fix_values.clear()
                self.drifted = True
                self.corrections += 1
                self._t1_off = 0
            return
        self._t1_off = 0
        self._plain_every = min(2 * self._plain_every, PLAIN_EVERY[1])
        self._t1.add(seconds)

    def observe_draft_step(self, seconds: float) -> None:
        if self.step > 0:
            self.draft_ratio += 0.1 * (seconds / self.step - self.draft_ratio)

    def draft_costs(self, kind: str, k_max: int, pending: int = 1) -> list[float]:
        """Cost of drafting k tokens: the draft model decodes `pending` catch-up
        tokens in one batch for the first, then one token each (its batches are
        assumed to scale like the target's)."""
        if kind in ("ngram", "suffix"):  # index lookups: no model
            return [0.0] + [self.ngram_step] * k_max
        step = self.draft_ratio * self.step
        catch_up = step * self.batch_ratio(pending)
        return [0.0] + [catch_up + step * (k - 1) for k in range(1, k_max + 1)]

    def corrected(self) -> tuple[float, list[float], float]:
        """(t1, ratios at `sizes`, draft_ratio) as observed: for the calibration cache."""
        return self.step, [self.batch_ratio(n) for n in self.sizes], self.draft_ratio
