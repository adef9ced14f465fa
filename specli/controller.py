"""Cost-aware choice of drafter and draft length (pure decisions, online estimates).

Expected speed of one step that drafts k tokens with conditional acceptance
a_1..a_k (a_i = P(token i accepted | tokens < i accepted)):

    E[tokens] = 1 + a_1 + a_1 a_2 + ... + a_1...a_k      (the target always adds one)
    cost      = draft_cost(k) + verify_cost(k)           (verify_cost(0) = a plain step)
    speed     = E[tokens] / cost

The controller picks, each step, the (drafter, k) with the highest expected speed;
k = 0 is plain decoding, so speculation turns itself off where it does not pay.

Costs are held as ratios to a plain step (`t1`), which is tracked online: a machine that
is uniformly slower or faster than at calibration changes nothing but t1. A batch-cost
curve that is wrong in shape or level (a calibration taken on a busy machine) is caught
by the batches actually verified: their seconds correct the curve's level at once when
they disagree with it twice in a row by more than DRIFT, and `drifted` tells the caller
to store the corrected table.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

DRIFT = 1.5  # observed / predicted cost beyond this factor (either way) is drift, not noise
# steps between the plain steps a controller that keeps drafting takes to measure t1 again:
# without them a t1 stored from a busy machine (seen: 1.34 s for a 54 ms step, with every
# batch priced at one step) is never corrected, and auto drafts 47-token draft-model runs
# at 0.75x. Doubles while t1 holds, up to the cap; back to the start when it does not.
PLAIN_EVERY = (32, 256)
SEEN_MIN, SEEN_KEEP = 3, 5  # a batch size verified this often is priced by the median of its last costs


def expected_tokens(acceptance: Sequence[float], k: int) -> float:
    """1 + sum_{i<=k} prod_{j<=i} a_j; positions past the known ones reuse the last rate."""
    total, run = 1.0, 1.0
    for i in range(k):
        a = acceptance[i] if i < len(acceptance) else (acceptance[-1] if acceptance else 0.0)
        run *= a
        total += run
    return total


def reach_probabilities(acceptance: Sequence[float], k: int) -> list[float]:
    """reach[i] = P(the first i draft tokens are all accepted), i = 0..k."""
    out, run = [1.0], 1.0
    for i in range(k):
        a = acceptance[i] if i < len(acceptance) else (acceptance[-1] if acceptance else 0.0)
        run *= a
        out.append(run)
    return out


def best_k(
    verify_cost: Sequence[float],
    draft_cost: Sequence[float],
    acceptance: Sequence[float],
    k_max: int,
) -> tuple[int, float]:
    """The k in 0..k_max maximising expected tokens per second, and that speed.
    verify_cost[k]: seconds to verify a batch of k + 1 tokens (k = 0: a plain step);
    draft_cost[k]: seconds to draft k tokens (draft_cost[0] = 0)."""
    k_max = min(k_max, len(verify_cost) - 1, len(draft_cost) - 1)
    best = (0, 1.0 / verify_cost[0] if verify_cost[0] > 0 else 0.0)
    tokens = 1.0
    reach = reach_probabilities(acceptance, k_max)
    for k in range(1, k_max + 1):
        tokens += reach[k]
        cost = verify_cost[k] + draft_cost[k]
        if cost <= 0:
            continue
        speed = tokens / cost
        if speed > best[1] * (1 + 1e-9):
            best = (k, speed)
    return best


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


@dataclass
class AcceptanceStats:
    """Per-position conditional acceptance, decayed so it follows the text."""

    prior: float = 0.6
    prior_weight: float = 2.0
    decay: float = 0.97
    accepted: list[float] = field(default_factory=list)
    drafted: list[float] = field(default_factory=list)

    def update(self, n_drafted: int, n_accepted: int) -> None:
        grow = n_drafted - len(self.drafted)
        if grow > 0:
            self.drafted += [0.0] * grow
            self.accepted += [0.0] * grow
        for i in range(len(self.drafted)):
            self.drafted[i] *= self.decay
            self.accepted[i] *= self.decay
        # position i was tried when all before it were accepted
        for i in range(min(n_drafted, n_accepted + 1)):
            self.drafted[i] += 1.0
            if i < n_accepted:
                self.accepted[i] += 1.0

    def fade(self, factor: float) -> None:
        """Weigh everything seen so far by `factor` (the rates stay, new evidence counts more)."""
        self.drafted = [d * factor for d in self.drafted]
        self.accepted = [a * factor for a in self.accepted]

    def depth(self, min_weight: float = 2.0) -> int:
        """How many leading positions have been tried at least `min_weight` times (decayed)."""
        return next((i for i, d in enumerate(self.drafted) if d < min_weight), len(self.drafted))

    def rates(self, k: int) -> list[float]:
        out: list[float] = []
        for i in range(k):
            d = self.drafted[i] if i < len(self.drafted) else 0.0
            a = self.accepted[i] if i < len(self.accepted) else 0.0
            prior = out[-1] if out else self.prior
            out.append((a + prior * self.prior_weight) / (d + self.prior_weight))
        return out


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
class Costs:
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
    def from_measured(cls, verify: Sequence[float], draft_step: float) -> Costs:
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
        has been seen enough. The table's shape drifts with the context: at 2,500 cached
        tokens a 17-token batch cost 10 plain steps where the table (taken at 128) said
        7.5, a 65-token one 25.7, not 21."""
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
        """batch_ratio(n) for n = 1..n_max at once (the controller prices every k each
        step: one interpolation per size cost 129 Python calls a forward)."""
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


# The ledger (below): what drafting may lose before it must show gains. Measured on the
# Spec-Bench coding questions that do not repeat (Q4_K_M): auto drafted 203 tokens at
# 0.51 acceptance where a 2-token batch costs 1.6 plain steps, 0.977x plain decoding.
LEDGER_START = 1.0  # plain steps a generation may lose before its first gain
LEDGER_ALLOWANCE = 0.01  # earned per plain step: exploring costs at most 1 % where nothing pays
LEDGER_CAP = 16.0  # gains kept: a good stretch does not pay for a long bad one
# In debt a draft must promise this much over plain decoding, more per step owed: on fresh
# math answers drafts priced at 1.04-1.26x held 0-2 of 3 tokens and lost up to 1.9 steps each.
LOSING_MARGIN = 0.25


@dataclass
class Ledger:
    """Plain steps gained by drafting, as measured: each verified draft adds the tokens it
    emitted less what it cost in plain steps (a plain step: 1 - 1 = 0, plus a small
    allowance). Prices are estimates and can be wrong where text does not repeat (shadow
    rates of 0.8-0.96 on fresh answers that held 0.7); the ledger is what they really won."""

    balance: float = LEDGER_START

    def record(self, n_emitted: int, cost_steps: float) -> None:
        """A step that emitted `n_emitted` tokens for `cost_steps` plain steps of time."""
        self.balance = min(LEDGER_CAP, self.balance + n_emitted - cost_steps)

    def plain(self) -> None:
        self.balance = min(LEDGER_CAP, self.balance + LEDGER_ALLOWANCE)

    def affords(self, speedup: float) -> bool:
        """Whether a draft priced at `speedup` x plain decoding may be tried: any gain while
        drafting has not lost; in debt, only by a margin that grows with the debt. (A
        margin out of debt too, until drafting had won 4 steps, cost edits 7 %: 1.53x
        where they decoded at 1.64x, their first long matches priced at 1.2-1.3x.)"""
        return self.balance >= 0 or speedup >= 1 + LOSING_MARGIN * (1 - self.balance)

    def forgive(self) -> None:
        """The prices were corrected: debts run up under the old ones say nothing of the new
        (drafting on a table deflated 4x ran up a debt that then kept auto at plain decoding
        after the table had healed)."""
        self.balance = max(self.balance, 0.0)

    def can_lose(self, steps: float) -> bool:
        """Whether a probe that may lose `steps` plain steps fits what drafting has won."""
        return self.balance >= steps


@dataclass(frozen=True)
class Choice:
    drafter: str  # "none" | "ngram" | "draft"
    k: int
    speed: float  # expected tokens/s


def choose(
    costs: Costs,
    acceptance: dict[str, AcceptanceStats],
    available: dict[str, int],
    pending: int = 1,
) -> Choice:
    """Best (drafter, k) among `available` (name -> most tokens it can offer now)."""
    best = Choice("none", 0, 1.0 / costs.step if costs.step > 0 else 0.0)
    for name, k_avail in available.items():
        if k_avail <= 0:
            continue
        rates = acceptance[name].rates(k_avail)
        reach = reach_probabilities(rates, k_avail) if costs.chunk is not None else None
        verify = costs.verify_costs(k_avail, reach)
        k, speed = best_k(verify, costs.draft_costs(name, k_avail, pending), rates, k_avail)
        if k > 0 and speed > best.speed:
            best = Choice(name, k, speed)
    return best
