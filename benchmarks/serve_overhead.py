"""The server's own cost, one run: the same greedy requests through `specli serve` (HTTP,
streamed, timed by the client) and through the engine in this process (as `specli
generate` runs it), alternating prompt by prompt, so both see the same sequence of
prompts and the same KV-cache states.

- decode: client-side tok/s over HTTP ((tokens - 1) / (last - first content chunk))
  against the in-process generation's decode tok/s; the goal is within 3 %.
- time to first token: the client's, against the server engine's own (its `specli`
  object): the difference is what HTTP, JSON, tokenizing and the queue add (goal < 20 ms).

    python -m benchmarks.serve_overhead --profile default --suites code,edit --max-tokens 192
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from harness.processes import ServeProcess
from specli import profiles
from specli.bench.servers import stream_chat
from specli.bench.suites import suite
from specli.engine import metrics, run
from specli.runtime import open_runtime


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serve_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="default")
    p.add_argument("--drafters", default="none,auto")
    p.add_argument("--suites", default="code,edit")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    prompts = [pr.turns[0] for name in args.suites.split(",") for pr in suite(name)]
    s = profiles.resolve_settings(args.profile, {"history": False, "threads": args.threads})
    srv = ServeProcess(["--profile", args.profile, "--no-history", "--threads", str(args.threads)],
                       env={"SPECLI_HISTORY_DIR": tempfile.mkdtemp()})
    rt = open_runtime(s)
    rows = []
    try:
        srv.wait_ready(900)
        for drafter in args.drafters.split(","):
            sd = profiles.resolve_settings(args.profile, {"history": False, "threads": args.threads,
                                                          "drafter": drafter, "max_tokens": args.max_tokens})
            for i, text in enumerate(prompts):
                messages = [{"role": "user", "content": text}]
                h = stream_chat(srv.base, messages, args.max_tokens, {}, {"specli": {"drafter": drafter}})
                own = run(rt.target, rt.prompt_tokens(text, sd), rt.generation_config(sd), rt.drafter(sd)).counters
                n = int(h["usage"]["completion_tokens"])
                http_decode = (n - 1) / (h["last"] - h["first"])
                engine_ttft = h["specli"]["time_to_first_token_s"]
                rows.append((drafter, i, n, own.n_generated, http_decode, metrics.decode_tokens_per_second(own),
                             h["first"] - h["t0"], engine_ttft, own.t_first_token or 0.0))
                r = rows[-1]
                print(f"{drafter:5} {i} tokens {n}/{own.n_generated} decode http {r[4]:.1f} own {r[5]:.1f} "
                      f"({r[4] / r[5]:.3f}) ttft http {r[6] * 1000:.0f} ms server engine {r[7] * 1000:.0f} ms "
                      f"own {r[8] * 1000:.0f} ms", flush=True)
    finally:
        srv.stop()
        rt.close()
    print("\n| drafter | prompts | decode over HTTP / in process (median, min-max) | pooled | "
          "TTFT added by HTTP (median, max) |\n|---|---:|---|---:|---|")
    for drafter in args.drafters.split(","):
        rs = [r for r in rows if r[0] == drafter]
        ratios = [r[4] / r[5] for r in rs]
        pooled = sum(r[2] - 1 for r in rs) / sum((r[2] - 1) / r[4] for r in rs) / (
            sum(r[3] - 1 for r in rs) / sum((r[3] - 1) / r[5] for r in rs))
        added = [(r[6] - r[7]) * 1000 for r in rs]
        print(f"| {drafter} | {len(rs)} | {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | "
              f"{pooled:.3f} | {statistics.median(added):.1f} ms ({max(added):.1f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
