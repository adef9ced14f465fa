"""specli's own work per target forward in one real generation, and where it goes (#21).

Loads the profile's models, runs a warm-up generation, then the prompt twice: once
plain, for host milliseconds per target forward (wall time of the decode loop outside
llama.cpp's decode calls, from the engine's own counters), and once under cProfile, for
the five functions with the most own time per forward (llama.cpp's decode calls taken
out; the profiler's own cost inflates these, so read them as a ranking).

    python -m benchmarks.profile_step --drafter none
    python -m benchmarks.profile_step --target smollm2-135m-instruct-q4_1 --draft none --drafter ngram --suite edit
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile

from specli import profiles
from specli.bench.suites import suite
from specli.engine import metrics, run
from specli.runtime import open_runtime

# llama.cpp's own work (the decode calls and what waits on them), not specli's
LLAMA_CALLS = ("llama_decode", "llama_synchronize", "llama_get_logits_ith")
DECODE_CALLER = "_decode_chunk"  # backend/model.py: calls llama_decode through ctypes, timed in t_llama


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_step", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="default")
    p.add_argument("--target")
    p.add_argument("--draft")
    p.add_argument("--drafter", default="auto")
    p.add_argument("--suite", default="code")
    p.add_argument("--prompt", type=int, default=0, help="which prompt of the suite")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--top", type=int, default=5)
    args = p.parse_args()
    os.environ.setdefault("SPECLI_HISTORY_DIR", tempfile.mkdtemp(prefix="specli-profile-"))  # never the user's store
    given = {k: v for k, v in (("target", args.target), ("draft", args.draft)) if v is not None}
    s = profiles.resolve_settings(args.profile, {**given, "drafter": args.drafter, "max_tokens": args.max_tokens,
                                                 "threads": args.threads, "history": False})
    rt = open_runtime(s)
    try:
        text = list(suite(args.suite))[args.prompt].turns[0]
        prompt = rt.prompt_tokens(text, s)
        run(rt.target, prompt, rt.generation_config(s), rt.drafter(s))  # warm-up: kernels, calibration
        rt.target.reset()
        c = run(rt.target, prompt, rt.generation_config(s), rt.drafter(s)).counters
        rt.target.reset()
        prof = cProfile.Profile()
        prof.enable()
        cp = run(rt.target, prompt, rt.generation_config(s), rt.drafter(s)).counters
        prof.disable()
    finally:
        rt.close()
    forwards = max(1, c.n_target_forwards)
    decode_wall = c.t_total - c.t_prefill
    # t_llama counts the prefill's decode calls too: take them out with the prefill's wall time
    host = decode_wall - (c.t_llama - c.t_prefill)
    pforwards = max(1, cp.n_target_forwards)
    print(f"{args.drafter} on {args.suite}[{args.prompt}]: {c.n_generated} tokens, {c.n_target_forwards} target forwards, "
          f"{(c.n_generated - 1) / decode_wall:.1f} tok/s decode")
    print(f"host work (outside llama.cpp's decode calls): {host / forwards * 1000:.3f} ms per forward "
          f"(upper bound: the prefill's own Python is counted in it)")
    split = metrics.host_ms_per_forward(c)
    print(f"the decode phase's own account: {split['total']:.3f} ms per forward = "
          + " + ".join(f"{k} {split[k]:.3f}" for k in metrics.HOST_PARTS) + f"; llama.cpp {split['llama']:.2f} ms")
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, name), (_, nc, tt, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if any(call in name for call in LLAMA_CALLS):
            continue
        if name == DECODE_CALLER:  # the foreign call's time lands in its Python caller
            tt -= cp.t_llama
        rows.append((tt, nc, f"{os.path.basename(file)}:{line} {name}"))
    rows.sort(reverse=True)
    print(f"profiled: {sum(r[0] for r in rows) / pforwards * 1000:.3f} ms of Python per forward in "
          f"{len(rows)} functions")
    print("\n| own time per forward, ms (profiled) | calls per forward | function |\n|---:|---:|---|")
    for tt, nc, where in rows[: args.top]:
        print(f"| {tt / pforwards * 1000:.3f} | {nc / pforwards:.1f} | `{where}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
