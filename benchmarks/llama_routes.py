"""`/tokenize`, `/detokenize`, `/apply-template` and `/props` on `specli serve` against
llama.cpp's `llama-server` (built by scripts/build-llama-cpp.sh) with the same model:
the same inputs to both, every answer compared field by field. Inputs: plain and
special-token text, non-ASCII, the text of every recorded agent request
(tests/fixtures/agents), token lists, chat bodies with and without tools.

    python -m benchmarks.llama_routes [--model qwen2.5-coder-1.5b-instruct-q4_k_m]

Prints one line per comparison and a summary; exits 1 on any difference."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

from harness.processes import http
from specli.bench.peers import binaries_dir
from specli.bench.servers import LlamaServer, Server, SpecliServer
from specli.registry import resolve

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "agents"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def texts() -> list[str]:
    out = ["hello world", "<|im_start|>user\nhi<|im_end|>", "  leading spaces\tand\ttabs\n\n",
           "naïve café — 東京 🚀", "def f(x):\n    return x ** 2\n"]
    for f in sorted(FIXTURES.glob("*.json")):
        out.append(json.dumps(json.loads(f.read_text())["body"])[:20000])
    return out


def chats() -> list[dict[str, Any]]:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    return [
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again?"}]},
        {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]},
        {"messages": [{"role": "user", "content": "Weather in Paris?"},
                      {"role": "assistant", "content": "", "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], "tools": [WEATHER]},
    ]


def ask(server: Server, method: str, path: str, body: Any = None) -> Any:
    status, _, raw = http(method, server.base + path, body, timeout=600)
    return status, json.loads(raw)


def compare(a: Server, b: Server) -> list[tuple[str, bool, str]]:
    rows: list[tuple[str, bool, str]] = []

    def same(name: str, method: str, path: str, body: Any = None, pick: Any = None) -> Any:
        ra, rb = ask(a, method, path, body), ask(b, method, path, body)
        if pick is not None:
            ra, rb = (ra[0], pick(ra[1])), (rb[0], pick(rb[1]))
        ok = ra == rb
        rows.append((name, ok, "" if ok else f"specli {json.dumps(ra)[:200]} / llama-server {json.dumps(rb)[:200]}"))
        return ra[1]

    all_tokens: list[int] = []
    for i, text in enumerate(texts()):
        for flags in ({}, {"add_special": True}, {"parse_special": False}, {"with_pieces": True}):
            got = same(f"tokenize text {i} {flags or ''}", "POST", "/tokenize", {"content": text, **flags})
            if not flags:
                all_tokens = got["tokens"]
                same(f"detokenize text {i} ({len(all_tokens)} tokens)", "POST", "/detokenize", {"tokens": all_tokens})
    same("tokenize mixed strings and ids", "POST", "/tokenize", {"content": ["a", 151644, " b"], "add_special": True})
    for i, chat in enumerate(chats()):
        same(f"apply-template chat {i}", "POST", "/apply-template", chat)
    for key in ("chat_template", "bos_token", "eos_token", "modalities"):
        same(f"props {key}", "GET", "/props", pick=lambda d, k=key: d.get(k))
    same("props n_ctx", "GET", "/props", pick=lambda d: d["default_generation_settings"]["n_ctx"])
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--llama-version", default=importlib.metadata.version("llama_cpp_python"))
    args = p.parse_args()
    target = resolve(args.model)
    bin_dir = binaries_dir(args.llama_version)
    specli = SpecliServer(["--target", args.model, "--draft", "none", "--ctx", str(args.ctx), "--parallel", "1",
                           "--no-prompt-cache-disk"])
    llama = LlamaServer(bin_dir, "none", target, None, 2, args.ctx, slots=1)
    try:
        specli.wait_ready()
        llama.wait_ready()
        rows = compare(specli, llama)
    finally:
        specli.stop()
        llama.stop()
    for name, ok, why in rows:
        print(f"{'same' if ok else 'DIFF'}  {name}{'  ' + why if why else ''}")
    n_ok = sum(ok for _, ok, _ in rows)
    print(f"{n_ok} of {len(rows)} answers the same ({args.model}, llama-server of {bin_dir.parent.name})")
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
