"""Memory of an RPC client and its two servers over many generations: prints the
resident set size (MiB) of each process every few generations; flat is good.

    python scripts/rpc_memory.py [N_GENERATIONS=100] [MAX_TOKENS=32]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specli import profiles  # noqa: E402
from specli.engine import generate  # noqa: E402
from specli.runtime import open_runtime  # noqa: E402
from tests.test_rpc import free_port, start_server, stop  # noqa: E402

PROMPTS = ["Write a Python function that reverses a string.", "What is a binary tree?",
           "def add(a, b):", "List three prime numbers."]


def rss_mib(pid: int | str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    max_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    ports = [free_port(), free_port()]
    servers: list[subprocess.Popen[bytes]] = [start_server(p) for p in ports]
    try:
        s = profiles.resolve_settings(None, {"rpc": ",".join(f"127.0.0.1:{p}" for p in ports), "n_gpu_layers": -1,
                                             "tensor_split": "1,1", "max_tokens": max_tokens, "ctx": 1024})
        rt = open_runtime(s)
    except BaseException:
        for p in servers:
            stop(p)
        raise
    try:
        print("| generations | client MiB | server 1 MiB | server 2 MiB |")
        print("|---:|---:|---:|---:|")
        t0 = time.monotonic()
        for i in range(n + 1):
            if i % max(1, n // 10) == 0:
                print(f"| {i} | {rss_mib('self'):.0f} | {rss_mib(servers[0].pid):.0f} | {rss_mib(servers[1].pid):.0f} |",
                      flush=True)
            if i == n:
                break
            for _ in generate(rt.target, rt.prompt_tokens(PROMPTS[i % len(PROMPTS)]), rt.generation_config(),
                              rt.drafter()):
                pass
        print(f"{n} generations in {time.monotonic() - t0:.0f} s")
    finally:
        rt.close()
        for p in servers:
            stop(p)


if __name__ == "__main__":
    main()
