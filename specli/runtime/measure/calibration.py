"""Measure this machine's costs and numerics once per model + build + offload + threads,
and cache them:

- the target's one-token step `t1` and one llama.cpp batch of n tokens as a ratio to it,
  for n in SIZES (the controller interpolates between them and extrapolates past them);
- the draft model's token, as a ratio to t1;
- `exact_batch`: the largest batch whose every row's logits are bit-identical to
  one-token decoding (llama.cpp's CPU kernels change their summation order with the
  batch size: llamafile's tinyBLAS from 2 rows, repacked weights from 4, the tiled
  K-quant matmul from 8), measured on the loaded model rather than assumed;
- `max_logit_diff`: the largest |batch row - one-token row| seen on that probe and on a
  few rows past NOISE_CONTEXT cached tokens, the floating-point noise that decides what a
  near-tie is (bench's tie-aware check).

Timings take the fastest of two runs (noise only ever adds time); a size that costs
more than a larger one by over 1.5x, or more than n plain steps, is measured again.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from specli.drafters.auto.costs import DRIFT
from specli.runtime.measure.load import Load, LoadProbe, sample
from specli.types import LanguageModel

CALIBRATION_VERSION = 6  # 6: noise of a tiled-attention batch too (NOISE_ROWS)
SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 33)
EXACT_SIZES_MAX = 16  # bit-exactness is compared on batches up to this size...
PROBE_ROWS = 16  # ...against this many one-token rows
TIMED_PASSES = 2
# Past 512 cached tokens one row over an F16 cache takes llama.cpp's split-KV attention and
# a batch does not: the noise is measured there too.
NOISE_CONTEXT = 640
NOISE_ROWS = (4, 64)  # batches of these rows; from 64 rows CPU flash attention is tiled
OUTLIER = 1.5
MEASURE_TRIES, RETRY_WAIT = 2, 5.0  # a busy machine: wait this many seconds and measure once more
T1_AGAIN_ROWS = 8  # t1 measured again at the end: its move is one sign of a busy machine


@dataclass
class Calibration:
    t1: float  # seconds of one plain target step
    sizes: list[int]
    ratios: list[float]  # one batch of sizes[i] tokens / t1
    draft_ratio: float = 0.0  # one draft-model token / t1 (0: no draft model)
    exact_batch: int = 1
    max_logit_diff: float = 0.0
    measured: str = ""
    remeasured_sizes: list[int] = field(default_factory=list)
    # the machine was busy while measuring (see `load`): used until an idle start measures again
    provisional: bool = False
    load: dict[str, float] = field(default_factory=dict)  # the machine while measuring (runtime.measure.load.Load)
    # what the last run observed at short context (CostModel.observed: t1, t1_off, sizes,
    # ratios), when ("at") and whether it corrected the table ("corrected")
    observed: dict[str, Any] = field(default_factory=dict)
    # the batch curve at longer contexts: context_ratios[c][j], a batch of CONTEXT_SIZES[j]
    # tokens over contexts[c] cached tokens, in plain steps at that context
    contexts: list[int] = field(default_factory=list)
    context_ratios: list[list[float]] = field(default_factory=list)
    context_t1: list[float] = field(default_factory=list)  # a plain step there, seconds
    # only what a first run needed, in seconds (runtime.measure.first_use): a few batch sizes timed once,
    # the noise at short context only; `specli calibrate` (and bench, serve) measure it in full
    quick: bool = False

    @property
    def tie_bound(self) -> float:
        return tie_bound(self.max_logit_diff)


def tie_bound(max_logit_diff: float) -> float:
    """Largest gap between two logits that batching noise can close: each of the two
    may move by up to max_logit_diff."""
    return 2.0 * max_logit_diff


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specli" / "calibration.json"


def _one_token_rows(model: LanguageModel, base: int, probe: Sequence[int]) -> tuple[np.ndarray, list[float]]:
    """One-token rows of `probe` on top of the cache's first `base` tokens, and the
    seconds of each step."""
    model.rollback(base)
    rows, times = [], []
    for t in probe:
        t0 = time.perf_counter()
        rows.append(model.decode([t], [0])[0].copy())
        times.append(time.perf_counter() - t0)
    model.rollback(base)
    return np.stack(rows), times


def _time_batch(model: LanguageModel, base: int, tokens: Sequence[int]) -> tuple[float, np.ndarray]:
    t0 = time.perf_counter()
    rows = model.decode(tokens, range(len(tokens)))
    dt = time.perf_counter() - t0
    head = rows[: min(len(tokens), PROBE_ROWS)].copy()
    model.rollback(base)
    return dt, head


def prefill_logit_diff(target: LanguageModel, context: Sequence[int]) -> float:
    """Largest |logit| difference between `context` decoded in one batch and one token at
    a time: how far an engine that splits prefill and verification into other batches
    than specli does (llama-cpp-python's own generator) may move a logit."""
    return _batch_diff(target, 0, context)


def _batch_diff(target: LanguageModel, base: int, probe: Sequence[int]) -> float:
    """Largest |logit| difference between `probe` decoded in one batch and one token at a
    time, on top of the cache's first `base` tokens; the cache is left empty."""
    one, _ = _one_token_rows(target, base, probe)
    rows = target.decode(probe, range(len(probe))).copy()
    target.rollback(0)
    return float(np.abs(rows - one).max())


def long_context_diff(target: LanguageModel, context: Sequence[int]) -> float:
    """Largest |logit| difference between batches of NOISE_ROWS rows and the same rows one
    token at a time past NOISE_CONTEXT cached tokens (0 where the context is too small)."""
    diff = 0.0
    for n in NOISE_ROWS:
        if target.n_ctx < NOISE_CONTEXT + n + 1:
            break
        filler = (list(context) * (NOISE_CONTEXT // len(context) + 2))[: NOISE_CONTEXT + n + 1]
        target.rollback(0)
        target.decode(filler[:NOISE_CONTEXT])
        diff = max(diff, _batch_diff(target, NOISE_CONTEXT, filler[NOISE_CONTEXT + 1 :]))
    return diff


def exact_batch_from(exact: dict[int, bool]) -> int:
    """Largest c such that every tested batch size <= c was bit-exact (1 if none)."""
    c = 1
    for n in sorted(exact):
        if not exact[n]:
            break
        c = n
    return c


def fix_outliers(sizes: Sequence[int], ratios: Sequence[float]) -> list[int]:
    """Sizes whose ratio is implausible: above n (dearer than n plain steps) or more
    than OUTLIER times a larger size's."""
    bad = []
    for i, (n, r) in enumerate(zip(sizes, ratios)):
        if n > 1 and (r > n or any(r > OUTLIER * r2 for r2 in ratios[i + 1 :])):
            bad.append(n)
    return bad


def measure(target: LanguageModel, draft: LanguageModel | None, context: Sequence[int]) -> Calibration:
    """Costs and numerics of `target` (and `draft`) on top of `context` (>= 34 tokens)."""
    n_max = max(SIZES)
    filler = list(context[1 : 1 + n_max])
    if len(filler) < n_max:
        raise ValueError(f"calibration needs a context of at least {n_max + 1} tokens")
    target.rollback(0)
    target.decode(context)
    base = target.n_past
    probe = LoadProbe()
    ref, one_times = _one_token_rows(target, base, filler[:PROBE_ROWS])
    t1 = statistics.median(one_times)
    times: dict[int, list[float]] = {n: [] for n in SIZES[1:]}
    exact: dict[int, bool] = {}
    max_diff = 0.0
    for p in range(TIMED_PASSES + 1):
        for n in SIZES[1:]:
            dt, head = _time_batch(target, base, filler[:n])
            if p == 0:  # the first pass also warms each size's output buffer: not timed
                diff = np.abs(head - ref[: len(head)])
                max_diff = max(max_diff, float(diff.max()))
                if n <= EXACT_SIZES_MAX:
                    exact[n] = _same_rows(head, ref)
            else:
                times[n].append(dt)
    ratios = [1.0] + [min(times[n]) / t1 for n in SIZES[1:]]
    again = fix_outliers(SIZES, ratios)
    for n in again:
        i = SIZES.index(n)
        ratios[i] = min(ratios[i], min(_time_batch(target, base, filler[:n])[0] for _ in range(2)) / t1)
    for i in range(len(ratios) - 2, 0, -1):  # still implausible: no dearer than a larger batch
        ratios[i] = min(ratios[i], ratios[i + 1] * OUTLIER)
    t1_again = statistics.median(_one_token_rows(target, base, filler[:T1_AGAIN_ROWS])[1])
    machine = probe.read(spread=abs(t1_again / t1 - 1))
    target.rollback(0)
    max_diff = max(max_diff, long_context_diff(target, context))
    draft_ratio = 0.0
    if draft is not None:
        draft.rollback(0)
        draft.decode(draft_ids(draft, context))
        _, d_times = _one_token_rows(draft, draft.n_past, draft_ids(draft, filler[:8]))
        draft_ratio = statistics.median(d_times) / t1
        draft.rollback(0)
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return Calibration(t1, list(SIZES), ratios, draft_ratio, exact_batch_from(exact), max_diff, now, again,
                       machine.busy, asdict(machine))


def draft_ids(draft: LanguageModel, tokens: Sequence[int]) -> list[int]:
    """Target tokens as ids the draft model has: a step's cost does not depend on which
    tokens, and a draft of another vocabulary (drafters.cross_vocab) may have fewer."""
    return [t % draft.n_vocab for t in tokens]


def measure_exact_batch(target: LanguageModel, context: Sequence[int]) -> int:
    """`exact_batch` alone, found as `measure` finds it but with nothing timed (a few
    seconds where `measure` takes half a minute on the Qwen target)."""
    filler = list(context[1 : 1 + EXACT_SIZES_MAX])
    target.rollback(0)
    target.decode(context)
    base = target.n_past
    ref, _ = _one_token_rows(target, base, filler[:PROBE_ROWS])
    exact = {n: _same_rows(_time_batch(target, base, filler[:n])[1], ref) for n in SIZES[1:] if n <= len(filler)}
    target.rollback(0)
    return exact_batch_from(exact)


def _same_rows(head: np.ndarray, ref: np.ndarray) -> bool:
    """Whether a batch's first rows are bit-identical to the one-token rows `ref`."""
    return bool(np.array_equal(head, ref[: len(head)]))


def measure_idle(target: LanguageModel, draft: LanguageModel | None, context: Sequence[int],
                 tries: int = MEASURE_TRIES) -> Calibration:
    """`measure`, again after RETRY_WAIT seconds while the machine is busy; if it stays
    busy, the quietest of the measurements, marked provisional."""
    quietest: Calibration | None = None
    for i in range(tries):
        if i:
            time.sleep(RETRY_WAIT)
        cal = measure(target, draft, context)
        if not cal.provisional:
            return cal
        if quietest is None or _noise(cal) < _noise(quietest):
            quietest = cal
    assert quietest is not None
    return quietest


CHECK_SIZES = (2, 4, 8, 16, 33)
# the batch sizes timed at longer contexts; 63, 64 and 65 because llama.cpp's CPU flash
# attention takes a tiled kernel from 64 query rows, far cheaper per row at long context
CONTEXT_SIZES = (*CHECK_SIZES, 63, 64, 65)


def context_points(n_ctx: int) -> list[int]:
    """The cached-token counts the batch curve is measured at beyond the calibration's
    own: a quarter, half and all of the context (room left for the largest batch)."""
    room = n_ctx - max(CONTEXT_SIZES) - 8
    points = {n_ctx // 4, n_ctx // 2, room}
    return sorted(p for p in points if 4 * CALIBRATION_CONTEXT_MIN <= p <= room)


CALIBRATION_CONTEXT_MIN = 128  # below 4x this many tokens a context costs what the calibration's does


def measure_contexts(target: LanguageModel, context: Sequence[int], points: Sequence[int]
                     ) -> tuple[list[int], list[list[float]], list[float]]:
    """t1 and the batch curve at CONTEXT_SIZES over each of `points` cached tokens (the
    cache filled once with `context` repeated, growing point by point): attention grows
    with rows x context, so long batches cost more plain steps at long context."""
    filler = list(context) * (max(points) // max(1, len(context)) + 2)
    probe = filler[1 : 1 + max(CONTEXT_SIZES)]
    target.rollback(0)
    ratios, t1s = [], []
    for p in points:
        target.decode(filler[target.n_past : p])
        t1_before = statistics.median(_one_token_rows(target, p, probe[:T1_AGAIN_ROWS])[1])
        seconds = []
        for n in CONTEXT_SIZES:
            _time_batch(target, p, probe[:n])  # warms the size's output buffer
            seconds.append(min(_time_batch(target, p, probe[:n])[0] for _ in range(TIMED_PASSES + 1)))
        # noise only adds time: the quicker of t1 before and after the batches
        t1 = min(t1_before, statistics.median(_one_token_rows(target, p, probe[:T1_AGAIN_ROWS])[1]))
        ratios.append([s / t1 for s in seconds])
        t1s.append(t1)
    target.rollback(0)
    return list(points), ratios, t1s


def missing_context_points(cal: Calibration, n_ctx: int) -> list[int]:
    """The points a context of `n_ctx` tokens needs measured that `cal` lacks (all or none)."""
    points = context_points(n_ctx)
    if not points or (cal.contexts and max(cal.contexts) >= points[-1]):
        return []
    return points


def context_minutes(cal: Calibration, points: Sequence[int]) -> float:
    """A rough time for measure_contexts at `points`: filling the cache to the last point
    at the largest batch's rate per token, attention doubling it on the way, plus the timed
    batches (each size three times, about a 65-row batch's price at short context)."""
    per_token = cal.t1 * cal.ratios[-1] / cal.sizes[-1]
    fill = 2 * max(points) * per_token
    timed = len(points) * 3 * sum(CONTEXT_SIZES) * per_token * 2
    return (fill + timed) / 60


def with_contexts(cal: Calibration, target: LanguageModel, context: Sequence[int]) -> Calibration | None:
    """`cal` with its curve measured at this context's points, where the context is long
    and they are not measured yet (None: nothing to add)."""
    points = missing_context_points(cal, target.n_ctx)
    if not points:
        return None
    contexts, ratios, t1s = measure_contexts(target, context, points)
    return replace(cal, contexts=contexts, context_ratios=ratios, context_t1=t1s)


def quick_probe(target: LanguageModel, context: Sequence[int]) -> tuple[float, dict[int, float]]:
    """t1 and the batch curve at CHECK_SIZES now, in one quick pass (a few seconds; for
    `specli calibrate --check`, which stores nothing)."""
    filler = list(context[1 : 1 + max(CHECK_SIZES)])
    target.rollback(0)
    target.decode(context)
    base = target.n_past
    t1 = statistics.median(_one_token_rows(target, base, filler[:T1_AGAIN_ROWS])[1])
    ratios = {}
    for n in CHECK_SIZES:
        _time_batch(target, base, filler[:n])  # warms the size's output buffer
        ratios[n] = _time_batch(target, base, filler[:n])[0] / t1
    target.rollback(0)
    return t1, ratios


def why_provisional(cal: Calibration) -> str:
    """Why `cal` is measured again at the next idle start ("" where it is not)."""
    if not cal.provisional:
        return ""
    t1_off = float(cal.observed.get("t1_off", 1.0))
    if t1_off > DRIFT:
        return f"were found off in a run (a plain step off by {t1_off:.1f}x)"
    return f"were measured while the machine was busy ({Load(**cal.load).describe()})"


def _noise(cal: Calibration) -> float:
    load = Load(**cal.load)
    return load.others + load.spread


def _read(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("version") == CALIBRATION_VERSION:
            return data
    except (OSError, ValueError):
        pass
    return {"version": CALIBRATION_VERSION, "entries": {}}


def load(key: str, path: Path | None = None) -> Calibration | None:
    entries = _read(path or cache_file()).get("entries")
    entry = entries.get(key) if isinstance(entries, dict) else None
    if not isinstance(entry, dict):
        return None
    try:
        cal = Calibration(**entry)
    except TypeError:
        return None
    if any(len(row) != len(CONTEXT_SIZES) for row in cal.context_ratios):  # timed at other sizes
        cal = replace(cal, contexts=[], context_ratios=[], context_t1=[])
    return cal


def store(key: str, cal: Calibration, path: Path | None = None) -> None:
    """Write one entry atomically (a read-only cache only costs a re-measurement)."""
    path = path or cache_file()
    data = _read(path)
    data.setdefault("entries", {})[key] = asdict(cal)  # type: ignore[index]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass


def load_or_measure(key: str, target: LanguageModel, draft: LanguageModel | None, context: Sequence[int],
                    path: Path | None = None, recalibrate: bool = False) -> Calibration:
    """Cached figures for `key`, measured now if missing, incomplete (or quick) or asked for,
    or if they were measured on a busy machine and this one is idle now. Measured again, they
    keep the stored context axis (only `recalibrate` drops it): its rows are each timed
    against t1 at their own context, a shape the short table's level does not move, and
    timing it again at 16k tokens takes a quarter of an hour."""
    stored = None if recalibrate else load(key, path)
    cal = stored
    if cal is not None and cal.provisional and not sample().busy:
        cal = None
    if cal is None or cal.quick or (draft is not None and cal.draft_ratio <= 0):
        cal = measure_idle(target, draft, context)
        if stored is not None and stored.contexts:
            cal = replace(cal, contexts=stored.contexts, context_ratios=stored.context_ratios,
                          context_t1=stored.context_t1)
        store(key, cal, path)
    return cal
