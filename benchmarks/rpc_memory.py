"""Memory of an RPC client and its two servers over many generations: prints the
resident set size (MiB) of each process every few generations; flat is good.

    python -m benchmarks.rpc_memory [N_GENERATIONS=100] [MAX_TOKENS=32]
"""

from __future__ import annotations

import argparse
import subprocess
import time

from harness.processes import free_port, rss_mib, start_rpc_server, stop_process
from specli import profiles
from specli.engine import generate
from specli.runtime import open_runtime

PROMPTS = ["Write a Python function that reverses a string.", "What is a binary tree?",
           "def add(a, b):", "List three prime numbers."]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.rpc_memory", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", nargs="?", type=int, default=100, metavar="N_GENERATIONS")
    ap.add_argument("max_tokens", nargs="?", type=int, default=32, metavar="MAX_TOKENS")
    args = ap.parse_args()
    n, max_tokens = args.n, args.max_tokens
    ports = [free_port(), free_port()]
    servers: list[subprocess.Popen[bytes]] = [start_rpc_server(p) for p in ports]
    try:
        s = profiles.resolve_settings(None, {"rpc": ",".join(f"127.0.0.1:{p}" for p in ports), "n_gpu_layers": -1,
                                             "tensor_split": "1,1", "max_tokens": max_tokens, "ctx": 1024})
        rt = open_runtime(s)
    except BaseException:
        for server in servers:
            stop_process(server)
        raise
    try:
        print("| generations | client MiB | server 1 MiB | server 2 MiB |")
        print("|---:|---:|---:|---:|")
        t0 = time.monotonic()
        for i in range(n + 1):
            if i % max(1, n // 10) == 0:
                print(f"| {i} | {rss_mib():.0f} | {rss_mib(servers[0].pid):.0f} | {rss_mib(servers[1].pid):.0f} |",
                      flush=True)
            if i == n:
                break
            for _ in generate(rt.target, rt.prompt_tokens(PROMPTS[i % len(PROMPTS)]), rt.generation_config(),
                              rt.drafter()):
                pass
        print(f"{n} generations in {time.monotonic() - t0:.0f} s")
    finally:
        rt.close()
        for server in servers:
            stop_process(server)


if __name__ == "__main__":
    main()
