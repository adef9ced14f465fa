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
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

DRIFT = 1.5  # observed / predicted cost beyond this factor (either way) is drift, not noise
# verifications between the plain steps that measure t1 again while auto keeps drafting
# (else a wrong t1 is never corrected); doubling while t1 holds, soon again while in doubt
PLAIN_EVERY = (32, 256)
PLAIN_SOON = 4  # after a plain step 20-50 % off t1
SEEN_MIN, SEEN_KEEP = 3, 5  # a part of the batch curve seen this often is priced by the median of its last costs
SHAPE_DRIFT = 1.2  # a part of the curve (or t1) seen this far off the table, SEEN_MIN times: store the healed table
CATCH_UP_MIN = 32  # tokens: a draft model's catch-up this long is timed for its price per token
TABLE_CONTEXT = 1024  # the stored table describes batches at up to this many cached tokens (calibrated at 128)


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


class Fits:
    """Corrections of a cost table learned from the batches verified: by half-octave of
    batch size (2, 3, 4, 5-6, 7-9, 10-13, ...), the last SEEN_KEEP (size, observed / table)
    pairs, and once SEEN_MIN are in, their medians, interpolated between the parts seen
    and flat beyond them. Sizes rarely repeat (drafts come in any length), so sizes are
    pooled: a part of the curve heals after SEEN_MIN batches near it."""

    def __init__(self) -> None:
        self._seen: dict[int, deque[tuple[int, float]]] = {}  # half-octave -> its last (size, correction)
        self._parts: dict[int, tuple[float, float]] = {}  # half-octave seen enough -> (median size, correction)
        self.sizes: list[float] = []  # ascending: the median size of each part seen enough
        self.values: list[float] = []  # its median correction

    def __bool__(self) -> bool:
        return bool(self.sizes)

    def add(self, n: int, fix: float) -> None:
        part = round(2 * math.log2(n))
        seen = self._seen.setdefault(part, deque(maxlen=SEEN_KEEP))
        seen.append((n, fix))
        if len(seen) >= SEEN_MIN:  # only this part's medians change
            self._parts[part] = (_median([s for s, _ in seen]), _median([f for _, f in seen]))
            self._publish()

    def _publish(self) -> None:
        parts = [self._parts[p] for p in sorted(self._parts)]
        self.sizes, self.values = [p[0] for p in parts], [p[1] for p in parts]

    def at(self, n: int) -> float:
        return float(np.interp(n, self.sizes, self.values))

    def worst(self) -> float:
        """The largest correction either way, as a factor >= 1."""
        return max((max(v, 1 / v) for v in self.values), default=1.0)

    def scale(self, factor: float) -> None:
        """Every correction times `factor` (they were ratios to a t1 that was wrong)."""
        self._seen = {p: deque(((n, f * factor) for n, f in seen), maxlen=SEEN_KEEP) for p, seen in self._seen.items()}
        self._parts = {p: (size, f * factor) for p, (size, f) in self._parts.items()}
        self._publish()


def _median(xs: Sequence[float]) -> float:
    return sorted(xs)[len(xs) // 2]


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
    # one token drafted by each learned drafter (medusa, eagle), in plain steps
    heads_ratios: dict[str, float] = field(default_factory=dict)
    # the batch curve's growth with the context a batch attends to: growth[c][j] is a batch
    # of growth_sizes[j] tokens over contexts[c] cached tokens in plain steps there, over
    # the table's ratio (1 at the table's own short context; linear in the context past
    # the last point, as attention is)
    contexts: list[int] = field(default_factory=list)
    growth_sizes: list[int] = field(default_factory=list)
    growth: list[list[float]] = field(default_factory=list)
    context: int = 0  # cached tokens the batches priced next attend to (auto sets it each step)
    # the draft model's catch-up (prompt tokens its cache lacks), plain steps per token, as
    # observed (0 until seen): the target's batch curve prices it far too cheaply where the
    # target is memory-bound and the draft model compute-bound (an F16 target, a Q4 draft)
    catch_up_ratio: float = 0.0
    drifted: bool = False  # observations disagreed with the table: store the corrected one
    corrections: int = 0  # times the table's level or t1 was corrected for drift (at any context)
    _t1: Ema = field(init=False, repr=False)
    _off: int = field(default=0, init=False, repr=False)  # consecutive observations off by > DRIFT
    _t1_off: int = field(default=0, init=False, repr=False)  # consecutive plain steps off by > DRIFT
    _since_plain: int = field(default=0, init=False, repr=False)  # verifications since a plain step
    _plain_every: int = field(default=PLAIN_EVERY[0], init=False, repr=False)
    # the table's corrections by what batches verified lately cost: at any context (what
    # this run prices with) and at up to TABLE_CONTEXT cached tokens (what is stored)
    _fits: Fits = field(default_factory=Fits, init=False, repr=False)
    _fits_table: Fits = field(default_factory=Fits, init=False, repr=False)
    _t1_table: Ema = field(init=False, repr=False)  # plain steps at up to TABLE_CONTEXT tokens
    _n_t1_table: int = field(default=0, init=False, repr=False)
    _t1_doubts: list[float] = field(default_factory=list, init=False, repr=False)  # plain steps 20-50 % off t1

    def __post_init__(self) -> None:
        self._t1 = Ema(self.t1, 0.2)
        self._t1_table = Ema(self.t1, 0.2)
        self._growth_at: dict[tuple[int, int], np.ndarray] = {}

    def growth_at(self, n_max: int, context: int | None = None) -> np.ndarray:
        """The growth factor of batches of 1..n_max tokens at `context` cached tokens
        (default: the current one); all 1 without a measured context axis."""
        ctx = self.context if context is None else context
        if not self.contexts or ctx <= 0:
            return np.ones(n_max)
        key = (ctx // 64, n_max)
        if key not in self._growth_at:
            if len(self._growth_at) > 512:
                self._growth_at.clear()
            ns = np.arange(1, n_max + 1, dtype=np.float64)
            sizes = [1, *self.growth_sizes]
            rows = [np.ones(n_max), *(np.interp(ns, sizes, [1.0, *g]) for g in self.growth)]
            points = [0, *self.contexts]
            i = min(max(1, int(np.searchsorted(points, ctx))), len(points) - 1)  # the segment holding ctx
            lo, hi = points[i - 1], points[i]
            w = (ctx - lo) / (hi - lo)  # past the last point: the last segment goes on
            self._growth_at[key] = np.maximum(0.5, rows[i - 1] + w * (rows[i] - rows[i - 1]))
        return self._growth_at[key]

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
        return self._since_plain >= (1 if self._t1_off else PLAIN_SOON if self._t1_doubts else self._plain_every)

    def batch_ratio(self, n: int) -> float:
        """A batch of n tokens, in plain steps (one batch, however large): the table,
        corrected by what batches near n cost lately (`Fits`), or at the current level
        where no part of the curve has been seen enough. The table's shape drifts with
        the context and the machine's load, so what batches cost now outweighs what the
        calibration measured."""
        if n <= 1:
            return 1.0
        table = interpolate(self.sizes, self.ratios, n) * float(self.growth_at(n)[-1])
        return max(1.0, table * (self._fits.at(n) if self._fits else self.level))

    def batch_ratios(self, n_max: int, context: int | None = None) -> np.ndarray:
        """batch_ratio(n) for n = 1..n_max at once (auto prices every k each step), at
        `context` cached tokens (default: the current one)."""
        ns = np.arange(1, n_max + 1, dtype=np.float64)
        sizes = np.asarray(self.sizes, dtype=np.float64)
        table = np.interp(ns, sizes, self.ratios)
        if len(sizes) > 1:  # past the last size the last segment's slope continues (never down)
            slope = max(0.0, (self.ratios[-1] - self.ratios[-2]) / (sizes[-1] - sizes[-2]))
            table = np.where(ns > sizes[-1], self.ratios[-1] + slope * (ns - sizes[-1]), table)
        else:
            table = self.ratios[0] * ns / sizes[0]
        # flat beyond the sizes seen
        fix = np.interp(ns, self._fits.sizes, self._fits.values) if self._fits else np.full(n_max, self.level)
        out = np.maximum(1.0, table * fix * self.growth_at(n_max, context))
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

    def observe_verify(self, k: int, seconds: float, n_accepted: int | None = None, context: int = 0) -> None:
        """A verification of k + 1 tokens on top of `context` cached tokens took `seconds`
        (drafting excluded)."""
        if seconds <= 0:
            return
        if k == 0:
            self._observe_plain(seconds, context)
            return
        self._since_plain += 1
        batches = self.decoded_batches(k, n_accepted)
        grown = self.growth_at(k + 1, context)  # the table as it stands at this context
        raw = sum(interpolate(self.sizes, self.ratios, n) * grown[n - 1] for n in batches) * self.level * self.step
        if self.chunk is None:
            table = interpolate(self.sizes, self.ratios, k + 1) * grown[k]
            self._observe_shape(k + 1, seconds / self.step / table, context)
        off = seconds / max(raw, self.step * len(batches))  # against the table as priced without memory
        fix = seconds / raw if raw > 0 else 1.0  # against the table itself (it may be below 1)
        if off > DRIFT or off < 1 / DRIFT:
            self._off += 1
            if self._off >= 2:  # twice in a row: the table is wrong, not the moment
                self.level *= fix
                self._corrected()
                self._off = 0
        else:
            self._off = 0
            self.level *= fix ** 0.1  # slow refinement in log space

    def _observe_shape(self, n: int, fix: float, context: int) -> None:
        """A one-batch verification of n tokens cost `fix` times the table's price."""
        self._fits.add(n, fix)
        if context <= TABLE_CONTEXT:
            self._fits_table.add(n, fix)
            if not self.drifted and self._fits_table.worst() > SHAPE_DRIFT:
                self._corrected()

    def _corrected(self) -> None:
        self.drifted = True
        self.corrections += 1

    def _observe_plain(self, seconds: float, context: int = 0) -> None:
        off = seconds / self.step if self.step > 0 else 1.0
        self._since_plain = 0
        short = context <= TABLE_CONTEXT
        if off > DRIFT or off < 1 / DRIFT:
            self._t1_off += 1
            self._plain_every = PLAIN_EVERY[0]
            if self._t1_off >= 2:  # twice in a row: t1 is wrong, not the moment
                self._move_t1(seconds, short)
                self._t1_off = 0
            return
        self._t1_off = 0
        if off > SHAPE_DRIFT or off < 1 / SHAPE_DRIFT:  # a smaller error: look again soon, move after two
            self._plain_every = PLAIN_EVERY[0]
            self._t1_doubts.append(seconds)
            if len(self._t1_doubts) >= 2:
                self._move_t1(_median(self._t1_doubts), short)
            return
        self._t1_doubts.clear()
        self._plain_every = min(2 * self._plain_every, PLAIN_EVERY[1])
        self._t1.add(seconds)
        if short:
            self._t1_table.add(seconds)
            self._n_t1_table += 1
            if not self.drifted and self.t1_off() > SHAPE_DRIFT:
                self._corrected()

    def _move_t1(self, seconds: float, short: bool) -> None:
        """t1 was wrong: the corrections learned against it are rescaled, so the prices of
        batches seen stay (the table's own ratios follow t1: a machine uniformly slower)."""
        factor = self.step / seconds
        self._t1.value = seconds
        self._fits.scale(factor)
        self._fits_table.scale(factor)
        self._t1_doubts.clear()
        if short:  # past TABLE_CONTEXT a slower step is the context's: the stored table stays
            self._t1_table.value = seconds
            self._n_t1_table = max(self._n_t1_table, SEEN_MIN)
            self._corrected()
        else:  # ...but the unit auto's ledger counts in moved: its debts were priced in the old one
            self.corrections += 1

    def observe_draft_step(self, seconds: float) -> None:
        if self.step > 0:
            self.draft_ratio += 0.1 * (seconds / self.step - self.draft_ratio)

    def observe_heads(self, name: str, seconds: float, k: int) -> None:
        """Learned drafter `name` drafted k tokens in `seconds` (its arithmetic, on this host)."""
        if self.step > 0 and k > 0:
            old = self.heads_ratios.get(name, seconds / k / self.step)
            self.heads_ratios[name] = old + 0.1 * (seconds / k / self.step - old)

    def draft_costs(self, kind: str, k_max: int, pending: int = 1) -> list[float]:
        """Cost of drafting k tokens: the draft model decodes `pending` catch-up
        tokens in one batch for the first, then one token each (its batches are
        assumed to scale like the target's); heads cost their arithmetic per token."""
        if kind in ("ngram", "suffix"):  # index lookups: no model
            return [0.0] + [self.ngram_step] * k_max
        if kind in self.heads_ratios:  # a learned drafter: its arithmetic per token
            return [0.0] + [self.heads_ratios[kind] * self.step * k for k in range(1, k_max + 1)]
        step = self.draft_ratio * self.step
        catch_up = step * self.batch_ratio(pending)
        if pending > 1:
            catch_up = max(catch_up, self.catch_up_ratio * self.step * pending)
        return [0.0] + [catch_up + step * (k - 1) for k in range(1, k_max + 1)]

    def observe_catch_up(self, pending: int, seconds: float) -> None:
        """The draft model decoded `pending` tokens its cache lacked in `seconds` (long
        catch-ups only: short ones are mostly the step itself)."""
        if pending < CATCH_UP_MIN or self.step <= 0 or seconds <= 0:
            return
        ratio = seconds / self.step / pending
        self.catch_up_ratio = ratio if self.catch_up_ratio <= 0 else 0.5 * (self.catch_up_ratio + ratio)

    def observed(self) -> dict[str, list[float] | float]:
        """What this model saw at up to TABLE_CONTEXT cached tokens: t1 (seconds) and the
        batch curve where seen enough (sizes, plain steps); empty where nothing was."""
        out: dict[str, list[float] | float] = {}
        if self._n_t1_table >= SEEN_MIN:
            out["t1"] = self._t1_table.value
            out["t1_off"] = self.t1_off()
        if self._fits_table:
            out["sizes"] = list(self._fits_table.sizes)
            out["ratios"] = [interpolate(self.sizes, self.ratios, round(n)) * f
                             for n, f in zip(self._fits_table.sizes, self._fits_table.values)]
        return out

    def t1_off(self) -> float:
        """How far the table's t1 was found off by plain steps at up to TABLE_CONTEXT cached
        tokens, as a factor >= 1 (1 until seen SEEN_MIN times)."""
        if self._n_t1_table < SEEN_MIN or self.t1 <= 0:
            return 1.0
        off = self._t1_table.value / self.t1
        return max(off, 1 / off)

    def corrected(self) -> tuple[float, list[float], float]:
        """(t1, ratios at `sizes`, draft_ratio) as observed at up to TABLE_CONTEXT cached
        tokens: for the calibration cache."""
        t1 = self._t1_table.value if self._n_t1_table >= SEEN_MIN else self.t1
        if self._fits_table:
            ratios = [max(1.0, r * self._fits_table.at(n)) if n > 1 else 1.0 for n, r in zip(self.sizes, self.ratios)]
        else:
            ratios = [self.batch_ratio(n) for n in self.sizes]
        return t1, ratios, self.draft_ratio
