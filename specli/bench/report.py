"""What bench shows and writes: the summary and detail tables, the bar chart, Markdown,
CSV, the JSON document and the lossless verdict."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specli import profiles
from specli.bench.prompts import split_list
from specli.bench.records import COMPARED, BenchRecord, Divergence, Row
from specli.bench.run import BenchResult, warm_json
from specli.engine import metrics

SCHEMA_VERSION = 1

DEFINITIONS = """\
tok/s       generated tokens / wall time from the request to the last token (prefill included).
speedup     mode tok/s / baseline tok/s on the same prompt, repeat and turn; a row shows the
            median of those ratios and their min-max spread.
accept      acceptance rate = accepted draft tokens / drafted tokens (pooled over the row).
tau         mean accepted length = tokens emitted per target forward pass after the prefill,
            bonus/correction token included (plain decoding: 1.00).
acc@pos     acceptance by position: P(draft token i accepted | it was drafted), i = 1, 2, ...
TTFT        time to first token (prefill and first sample), median over the row.
split       share of wall time in prefill / drafting / verifying (target forward passes) / other.
ms/forward  wall time of one target forward (verify batch), pooled; over RPC the network is in it.
host ms/forward  specli's own work per target forward after the prefill, outside llama.cpp's
            decode calls: total, then drafting (lookups, draft-model glue) / verification
            (reading rows, argmax or rejection) / the controller's pricing / the text layer
            (detokenizing, stop strings) / the rest (the engine's bookkeeping, the caller).
drafted/forward  tokens drafted per target forward (the draft length chosen), pooled.
lossless    at temperature 0 every mode's token ids must equal the baseline's for the same
            prompt, repeat and turn; a mismatch is reported with the first differing position
            and makes the command exit with code 9. At temperature > 0 the check is skipped.
Each generation starts from empty KV caches (every mode pays its own prefill), except the
later turns of a --turns all conversation."""


def _f(x: float | None, fmt: str, none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def _speed(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _spread(row: Row, prefix: str = "") -> str:
    lo, hi = getattr(row, f"{prefix}speedup_min"), getattr(row, f"{prefix}speedup_max")
    return "-" if lo is None else f"{lo:.2f}-{hi:.2f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f} ms"


SUMMARY_COLUMNS = ("mode", "category", "n", "tok/s", "speedup", "min-max", "decode", "decode min-max", "accept",
                   "tau", "TTFT", "near-ties", "mismatches")


def summary_cells(row: Row) -> list[str]:
    return [
        row.mode, row.category, str(row.n), _f(row.tokens_per_second, ".1f"),
        _speed(row.speedup_median), _spread(row), _speed(row.decode_speedup_median),
        _spread(row, "decode_"), _f(row.acceptance_rate, ".2f"),
        _f(row.mean_accepted_length, ".2f"), _ms(row.time_to_first_token_s),
        str(row.near_ties) if row.compared else "-",
        str(row.mismatches) if row.compared else "-",
    ]


def _positions(row: Row, n: int = 8) -> str:
    acc = row.acceptance_by_position
    return " ".join(f"{a:.2f}" for a in acc[:n]) + (" ..." if len(acc) > n else "") if acc else "-"


def _split(row: Row) -> str:
    s = row.time_split
    return "/".join(f"{s[k] * 100:.0f}" for k in ("prefill", "draft", "verify", "other"))


DETAIL_COLUMNS = ("mode", "acc@pos 1..", "split % prefill/draft/verify/other", "ms/forward",
                  "host ms/forward: " + "/".join(metrics.HOST_PARTS), "drafted/forward")


def _host(row: Row) -> str:
    h = row.host_ms
    if h is None:
        return "-"
    return f"{h['total']:.2f}: " + "/".join(f"{h[k]:.2f}" for k in metrics.HOST_PARTS)


def detail_cells(row: Row) -> list[str]:
    return [row.mode, _positions(row), _split(row), _f(row.ms_per_forward, ".0f"), _host(row),
            _f(row.mean_draft_length, ".1f")]


def table_rows(rows: Sequence[Row]) -> list[Row]:
    """The rows shown: a mode's `all` row repeats its category row when there is one
    category, so then only the category rows are shown."""
    categories = {r.category for r in rows if r.category != "all"}
    return [r for r in rows if r.category != "all"] if len(categories) == 1 else list(rows)


def summary_table(rows: Sequence[Row]) -> Table:
    t = Table(*SUMMARY_COLUMNS, title="specli bench", title_justify="left")
    for col in t.columns[2:]:
        col.justify = "right"
    for col in t.columns:
        col.no_wrap = True
    previous = None
    for row in table_rows(rows):
        if previous is not None and row.mode != previous:
            t.add_section()
        previous = row.mode
        cells = [Text(c) for c in summary_cells(row)]  # Text: names from prompt files are not markup
        if row.mismatches:
            cells[-1].stylize("bold red")
        t.add_row(*cells, style="bold" if row.category == "all" else None)
    return t


def detail_table(rows: Sequence[Row]) -> Table:
    t = Table(*DETAIL_COLUMNS, title="per mode, all prompts", title_justify="left")
    for row in rows:
        if row.category == "all":
            t.add_row(*(Text(c) for c in detail_cells(row)))
    return t


def bar_chart(rows: Sequence[Row], width: int = 40) -> str:
    """Median speedup per mode (all prompts) as text bars; `|` marks 1.00x."""
    overall = [(r.mode, r.speedup_median) for r in rows if r.category == "all" and r.speedup_median is not None]
    if not overall:
        return ""
    top = max(max(x for _, x in overall), 1.0)
    name_w = max(len(m) for m, _ in overall)
    one = round(width / top)
    lines = ["median speedup vs baseline (all prompts)"]
    for mode, x in overall:
        n = round(width * x / top)
        bar = "█" * n + " " * (width - n)
        if one < width and n < one:
            bar = bar[:one] + "|" + bar[one + 1 :]
        lines.append(f"{mode.ljust(name_w)}  {bar}  {x:.2f}x")
    return "\n".join(lines)


def markdown_table(rows: Sequence[Row]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [line(SUMMARY_COLUMNS), line(["---"] * 2 + ["---:"] * (len(SUMMARY_COLUMNS) - 2))]
    out += [line(summary_cells(r)) for r in table_rows(rows)]
    out += ["", line(DETAIL_COLUMNS), line(["---"] * len(DETAIL_COLUMNS))]
    out += [line(detail_cells(r)) for r in rows if r.category == "all"]
    return "\n".join(out) + "\n"


CSV_COLUMNS = (
    "mode", "kind", "prompt_index", "prompt_id", "category", "repeat", "turn", "temperature", "finish_reason",
    "n_prompt", "n_prompt_reused", "n_generated", "tokens_per_second", "decode_tokens_per_second", "speedup",
    "decode_speedup", "verify",
    "time_to_first_token_s", "t_prefill_s", "t_draft_s", "t_verify_s", "t_other_s", "t_total_s", "t_llama_s",
    "python_overhead_fraction", "host_ms_per_forward", "n_target_forwards", "n_step_tokens", "n_drafted", "n_accepted",
    "acceptance_rate", "mean_accepted_length", "acceptance_by_position", "lossless", "first_diff",
)


def csv_text(records: Sequence[BenchRecord]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in records:
        flat = r.to_json()
        for k in ("prefill", "draft", "verify", "other", "total"):
            flat[f"t_{k}_s"] = flat["time_s"][k]
        flat["acceptance_by_position"] = ";".join(f"{a:.4f}" for a in flat["acceptance_by_position"])
        flat["host_ms_per_forward"] = f"{flat['host_ms_per_forward']['total']:.4f}" if metrics.has_host_account(r.counters) else None
        w.writerow(["" if flat.get(c) is None else flat[c] for c in CSV_COLUMNS])
    return buf.getvalue()



def document(result: BenchResult, rows: Sequence[Row], divergences: Sequence[Divergence],
             best: Row | None = None) -> dict[str, Any]:
    """The JSON written by --json."""
    plan, o = result.plan, result.plan.opts
    mismatches = [x for x in divergences if x.verdict == "mismatch"]
    greedy = all(s.temperature == 0 for s in plan.settings.values())
    return {
        "schema": SCHEMA_VERSION,
        "tool": "specli bench",
        "started": result.started,
        "seconds": result.seconds,
        "complete": not result.interrupted and result.error is None,
        "interrupted": result.interrupted,
        "stopped_by": result.stopped_by,
        "error": result.error,
        "options": {
            "profile": o.profile, "prompts": str(o.prompts) if o.prompts else None, "suite": o.suite,
            "modes": [m.name for m in plan.modes], "max_tokens": plan.base.max_tokens, "repeat": o.repeat,
            "temperature": plan.base.temperature, "sweep": o.sweep, "peer": o.peer, "limit": o.limit,
            "categories": split_list(o.categories) or None, "turns": o.turns, "warmup": o.warmup,
            "warm_history": o.warm_history,
            "overrides": {k: v for k, v in o.overrides.items() if v is not None},
        },
        "definitions": DEFINITIONS,
        "settings": profiles.settings_to_dict(plan.base),
        "modes": [
            {"name": m.name, "kind": "baseline" if m.is_baseline else "peer" if m.peer else "drafter",
             "drafter": m.drafter, "options": dict(m.options),
             "settings": profiles.settings_to_dict(plan.settings[m.name])}
            for m in plan.modes
        ],
        "machine": result.machine,
        "costs": result.costs or None,  # calibrated t1 (s) and batch costs in plain steps
        "warm_history": warm_json(result),
        "prompts": [
            {"index": i, "id": p.id, "category": p.category, "n_turns": len(plan.turns_of(p)), "source": p.source}
            for i, p in enumerate(plan.prompts)
        ],
        "records": [r.to_json() for r in result.records],
        "aggregates": [r.to_json() for r in rows],
        "lossless": {
            "checked": greedy,
            "note": None if greedy else "temperature > 0: outputs are samples, the check is skipped",
            "compared": sum(1 for r in result.records if r.lossless in COMPARED),
            "identical": sum(1 for r in result.records if r.lossless == "match"),
            "near_ties": sum(1 for x in divergences if x.verdict == "near-tie"),
            "mismatches": len(mismatches),
            "by_mode": {m.name: sum(1 for x in mismatches if x.mode == m.name) for m in plan.modes
                        if not m.is_baseline},
            "numerics": result.numerics,
            "details": [x.to_json() for x in mismatches],
            "near_tie_details": [x.to_json() for x in divergences if x.verdict == "near-tie"],
        },
        "best": None if best is None else best_json(best),
    }
def report(result: BenchResult, rows: Sequence[Row], divergences: Sequence[Divergence],
           console: Console) -> None:
    """The terminal output: tables, bar chart, lossless verdict."""
    plan = result.plan
    if not result.records:
        console.print("[yellow]no generation finished: nothing to report[/]")
        return
    console.print(summary_table(rows))
    if plan.warm_prompts:
        console.print(Text(f"history warmed ({plan.opts.warm_history}) before measuring: {result.warm_generations} "
                           f"unrecorded generations of {len(plan.warm_prompts)} prompts by "
                           + ", ".join(m.name for m in plan.warm_modes)))
    console.print(detail_table(rows))
    chart = bar_chart(rows)
    if chart:
        console.print(Text(chart))
    greedy = all(s.temperature == 0 for s in plan.settings.values())
    compared = sum(1 for r in result.records if r.lossless in COMPARED)
    ties = [x for x in divergences if x.verdict == "near-tie"]
    mismatches = [x for x in divergences if x.verdict == "mismatch"]
    for x in divergences:
        bad = x.verdict == "mismatch"
        gap = "-" if x.baseline_gap is None else f"{x.baseline_gap:.3g}"
        bound = "-" if x.tie_bound is None else f"{x.tie_bound:.3g}"
        console.print(
            f"{'[bold red]MISMATCH[/] [red]' if bad else '[yellow]near-tie[/] '}{escape(x.mode)}: prompt "
            f"{escape(x.prompt_id)} repeat {x.repeat + 1} turn {x.turn + 1}: first differing token at "
            f"position {x.first_diff} (baseline {x.baseline_token} vs {x.mode_token}; baseline runner-up "
            f"{x.baseline_runner_up}, logit gap {gap}"
            + ("" if x.mode_token_gap is None or x.mode_token == x.baseline_runner_up
               else f", the mode's token {x.mode_token_gap:.3g} behind")
            + f", near-tie bound {bound}; lengths {x.baseline_length} "
            f"and {x.mode_length}){'[/]' if bad else ''}"
        )
    if not greedy:
        console.print("[yellow]lossless check skipped: temperature > 0 (outputs are samples)[/]")
    elif mismatches:
        console.print(f"[bold red]lossless check failed: {len(mismatches)} of {compared} outputs differ "
                      "from the baseline beyond a floating-point near-tie[/]")
    elif compared == 0:
        console.print("lossless check: nothing to compare (only the baseline ran)")
    else:
        console.print(f"[green]lossless check passed: {compared - len(ties)} of {compared} outputs identical to "
                      f"the baseline, {len(ties)} diverged at a floating-point near-tie, 0 mismatches "
                      "(temperature 0)[/]")
    if result.interrupted:
        how = "terminated (SIGTERM)" if result.stopped_by == "SIGTERM" else "interrupted"
        console.print(f"[yellow]{how}: {len(result.records)} of {plan.n_generations} generations measured[/]")


def best_json(best: Row) -> dict[str, Any]:
    """The `best` entry of the JSON: the fastest drafting mode's overall figures."""
    return {"mode": best.mode, "speedup_median": best.speedup_median, "speedup_min": best.speedup_min,
            "speedup_max": best.speedup_max, "tokens_per_second": best.tokens_per_second,
            "acceptance_rate": best.acceptance_rate, "mean_accepted_length": best.mean_accepted_length}
