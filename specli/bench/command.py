"""`specli bench` from start to end: plan, run, write the outputs, report, exit code."""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path

from rich.console import Console

from specli.bench.plan import BenchOptions, plan_bench
from specli.bench.records import LosslessError, aggregate, divergences_of
from specli.bench.report import csv_text, document, markdown_table, report
from specli.bench.run import BenchResult, execute
from specli.bench.tune import best_mode, write_profile
from specli.engine import Verifier
from specli.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, SpecliError, Terminated, UsageError


def write_output(path: str | Path, text: str, what: str) -> None:
    """`text` to the file `path`, or to stdout for `-`."""
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    p = Path(path).expanduser()
    try:
        if p.parent != Path(""):
            p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write the {what} file {p}: {e.strerror or e}") from None


def command(opts: BenchOptions, *, verifier: Verifier | None = None, console: Console | None = None,
            err_console: Console | None = None) -> int:
    """`specli bench` from start to end. Returns the exit code (0; 130 after Ctrl-C,
    143 after SIGTERM, both once the results so far are written and shown); raises
    LosslessError (exit 9) after writing every output when a mode's tokens differ
    from the baseline's at temperature 0."""
    err = err_console or Console(stderr=True, highlight=False)
    if console is None:
        console = err if opts.json_out == "-" else Console(highlight=False)
        if not console.is_terminal:  # a file or pipe: do not squeeze the tables into 80 columns
            console = Console(highlight=False, stderr=console.stderr, width=max(console.width, 140))
    plan = plan_bench(opts)
    result = BenchResult(plan, started=datetime.datetime.now().astimezone().isoformat(timespec="seconds"))
    t0 = time.perf_counter()
    failure: SpecliError | None = None
    try:
        execute(plan, result, verifier, err)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated) under the CLI's handler
        result.interrupted = True
        result.stopped_by = "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"
    except SpecliError as e:
        failure = e
        result.error = e.one_line()
    result.seconds = time.perf_counter() - t0
    if failure is not None and not result.records:
        raise failure

    divergences = divergences_of(result.records, result.numerics.get("tie_bound"),
                                 result.numerics.get("peer_tie_bounds"))
    mismatches = [x for x in divergences if x.verdict == "mismatch"]
    rows = aggregate(result.records, [m.name for m in plan.modes])
    best = best_mode(plan, rows) if (opts.sweep or opts.write_profile) else None
    if opts.json_out:
        write_output(opts.json_out, json.dumps(document(result, rows, divergences, best), indent=2) + "\n", "JSON")
    if opts.csv_out:
        write_output(opts.csv_out, csv_text(result.records), "CSV")
    if opts.markdown_out:
        write_output(opts.markdown_out, markdown_table(rows), "Markdown")
    report(result, rows, divergences, console)
    if failure is not None:
        raise failure
    if result.interrupted:
        if opts.write_profile:
            err.print("[yellow]--write-profile skipped: the run was interrupted[/]")
        return EXIT_TERMINATED if result.stopped_by == "SIGTERM" else EXIT_INTERRUPTED
    if opts.write_profile:
        if best is None:
            err.print("[yellow]--write-profile: no drafting mode finished without a mismatch; nothing written[/]")
        else:
            path = write_profile(plan, rows, best, opts.write_profile)
            console.print(f"wrote profile {opts.write_profile} ({best.mode}, "
                          f"{best.speedup_median or 0:.2f}x): {path}")
    if mismatches:
        modes = sorted({x.mode for x in mismatches})
        raise LosslessError(
            f"lossless check failed: {len(mismatches)} output(s) differ from the baseline "
            f"({', '.join(modes)})",
            "the first differing positions are listed above",
        )
    return 0
