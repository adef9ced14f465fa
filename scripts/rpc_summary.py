"""One row per `specli bench --json` file of scripts/bench_rpc.sh: the baseline's
decode speed and per-forward time, and auto's decode speedup, draft length and
acceptance, on the same prompts.

    python scripts/rpc_summary.py bench-rpc/local.json bench-rpc/rpc-*ms.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _pooled(records: list[dict], num: str, den: str) -> float:
    d = sum(r[den] for r in records)
    return sum(r[num] for r in records) / d if d else 0.0


def row(path: Path) -> str:
    doc = json.loads(path.read_text(encoding="utf-8"))
    base = [r for r in doc["records"] if r["kind"] == "baseline"]
    auto = [r for r in doc["records"] if r["mode"] == "auto"]
    base_ms = statistics.median(r["ms_per_target_forward"] for r in base)
    base_tps = statistics.median(r["decode_tokens_per_second"] for r in base)
    speedup = statistics.median(r["decode_speedup"] for r in auto if r["decode_speedup"] is not None)
    k = _pooled(auto, "n_drafted", "n_target_forwards")
    tau = _pooled(auto, "n_step_tokens", "n_target_forwards")
    acc = _pooled(auto, "n_accepted", "n_drafted")
    auto_ms = statistics.median(r["ms_per_target_forward"] for r in auto)
    return (f"| {path.stem} | {base_tps:.1f} | {base_ms:.0f} | {speedup:.2f}x | {k:.1f} | {acc:.2f} | {tau:.2f} "
            f"| {auto_ms:.0f} |")


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    print("| run | baseline decode tok/s | baseline ms/forward | auto decode speedup | auto drafted/forward "
          "| acceptance | tokens/forward | auto ms/forward |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in sys.argv[1:]:
        print(row(Path(p)))


if __name__ == "__main__":
    main()
