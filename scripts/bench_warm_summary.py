"""Decode speedup per measured category and mode from `specli bench --warm-history
--json` files (one or more), with how the history was warmed; marks a median below
0.97x (issue #14's bound for auto with the history warm from other categories).

Timed speedups of single generations swing by +-10 % on a shared 2-core machine (a
generation of 126 plain steps and one draft measured 1.18x). So each row also gives the
speedup modelled from what the generations did (their plain steps and the size of every
verify batch) priced with the calibrated batch costs in the JSON's `costs`, pooled over
the row: free of timing noise, blind to costs outside llama.cpp (lookups, Python; the
bench's split shows those) and meant for one-batch verification (not --exact). Rows where
the draft model drafted show no modelled figure: its tokens are not counted in the JSON.

    scripts/bench_warm_categories.sh 4 128 out/
    python scripts/bench_warm_summary.py out/*.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from specli.drafters.auto.costs import interpolate

BOUND = 0.97


def modelled_steps(record: dict[str, Any], sizes: list[int], ratios: list[float]) -> float:
    """The record's decode cost in plain steps: drafted_by_pos[i] steps drafted more than i tokens."""
    by_pos = record["drafted_by_pos"] or []
    steps = record["n_target_forwards"] - (by_pos[0] if by_pos else 0)
    for k in range(1, len(by_pos) + 1):
        exactly_k = by_pos[k - 1] - (by_pos[k] if k < len(by_pos) else 0)
        steps += exactly_k * interpolate(sizes, ratios, k + 1)
    return steps


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    print("| file | category | mode | n | decode speedup median (min-max) | modelled, pooled | history |")
    print("|---|---|---|---:|---:|---:|---|")
    for name in sys.argv[1:]:
        doc = json.loads(Path(name).read_text(encoding="utf-8"))
        warm = doc.get("warm_history") or {}
        costs = doc.get("costs")
        base = {(r["prompt_index"], r["repeat"], r["turn"]): r for r in doc["records"] if r["kind"] == "baseline"}
        cells: dict[tuple[str, str], list[float]] = defaultdict(list)
        pooled: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        unpriced: set[tuple[str, str]] = set()  # cells where the draft model drafted
        for r in doc["records"]:
            if r["kind"] != "drafter" or r["decode_speedup"] is None:
                continue
            cells[(r["category"], r["mode"])].append(r["decode_speedup"])
            b = base.get((r["prompt_index"], r["repeat"], r["turn"]))
            if "draft" in r["drafter_steps"]:
                unpriced.add((r["category"], r["mode"]))
            elif costs and b is not None and r["n_target_forwards"] and b["n_target_forwards"]:
                p = pooled[(r["category"], r["mode"])]
                p[0] += r["n_step_tokens"]
                p[1] += modelled_steps(r, costs["sizes"], costs["ratios"])
                p[2] += b["n_step_tokens"]
                p[3] += b["n_target_forwards"]
        for (category, mode), x in cells.items():
            med = statistics.median(x)
            flag = f" **< {BOUND}**" if med < BOUND else ""
            p = pooled.get((category, mode))
            priced = p and p[1] and p[3] and (category, mode) not in unpriced
            modelled = f"{(p[0] / p[1]) / (p[2] / p[3]):.3f}x" if priced else "-"
            history = (f"warm ({warm['how']}): {warm['generations_run']}/{warm['generations']} generations of "
                       f"{warm['n_prompts']} prompts" if mode in warm.get("modes", []) else "cold")
            print(f"| {Path(name).stem} | {category} | {mode} | {len(x)} | {med:.2f}x ({min(x):.2f}-{max(x):.2f}){flag} "
                  f"| {modelled} | {history} |")


if __name__ == "__main__":
    main()
