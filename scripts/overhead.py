#!/usr/bin/env python
"""Python work per step (everything outside llama_decode) as the history grows.

Prefills histories of increasing length, then generates with the draft-model drafter
and reports the share of wall time spent outside llama.cpp's decode calls.
Usage: scripts/overhead.py [--lengths 100,2000,8000] [--tokens 64] [--target NAME] [--draft NAME]
"""

from __future__ import annotations

import argparse
import json

from specli import profiles
from specli.engine import GenerationConfig, run
from specli.engine.metrics import python_overhead_fraction, tokens_per_second
from specli.runtime import open_runtime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lengths", default="100,2000,8000")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct-q4_k_m")
    ap.add_argument("--drafter", default="draft")
    ap.add_argument("--draft-max", type=int, default=3)
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    s = profiles.resolve_settings(None, {"target": args.target, "draft": args.draft, "drafter": args.drafter,
                                         "draft_max": args.draft_max, "ctx": max(lengths) + args.tokens + 64})
    rt = open_runtime(s)
    drafter = rt.drafter()
    filler = rt.target.tokenize("def f(x):\n    return x * 2 + 1  # a line of code\n" * 1000)
    rows = []
    for n in lengths:
        rt.target.reset()
        if rt.draft is not None:
            rt.draft.reset()
        prompt = filler[:n]
        res = run(rt.target, prompt, GenerationConfig(max_tokens=args.tokens, draft_max=args.draft_max), drafter)
        c = res.counters
        decode_phase = c.t_total - c.t_prefill
        rows.append({"history": n, "tokens": c.n_generated, "tok_s": tokens_per_second(c),
                     "python_overhead_fraction": python_overhead_fraction(c),
                     "python_seconds_per_step": (c.t_total - c.t_llama) / max(1, c.n_target_forwards),
                     "decode_phase_s": decode_phase})
        print(json.dumps(rows[-1]))
    rt.close()


if __name__ == "__main__":
    main()
