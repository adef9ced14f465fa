"""Drafting's share of decode wall time in real `auto` generations with a full history
store (issue #14: under 2 % with 10 M tokens). Fills a temporary store for the default
target's vocabulary with N tokens (as benchmarks.history_scale makes them), opens it the
way a run does, then generates the built-in code prompts with the default profile.

    python -m benchmarks.history_draft_share [--tokens 10000000] [--max-tokens 192]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from benchmarks.history_scale import documents
from specli import engine
from specli.bench.suites import suite
from specli.history import HistoryStore, write_store
from specli.profiles.resolve import resolve_settings
from specli.runtime import open_runtime


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.history_draft_share", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--max-tokens", type=int, default=192)
    args = ap.parse_args()
    os.environ["SPECLI_HISTORY_DIR"] = tempfile.mkdtemp(prefix="specli-history-")  # never the user's store
    s = resolve_settings(None, {"max_tokens": args.max_tokens, "history_max_tokens": args.tokens})
    rt = open_runtime(s)
    try:
        docs = documents(args.tokens, np.random.default_rng(0))
        key = rt.target.vocab_key()
        path = HistoryStore.open(key, max_tokens=args.tokens).path
        write_store(path, key, np.array([len(d) for d in docs]), np.concatenate(docs).astype(np.int32))
        t0 = time.perf_counter()
        store = HistoryStore.open(key, max_tokens=args.tokens)  # as a run opens it; never saved here
        print(f"store of {store.index.n_tokens:,} tokens opened (read and indexed) in {time.perf_counter() - t0:.1f} s")
        for p in [p for p in suite("code")]:
            rt.target.reset()
            if rt.draft is not None:
                rt.draft.reset()
            res = engine.run(rt.target, rt.prompt_tokens(p.turns[0], s), rt.generation_config(s), rt.drafter(s, store.index))
            c = res.counters
            decode = c.t_total - c.t_prefill
            print(f"{p.id}: {c.n_generated} tokens in {c.n_target_forwards} steps; drafting {c.t_draft:.3f} s of "
                  f"{decode:.2f} s decode ({100 * c.t_draft / decode:.2f} %, {1000 * c.t_draft / c.n_target_forwards:.2f} ms "
                  f"a step); steps by drafter {c.drafter_steps}")
    finally:
        rt.close()


if __name__ == "__main__":
    main()
