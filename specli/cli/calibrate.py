"""`specli calibrate`'s tables: the stored costs, and with --check how far what runs
observed and a quick measurement now have drifted from them."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from specli.cli.guard import err_console
from specli.drafters.auto.costs import SHAPE_DRIFT, interpolate
from specli.runtime.measure.calibration import (
    CONTEXT_SIZES,
    Calibration,
    context_points,
    load,
    why_provisional,
)
from specli.runtime.measure.first_use import duration, full_seconds
from specli.runtime.wiring import CALIBRATION_CONTEXT, Runtime


def say_what_is_measured(rt: Runtime, show: bool) -> None:
    """One line before `specli calibrate` measures: what, and how long the table stored
    so far says it takes (nothing where --show finds a full table)."""
    stored = load(rt.calibration_key())
    if show and stored is not None and not stored.quick:
        return
    points = context_points(rt.target.n_ctx)
    what = "a plain step, every batch size three times, the batch noise, the bit-exact batch" + (
        ", the draft model's token" if rt.draft is not None else "") + (
        f", and batch costs at {', '.join(map(str, points))} cached tokens" if points else "")
    took = "" if stored is None else (
        f", about {duration(full_seconds(stored, rt.target.n_ctx, CALIBRATION_CONTEXT, rt.draft is not None))}")
    err_console().print(f"specli calibrate: measuring {what}{took} (Ctrl-C stops it)",
                        markup=False, highlight=False, soft_wrap=True)


def show(console: Console, cal: Calibration, key: str, exact: bool) -> None:
    t = Table("batch of n tokens", "cost in plain steps", "ceiling n / cost", title=f"calibration: {key}")
    for n, r in zip(cal.sizes, cal.ratios):
        t.add_row(str(n), f"{r:.2f}", f"{n / r:.2f}x")
    console.print(t)
    if cal.contexts:
        console.print(context_table(cal))
    chunk = f"largest bit-exact chunk = {cal.exact_batch}; " if exact else ""
    console.print(f"plain step t1 = {cal.t1 * 1000:.1f} ms; draft token = {cal.draft_ratio:.2f} steps; {chunk}"
                  f"batch logit noise <= {cal.max_logit_diff:.3g} (near-tie bound {cal.tie_bound:.3g}); "
                  f"measured {cal.measured}{_busy(cal)}", highlight=False)


def context_table(cal: Calibration) -> Table:
    """The batch curve along the context axis: plain steps per batch (ceiling n / cost)."""
    t = Table("cached tokens", "plain step", *(f"batch of {n}" for n in CONTEXT_SIZES),
              title="batch cost by context (plain steps at that context; ceiling n / cost)")
    t.add_row(f"~{CALIBRATION_CONTEXT}", f"{cal.t1 * 1000:.1f} ms",
              *(_cell(n, interpolate(cal.sizes, cal.ratios, n)) for n in CONTEXT_SIZES))
    for ctx, t1, row in zip(cal.contexts, cal.context_t1, cal.context_ratios):
        t.add_row(str(ctx), f"{t1 * 1000:.1f} ms", *(_cell(n, r) for n, r in zip(CONTEXT_SIZES, row)))
    return t


def _cell(n: int, r: float) -> str:
    return f"{r:.2f} ({n / r:.2f}x)"


def _busy(cal: Calibration) -> str:
    why = why_provisional(cal)
    return f"; provisional: its figures {why}, measured again at the next idle start" if why else ""


def check_rows(cal: Calibration, t1_now: float, now: dict[int, float]) -> list[tuple[str, float, float | None, float]]:
    """(what, stored, last run's observation or None, now) per row: t1 in ms, then the
    batch sizes measured now in plain steps."""
    seen = cal.observed
    t1_seen = seen.get("t1")
    rows = [("t1 (ms)", cal.t1 * 1000, t1_seen * 1000 if t1_seen else None, t1_now * 1000)]
    sizes, ratios = seen.get("sizes") or [], seen.get("ratios") or []
    for n, r_now in now.items():
        last = interpolate(sizes, ratios, n) if sizes and sizes[0] <= n <= sizes[-1] else None
        rows.append((f"batch of {n}", interpolate(cal.sizes, cal.ratios, n), last, r_now))
    return rows


def check(console: Console, cal: Calibration, key: str, t1_now: float, now: dict[int, float]) -> float:
    """Print the drift table; returns the worst drift now, as a factor >= 1."""
    rows = check_rows(cal, t1_now, now)
    t = Table("", "stored", "last run", "now", "drift now", title=f"calibration check: {key}")
    worst = 1.0
    for what, stored, last, r_now in rows:
        drift = r_now / stored if stored > 0 else 1.0
        worst = max(worst, drift, 1 / drift)
        t.add_row(what, f"{stored:.2f}", "-" if last is None else f"{last:.2f}", f"{r_now:.2f}", f"{drift - 1:+.0%}")
    console.print(t)
    at = cal.observed.get("at")
    console.print(f"stored table measured {cal.measured}{_busy(cal)}"
                  + (f"; last run {at}" + (", which corrected the table" if cal.observed.get("corrected") else "")
                     if at else "; no run has observed it yet"), highlight=False)
    verdict = (f"off by up to {worst - 1:.0%} now: `specli calibrate` measures it again (auto also corrects it "
               "as it generates)" if worst > SHAPE_DRIFT else f"within {SHAPE_DRIFT - 1:.0%} of the table now")
    console.print(verdict, highlight=False)
    return worst
