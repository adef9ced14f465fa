"""Decode speedup per measured category and mode from `specli bench --warm-history
--json` files (one or more), with how the history was warmed; marks a median below
0.97x (issue #14's bound for auto with the history warm from other categories).

    scripts/bench_warm_categories.sh 4 128 out/
    python scripts/bench_warm_summary.py out/*.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

BOUND = 0.97


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    print("| file | category | mode | n | decode speedup median (min-max) | history |")
    print("|---|---|---|---:|---:|---|")
    for name in sys.argv[1:]:
        doc = json.loads(Path(name).read_text(encoding="utf-8"))
        warm = doc.get("warm_history") or {}
        cells: dict[tuple[str, str], list[float]] = defaultdict(list)
        for r in doc["records"]:
            if r["kind"] == "drafter" and r["decode_speedup"] is not None:
                cells[(r["category"], r["mode"])].append(r["decode_speedup"])
        for (category, mode), x in cells.items():
            med = statistics.median(x)
            flag = f" **< {BOUND}**" if med < BOUND else ""
            history = (f"warm ({warm['how']}): {warm['generations_run']}/{warm['generations']} generations of "
                       f"{warm['n_prompts']} prompts" if mode in warm.get("modes", []) else "cold")
            print(f"| {Path(name).stem} | {category} | {mode} | {len(x)} | {med:.2f}x ({min(x):.2f}-{max(x):.2f}){flag} "
                  f"| {history} |")


if __name__ == "__main__":
    main()
