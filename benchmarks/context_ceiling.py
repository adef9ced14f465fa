"""How close each request of an edit session came to the speed-up the calibration allows
at its context: n / v(n, ctx), the most tokens a batch of n rows can give per plain step
there (a draft that is always right), maximised over n.

    python -m benchmarks.serve --profile default --ctx 16384 --workloads edit --edits 12 \\
        --spec-types none,ngram-mod --json session.json
    python -m benchmarks.context_ceiling session.json --profile default --threads 2

Per edit request: its context (the prompt plus half the answer), specli's decode speed
over plain decoding's in the same run (llama-server `none`; without it, the plain step
the calibration timed at that context, marked *), the ceiling at that context from this
machine's stored calibration (the batch table times its context growth, as `auto`
prices it), and the fraction reached; and specli's speed over ngram-mod's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from specli import profiles, registry
from specli.drafters.auto.costs import CostModel
from specli.runtime import calibration
from specli.runtime.wiring import cost_model

N_MAX = 65


def ceiling(costs: CostModel, context: int) -> tuple[float, int]:
    """max over n of n / v(n, context), and the n reaching it."""
    costs.context = context
    ns = np.arange(1, N_MAX + 1)
    gain = ns / costs.batch_ratios(N_MAX)
    best = int(np.argmax(gain))
    return float(gain[best]), int(ns[best])


def plain_step(cal: calibration.Calibration, context: int) -> float:
    """Seconds of a plain step at `context` cached tokens, as the calibration timed it."""
    return float(np.interp(context, [0, *cal.contexts], [cal.t1, *cal.context_t1]))


def find_calibration(target_file: str, threads: int) -> calibration.Calibration:
    """The stored calibration of this target at these threads, with the longest context axis."""
    entries = json.loads(calibration.cache_file().read_text())["entries"]
    found = [calibration.Calibration(**e) for k, e in entries.items()
             if k.startswith(target_file + "|") and f"|t{threads}|" in k and k.split("|")[7] == "batch"]
    if not found:
        raise SystemExit(f"no calibration of {target_file} at {threads} threads: run specli calibrate first")
    return max(found, key=lambda c: max(c.contexts, default=0))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("session", type=Path, help="benchmarks.serve --json output with specli, none and ngram-mod")
    p.add_argument("--profile", default="default")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--goal", type=float, default=0.85)
    args = p.parse_args()
    target = registry.resolve(profiles.resolve_settings(args.profile).target)
    cal = find_calibration(Path(target).name, args.threads)
    costs = cost_model(cal)
    rows = [r for r in json.loads(args.session.read_text())["requests"] if r["workload"] == "edit"]
    by = {(r["system"], r["index"]): r for r in rows}
    print(f"calibration contexts {cal.contexts}", file=sys.stderr)
    print("| edit | context | specli tok/s | plain tok/s | ngram-mod tok/s | speed-up | ceiling (n) "
          "| of ceiling | over ngram-mod |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = float("inf")
    for i in sorted({r["index"] for r in rows}):
        s, plain, mod = by[("specli", i)], by.get(("llama-server none", i)), by.get(("llama-server ngram-mod", i))
        context = s["prompt_tokens"] + s["completion_tokens"] // 2
        top, n = ceiling(costs, context)
        plain_tps = plain["decode_tps"] if plain else 1 / plain_step(cal, context)
        speedup = s["decode_tps"] / plain_tps
        worst = min(worst, speedup / top)
        over = s["decode_tps"] / mod["decode_tps"] if mod else float("nan")
        print(f"| {i} | {context} | {s['decode_tps']:.1f} | {plain_tps:.1f}{'' if plain else '*'} "
              f"| {mod['decode_tps'] if mod else 0:.1f} | {speedup:.2f}x | {top:.2f}x ({n}) "
              f"| {speedup / top:.2f} | {over:.2f}x |")
    print(f"\nworst fraction of the ceiling: {worst:.2f} (goal {args.goal})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
