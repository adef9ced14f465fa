"""Speedups per mode and repeat from a `specli bench --json` file: with history on, the
first repeat is cold and later ones draft from the mode's own earlier outputs.

    specli bench --suite all --categories code,edit --modes baseline,auto,auto:history=false \
        --repeat 2 --json warm.json
    python scripts/bench_by_repeat.py warm.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    doc = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    cells: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r in doc["records"]:
        if r["kind"] in ("baseline", "peer-baseline") or r["decode_speedup"] is None:
            continue
        for category in (r["category"], "all"):
            cells[(r["mode"], category, r["repeat"])].append(r["decode_speedup"])
    repeats = sorted({k[2] for k in cells})
    print("| mode | category | " + " | ".join(f"repeat {i + 1}" for i in repeats) + " |")
    print("|---|---|" + "---:|" * len(repeats))
    for mode, category in dict.fromkeys((m, c) for m, c, _ in cells):
        row = [cells.get((mode, category, i)) for i in repeats]
        shown = [f"{statistics.median(x):.2f}x ({min(x):.2f}-{max(x):.2f})" if x else "-" for x in row]
        print(f"| {mode} | {category} | " + " | ".join(shown) + " |")


if __name__ == "__main__":
    main()
