"""A calibration taken while the machine was busy, then generation on the idle machine:
how close `auto` gets to the speed a fresh calibration gives within the first
generation, and what the next run starts from.

Three starts, in order ABC, CBA, ... round by round, each a new runtime as a user's next command
would open it, the same prompt and settings:
- fresh: the table measured idle;
- detected: the table measured under CPU burners, stored provisional as specli stores it
  (the run finds the machine idle and measures it again before generating);
- healing: the same busy table with the mark removed, as if the load had gone unseen:
  auto corrects it as it generates, and the runtime stores what it learned (marked
  provisional where its t1 was off by more than noise: then the next start measures it
  again, and the line shows that table too).

Reported per start: decode tok/s of the whole generation and of its second half, each
against fresh in the same round, and the stored table afterwards against the fresh one.
The user's own calibration entry is put back at the end (where there was none, the
fresh table).

    python -m benchmarks.poisoned_start --profile default --rounds 3 --max-tokens 256
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from dataclasses import replace

from specli import profiles
from specli.bench.suites import suite
from specli.drafters.auto.costs import interpolate
from specli.engine import GenerationConfig, generate, metrics
from specli.profiles import Settings
from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT, open_runtime
from specli.runtime.measure import calibration as cal_store
from specli.runtime.measure.calibration import Calibration

STARTS = ("fresh", "detected", "healing")


def _busy_calibration(s: Settings) -> Calibration:
    """The table `specli calibrate` measures while every core spins in another process."""
    rt = open_runtime(s)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        context = rt.target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
        return cal_store.measure(rt.target, rt.draft, context)
    finally:
        for p in burners:
            p.kill()
            p.wait()
        rt.close()


def _generate(s: Settings, prompt: str) -> tuple[float, float, Calibration | None]:
    """One new runtime's first generation: decode tok/s overall and over its second half,
    and the calibration entry stored when it closed."""
    rt = open_runtime(s)
    try:
        tokens = rt.prompt_tokens(prompt)
        events = list(generate(rt.target, tokens, GenerationConfig(max_tokens=s.max_tokens, draft_max=s.draft_max),
                               rt.drafter(s)))
        key = rt.calibration_key()
    finally:
        rt.close()
    c = events[-1].counters
    half = next(ev.counters for ev in events if ev.counters.n_generated >= c.n_generated // 2)
    second = (c.n_generated - half.n_generated) / max(1e-9, c.t_total - half.t_total)
    return metrics.decode_tokens_per_second(c), second, cal_store.load(key)


def _next_start(s: Settings) -> Calibration:
    """The table the next command starts from."""
    rt = open_runtime(s)
    try:
        return rt.calibration()
    finally:
        rt.close()


def _table_error(cal: Calibration, fresh: Calibration) -> float:
    """Largest relative error of `cal`'s batch curve (in seconds) against the fresh one."""
    return max(abs(cal.t1 * interpolate(cal.sizes, cal.ratios, n) / (fresh.t1 * interpolate(fresh.sizes, fresh.ratios, n))
                   - 1) for n in range(1, max(fresh.sizes) + 1))


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.poisoned_start", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="default")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--suite", default="code")
    args = p.parse_args()
    s = profiles.resolve_settings(args.profile, {"drafter": "auto", "history": False, "draft_max": 64,
                                                 "max_tokens": args.max_tokens})
    prompt = suite(args.suite)[0].turns[0]
    rt = open_runtime(s)
    key, own = rt.calibration_key(), cal_store.load(rt.calibration_key())
    fresh = cal_store.measure_idle(rt.target, rt.draft, rt.target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT])
    rt.close()
    busy = _busy_calibration(s)
    print(f"fresh t1 {fresh.t1 * 1000:.1f} ms; busy t1 {busy.t1 * 1000:.1f} ms, provisional {busy.provisional}, "
          f"{busy.load}; busy table off by up to {_table_error(busy, fresh):.0%}")
    tables = {"fresh": fresh, "detected": replace(busy, provisional=True),
              "healing": replace(busy, provisional=False)}
    speeds: dict[str, list[tuple[float, float]]] = {name: [] for name in STARTS}
    try:
        for r in range(args.rounds):
            for name in STARTS if r % 2 == 0 else STARTS[::-1]:  # the machine drifts: ABC, CBA, ...
                cal_store.store(key, tables[name])
                whole, second, after = _generate(s, prompt)
                speeds[name].append((whole, second))
                state = (f"after: provisional {after.provisional}, off by {_table_error(after, fresh):.0%}"
                         if after else "after: none stored")
                if after is not None and after.provisional:
                    state += f"; the next start measures it again: off by {_table_error(_next_start(s), fresh):.0%}"
                print(f"round {r + 1} {name:9s} {whole:6.2f} tok/s, second half {second:6.2f}; {state}", flush=True)
    finally:  # never leave a poisoned table behind
        cal_store.store(key, own or fresh)
    print("\n| start | decode tok/s (median) | vs fresh | second half | vs fresh |\n|---|---:|---:|---:|---:|")
    for name in STARTS:
        whole = [w / f[0] for (w, _), f in zip(speeds[name], speeds["fresh"])]
        second = [h / f[1] for (_, h), f in zip(speeds[name], speeds["fresh"])]
        print(f"| {name} | {statistics.median(w for w, _ in speeds[name]):.2f} | {statistics.median(whole):.3f} "
              f"| {statistics.median(h for _, h in speeds[name]):.2f} | {statistics.median(second):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
