"""The follow-up turn of issue 64: a chat asks for a function, then to change it and
repeat it whole. Greedy, the default pair, `auto` against plain decoding (`none`) on the
same conversation, through `specli bench --turns all` (each turn prefilled on the
previous one's cache, as chat does).

Per turn and repeat: decode speed of each mode, auto's speedup over none, its drafts
(steps, drafted, accepted, the longest draft) and the lossless verdict: equal, or the
first differing token with the baseline's logit gap and the near-tie bound (bench's
tie-aware check). Turn 2 is asked on the baseline's turn-1 answer in every mode (bench
at temperature 0), so it compares two decodings of one conversation even where turn 1
parted at a near-tie.

    python -m benchmarks.followup_turn --repeat 2 --max-tokens 320 [--json out.json] [-- extra bench options]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

FIRST = ("Write a Python function that returns the n-th Fibonacci number, with a docstring and a short test.")
FOLLOW_UP = "Now add type hints and a doctest to that function; repeat the whole function."


def run_bench(repeat: int, max_tokens: int, out: Path, extra: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "followup.jsonl"
        prompts.write_text(json.dumps({"question_id": "followup", "category": "edit", "turns": [FIRST, FOLLOW_UP]})
                           + "\n")
        cmd = [sys.executable, "-m", "specli", "bench", "--prompts", str(prompts), "--turns", "all",
               "--modes", "none,auto", "--temperature", "0", "--max-tokens", str(max_tokens),
               "--repeat", str(repeat), "--json", str(out), *extra]
        return subprocess.call(cmd, stdout=subprocess.DEVNULL)


def longest_draft(r: dict[str, Any]) -> int:
    return max((k for counts in r["steps_by_k"].values() for k, n in enumerate(counts) if n), default=0)


def report(data: dict[str, Any]) -> list[str]:
    records = data["records"]
    base = {(r["repeat"], r["turn"]): r for r in records if r["kind"] == "baseline"}  # plain decoding
    lines = []
    for r in sorted((r for r in records if r["mode"] == "auto"), key=lambda r: (r["repeat"], r["turn"])):
        b = base[(r["repeat"], r["turn"])]
        ms_auto = 1000 / r["decode_tokens_per_second"] if r["decode_tokens_per_second"] else float("nan")
        ms_none = 1000 / b["decode_tokens_per_second"] if b["decode_tokens_per_second"] else float("nan")
        steps = ", ".join(f"{k} {v}" for k, v in sorted(r["drafter_steps"].items()))
        verdict = r["lossless"]
        if r["first_diff"] is not None:
            found = data["lossless"]["details"] + data["lossless"]["near_tie_details"]
            div = next((d for d in found if (d["mode"], d["repeat"], d["turn"]) == ("auto", r["repeat"], r["turn"])),
                       None)
            if div is not None:
                verdict += (f" at token {div['first_diff']} (baseline {div['baseline_token']} vs {div['mode_token']}, "
                            f"logit gap {div['baseline_gap']}, mode token behind {div['mode_token_gap']}, "
                            f"bound {div['tie_bound']})")
        lines.append(
            f"repeat {r['repeat'] + 1} turn {r['turn'] + 1}: none {ms_none:.1f} ms/token ({b['n_generated']} tokens), "
            f"auto {ms_auto:.1f} ms/token ({r['n_generated']} tokens), decode speedup "
            f"{r['decode_speedup'] or float('nan'):.3f}; auto drafted {r['n_drafted']}, accepted {r['n_accepted']}, "
            f"longest draft {longest_draft(r)}, steps {steps}; lossless: {verdict}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--json", type=Path, help="keep bench's JSON here")
    ap.add_argument("extra", nargs="*", help="more `specli bench` options (after --)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = a.json or Path(tmp) / "followup.json"
        code = run_bench(a.repeat, a.max_tokens, out, a.extra)
        if not out.exists():
            print(f"specli bench failed (exit {code})", file=sys.stderr)
            return code or 1
        data = json.loads(out.read_text())
    for line in report(data):
        print(line)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
