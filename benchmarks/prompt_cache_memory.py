"""The prompt cache's bounds under churn: `specli serve` answers --requests requests
that cycle through --conversations conversations (each under its own long system
prompt, growing turn by turn), with streamed requests dropped mid-stream and bad
requests mixed in, while its RSS, its cache folder's size and /health are sampled:

    python -m benchmarks.prompt_cache_memory --json memory.json

The bound checked: RSS at most (RSS after a first request that fills most of the
context on both models, so that the weights and the whole KV caches are resident, plus
--cache-ram) x 1.10, and the folder at most --cache-disk. Every request must end with its answer, a 503 with Retry-After, or
(dropped on purpose) nothing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

from harness.processes import ServeProcess, http, rss_mib

SMOL = "smollm2-135m-instruct-q4_1"


def system_prompt(i: int) -> str:
    return f"You are assistant number {i}. " + " ".join(
        f"Rule {j} of assistant {i}: answer about topic {i * 100 + j} in one short line." for j in range(60))


def folder_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def dropped_stream(base: str, body: dict[str, Any]) -> None:
    """Start a stream and hang up after its first chunks."""
    host, port = base.removeprefix("http://").split(":")
    conn = HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    for _ in range(3):
        resp.readline()
    conn.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=SMOL)
    p.add_argument("--draft", default=SMOL)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--conversations", type=int, default=8)
    p.add_argument("--cache-ram", type=int, default=64)
    p.add_argument("--cache-disk", type=int, default=160)
    p.add_argument("--json", dest="json_out")
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="specli-cache-memory-"))
    srv = ServeProcess(["--target", args.target, "--draft", args.draft, "--ctx", "4096", "--threads", "2",
                        "--cache-ram", str(args.cache_ram), "--cache-disk", str(args.cache_disk),
                        "--cache-dir", str(folder), "--queue", "8", "--max-tokens", "16"])
    turns: list[list[dict[str, str]]] = [[] for _ in range(args.conversations)]
    outcomes: dict[str, int] = {}
    samples: list[dict[str, float]] = []
    health_fails = [0]
    stop = threading.Event()

    def poll_health() -> None:
        while not stop.is_set():
            if srv.health() != 200:
                health_fails[0] += 1
            time.sleep(0.5)

    try:
        srv.wait_ready(600)
        poller = threading.Thread(target=poll_health, daemon=True)
        poller.start()
        fill = [{"role": "user", "content": " ".join(f"word{j}" for j in range(880))}]  # ~3,600 of 4,096 tokens
        status = http("POST", srv.base + "/v1/chat/completions",
                      {"messages": fill, "max_tokens": 4, "specli": {"drafter": "draft"}}, timeout=600)[0]
        assert status == 200, status
        base_rss = rss_mib(srv.proc.pid)
        for i in range(args.requests):
            c = i % args.conversations
            if len(turns[c]) >= 12:  # a conversation that grew long starts over
                turns[c] = []
            msgs = [{"role": "system", "content": system_prompt(c)}, *turns[c],
                    {"role": "user", "content": f"Question {i}: what about topic {c * 100 + i % 60}?"}]
            body = {"messages": msgs, "temperature": 0, "max_tokens": 16}
            if i % 15 == 7:
                kind = "bad"
                status = http("POST", srv.base + "/v1/chat/completions", {**body, "temperature": "hot"})[0]
            elif i % 10 == 3:
                kind = "dropped"
                dropped_stream(srv.base, body)
                status = 0
            else:
                kind = "ok"
                status, _, data = http("POST", srv.base + "/v1/chat/completions", body, timeout=300)
                if status == 200:
                    text = json.loads(data)["choices"][0]["message"]["content"]
                    turns[c] += [msgs[-1], {"role": "assistant", "content": text}]
            outcomes[f"{kind} {status}"] = outcomes.get(f"{kind} {status}", 0) + 1
            if i % 10 == 0 or i == args.requests - 1:
                samples.append({"request": i, "rss_mib": rss_mib(srv.proc.pid), "disk_mib": folder_mib(folder)})
        status, _, data = http("GET", srv.base + "/metrics")
        metrics = {line.split()[0]: float(line.split()[1]) for line in data.decode().splitlines()
                   if line.startswith("specli:prompt_cache")}
    finally:
        stop.set()
        srv.stop()
    bound = (base_rss + args.cache_ram) * 1.10
    result = {"requests": args.requests, "conversations": args.conversations, "cache_ram_mib": args.cache_ram,
              "cache_disk_mib": args.cache_disk, "outcomes": outcomes, "health_failures": health_fails[0],
              "rss_after_fill_mib": base_rss, "rss_max_mib": max(s["rss_mib"] for s in samples),
              "rss_bound_mib": bound, "disk_max_mib": max(s["disk_mib"] for s in samples),
              "disk_after_exit_mib": folder_mib(folder), "metrics": metrics, "samples": samples}
    result["rss_ok"] = result["rss_max_mib"] <= bound
    result["disk_ok"] = result["disk_max_mib"] <= args.cache_disk and result["disk_after_exit_mib"] <= args.cache_disk
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
