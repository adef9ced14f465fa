"""A first run's calibration in seconds, said out loud (generate, chat).

`calibration.measure` takes half a minute to minutes (every batch size timed three times,
the noise past NOISE_CONTEXT cached tokens, each retried on a busy machine), and the batch
curve at long context a few minutes more. A first run needs none of that to start: auto
prices drafts from a few batch sizes timed twice (and corrects them as it generates), and
--exact needs only the largest bit-exact batch. `measure_quick` measures just that, and
the rest waits for `specli calibrate` (bench and serve measure it in full too). A pair
whose target was calibrated alone measures only its draft model's token.

Every step says at once what it measures, why, how long it takes and how to skip it,
through `say` (the engine and the runtime never print).
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from specli.drafters.auto.costs import interpolate
from specli.runtime.measure import calibration
from specli.runtime.measure.calibration import (
    EXACT_SIZES_MAX,
    NOISE_CONTEXT,
    NOISE_ROWS,
    OUTLIER,
    PROBE_ROWS,
    SIZES,
    T1_AGAIN_ROWS,
    TIMED_PASSES,
    Calibration,
    _one_token_rows,
    _same_rows,
    _time_batch,
    context_minutes,
    context_points,
    exact_batch_from,
)
from specli.runtime.measure.load import LoadProbe, sample
from specli.types import LanguageModel

QUICK_SIZES = (2, 4, 8, 16, 33)  # timed TIMED_PASSES times each; the controller interpolates between them
EXACT_PROBE = tuple(n for n in SIZES[1:] if n <= EXACT_SIZES_MAX)  # bit-exactness, as `measure` checks it
DRAFT_ROWS = 8

Say = Callable[[str], None]
DEFAULT_CTX = 4096


@dataclass(frozen=True)
class Why:
    """What a first run is: --exact or not, with a draft model or not, at which context."""

    exact: bool
    pair: bool
    ctx: int = DEFAULT_CTX

    def reason(self) -> str:
        return f"first use of {'--exact with ' if self.exact else ''}{'this pair' if self.pair else 'this model'} here"

    def command(self) -> str:
        """The command that measures everything (this context's long-context costs too)."""
        return "specli calibrate" + (" --exact" if self.exact else "") + (f" --ctx {self.ctx}" if self.ctx != DEFAULT_CTX else "")


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def _prefill_steps(n_tokens: int, cal_ratios: tuple[Sequence[int], Sequence[float]] | None = None) -> float:
    """Plain steps to decode `n_tokens` in batches of 33 (4 tokens a step where nothing is known)."""
    if cal_ratios is None:
        return n_tokens / 4
    sizes, ratios = cal_ratios
    return n_tokens / 33 * interpolate(sizes, ratios, 33)


def quick_steps_left(draft: bool) -> float:
    """Plain steps `measure_quick` takes after its one-token probe: the exactness batches
    (priced at 1 + n/4 steps each), the timed ones, and the draft model's share."""
    probe = sum(1 + n / 4 for n in sorted({*EXACT_PROBE, *QUICK_SIZES}))
    timed = TIMED_PASSES * sum(1 + n / 4 for n in QUICK_SIZES)
    return probe + timed + (0.3 * (_prefill_steps(128) + DRAFT_ROWS) if draft else 0.0)


def measure_draft_ratio(target: LanguageModel, draft: LanguageModel, context: Sequence[int],
                        t1: float | None = None) -> float:
    """One draft-model token in plain target steps, on top of `context` (t1 measured now
    unless given)."""
    filler = list(context[1 : 1 + DRAFT_ROWS])
    if t1 is None:
        target.rollback(0)
        target.decode(context)
        t1 = statistics.median(_one_token_rows(target, target.n_past, filler[:T1_AGAIN_ROWS])[1])
        target.rollback(0)
    draft.rollback(0)
    draft.decode(calibration.draft_ids(draft, context))
    _, times = _one_token_rows(draft, draft.n_past, calibration.draft_ids(draft, filler))
    draft.rollback(0)
    return statistics.median(times) / t1


def measure_quick(target: LanguageModel, draft: LanguageModel | None, context: Sequence[int],
                  progress: Callable[[float], None] | None = None) -> Calibration:
    """t1, QUICK_SIZES timed, exact_batch and the short-context noise as `measure` finds
    them, and the draft token: a few seconds. `progress(t1)` once t1 is known."""
    n_max = max(QUICK_SIZES)
    filler = list(context[1 : 1 + n_max])
    if len(filler) < n_max:
        raise ValueError(f"calibration needs a context of at least {n_max + 1} tokens")
    probe = LoadProbe()
    target.rollback(0)
    target.decode(context)
    base = target.n_past
    ref, one_times = _one_token_rows(target, base, filler[:PROBE_ROWS])
    t1 = statistics.median(one_times)
    if progress is not None:
        progress(t1)
    exact: dict[int, bool] = {}
    max_diff = 0.0
    for n in sorted({*EXACT_PROBE, *QUICK_SIZES}):  # also warms each size's output buffer: not timed
        head = _time_batch(target, base, filler[:n])[1]
        max_diff = max(max_diff, float(np.abs(head - ref[: len(head)]).max()))
        if n <= EXACT_SIZES_MAX:
            exact[n] = _same_rows(head, ref)
    ratios = [1.0] + [min(float(n), min(_time_batch(target, base, filler[:n])[0] for _ in range(TIMED_PASSES)) / t1)
                      for n in QUICK_SIZES]
    for i in range(len(ratios) - 2, 0, -1):  # no dearer than a larger batch (noise only adds time)
        ratios[i] = min(ratios[i], ratios[i + 1] * OUTLIER)
    machine = probe.read()
    target.rollback(0)
    draft_ratio = measure_draft_ratio(target, draft, context, t1) if draft is not None else 0.0
    return Calibration(t1, [1, *QUICK_SIZES], ratios, draft_ratio, exact_batch_from(exact), max_diff, _now(),
                       provisional=machine.busy, load=asdict(machine), quick=True)


def full_seconds(cal: Calibration, n_ctx: int, n_context: int, draft: bool) -> float:
    """About how long `specli calibrate` takes on this machine with a `n_ctx` context:
    `calibration.measure` (every size three times, t1 twice, the long-context noise, the
    draft token) and the batch curve at long context."""
    price = (cal.sizes, cal.ratios)
    steps = _prefill_steps(n_context, price) + PROBE_ROWS + T1_AGAIN_ROWS
    steps += (TIMED_PASSES + 1) * sum(interpolate(cal.sizes, cal.ratios, n) for n in SIZES[1:])
    for n in NOISE_ROWS:
        if n_ctx >= NOISE_CONTEXT + n + 1:  # attention over the long cache: about twice the price
            steps += 2 * (_prefill_steps(NOISE_CONTEXT, price) + n + interpolate(cal.sizes, cal.ratios, n))
    if draft:
        steps += cal.draft_ratio * (n_context + DRAFT_ROWS)
    points = context_points(n_ctx)
    return steps * cal.t1 + (context_minutes(cal, points) * 60 if points else 0.0)


def _exact_words(exact_batch: int) -> str:
    if exact_batch > 1:
        return f" (bit-exact batches up to {exact_batch} rows)"
    return (" (no batch is bit-exact to one-token decoding on this build: --exact verifies one token at a "
            "time, so no draft can pay and it decodes plainly)")


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def load_or_quick(key: str, solo_key: str | None, target: LanguageModel, draft: LanguageModel | None,
                  context: Sequence[int], say: Say, run: Why) -> Calibration:
    """The stored figures for `key` (quick or full; a quick table taken on a busy machine is
    measured again on an idle one); else the target's own (`solo_key`, calibrated without a
    draft model) with the draft token measured now; else `measure_quick`. Whatever is
    measured is announced through `say` (why, what, how long, how to skip it) and stored."""
    why = run.reason()
    stored = calibration.load(key)
    if stored is not None and (draft is None or stored.draft_ratio > 0):
        if not (stored.quick and stored.provisional and not sample().busy):
            return stored
        why = "the last quick measurement was taken on a busy machine, and this one is idle now"
        solo = None
    else:
        solo = calibration.load(solo_key) if solo_key is not None and draft is not None else None
    t0 = time.perf_counter()
    if solo is not None and draft is not None:
        say(f"{why}: measuring the draft model's token against a plain step (the target's costs are stored), "
            "a second or two")
        cal = replace(solo, draft_ratio=measure_draft_ratio(target, draft, context), measured=_now())
        say(f"measured in {time.perf_counter() - t0:.1f} s: a draft token costs {cal.draft_ratio:.2f} plain steps")
    else:
        cal = _quick(target, draft, context, say, run, why)
    calibration.store(key, cal)
    return cal


def _quick(target: LanguageModel, draft: LanguageModel | None, context: Sequence[int], say: Say, run: Why,
           why: str) -> Calibration:
    """`measure_quick`, said before (what, why, how long, how to skip), during (the time
    left once a plain step is timed) and after (how long the rest would take)."""
    t0 = time.perf_counter()
    calibrate = run.command()
    what = "a plain step, 5 batch sizes, the largest bit-exact batch" + (", the draft model's token" if draft else "")
    say(f"{why}: measuring what this run needs ({what}), a few seconds; the rest waits for `{calibrate}` "
        "(--drafter none needs none of it)")

    def progress(t1: float) -> None:
        say(f"a plain step takes {t1 * 1000:.0f} ms: about {duration(quick_steps_left(draft is not None) * t1)} left")

    cal = measure_quick(target, draft, context, progress)
    busy = "; the machine was busy, so they are measured again at the next idle start" if cal.provisional else ""
    rest = full_seconds(cal, target.n_ctx, len(context), draft is not None)
    say(f"measured in {time.perf_counter() - t0:.1f} s{_exact_words(cal.exact_batch) if run.exact else ''}; "
        f"auto corrects these figures as it generates{busy}, and `{calibrate}` measures them in full, "
        f"about {duration(rest)}")
    return cal
