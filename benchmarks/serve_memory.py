"""Memory of a `specli serve` process over 200 requests: its RSS after 0, 50, 100 and 200
requests (flat = nothing leaks per request). The requests mix streamed and whole
answers, varied prompts (so the KV cache is rolled back and refilled), streams the
client drops after a few chunks, and bad requests.

    python -m benchmarks.serve_memory                    # SmolLM2-135M, 200 requests
    python -m benchmarks.serve_memory --target qwen2.5-coder-1.5b-instruct-q4_k_m --draft qwen2.5-coder-0.5b-instruct-q4_k_m
"""

from __future__ import annotations

import argparse
import json
import tempfile
from http.client import HTTPConnection

from harness.processes import ServeProcess, http

TOPICS = ["rivers", "prime numbers", "bicycles", "volcanoes", "tea", "the moon", "sorting", "owls"]


def one(srv: ServeProcess, i: int, max_tokens: int) -> None:
    topic = TOPICS[i % len(TOPICS)]
    body = {"messages": [{"role": "user", "content": f"Tell me something about {topic} (#{i})."}],
            "max_tokens": max_tokens, "temperature": 0}
    url = srv.base + "/v1/chat/completions"
    kind = i % 5
    if kind == 3:  # a stream the client drops after the response starts
        conn = HTTPConnection("127.0.0.1", srv.port, timeout=120)
        conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.readline()
        conn.close()
        return
    if kind == 4:  # a bad request
        assert http("POST", url, {"messages": "nope"})[0] == 400
        return
    status, _, data = http("POST", url, {**body, "stream": kind == 1}, timeout=300)
    assert status == 200, data[:200]


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serve_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="smollm2-135m-instruct-q4_1")
    p.add_argument("--draft", default="none")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--max-tokens", type=int, default=32)
    args = p.parse_args()
    history = tempfile.mkdtemp(prefix="specli-serve-memory-")
    srv = ServeProcess(["--target", args.target, "--draft", args.draft, "--ctx", "2048"],
                       env={"SPECLI_HISTORY_DIR": history})
    try:
        srv.wait_ready()
        marks = {0: srv.rss_mib()}
        for i in range(1, args.requests + 1):
            one(srv, i, args.max_tokens)
            if i in (50, 100, 150, 200) or i == args.requests:
                marks[i] = srv.rss_mib()
                print(f"after {i:4d} requests: RSS {marks[i]:7.1f} MiB, threads {srv.threads()}", flush=True)
    finally:
        srv.stop()
    print(f"after    0 requests: RSS {marks[0]:7.1f} MiB")
    start = min((k for k in marks if k >= 50), default=0)  # after the first 50: warm caches and pools
    growth = marks[max(marks)] - marks[start]
    print(f"growth from request {start} to {max(marks)}: {growth:+.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
