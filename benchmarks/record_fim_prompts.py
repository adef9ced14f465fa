"""Record the prompts llama-server's `/infill` builds (tests/fixtures/fim): each body sent
to llama.cpp's llama-server (built by scripts/build-llama-cpp.sh) with Qwen2.5-Coder
0.5B at a 4096-token context, one slot; kept are the body, the prompt text its answer
shows (special tokens spelled) and its `tokens_evaluated`. tests/test_fim_parse.py
builds the same prompts from the same GGUF and compares them.

    python -m benchmarks.record_fim_prompts"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

from harness.processes import http
from specli.bench.peers import binaries_dir
from specli.bench.servers import LlamaServer
from specli.registry import resolve

MODEL, CTX = "qwen2.5-coder-0.5b-instruct-q4_k_m", 4096
OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "fim" / "llama-server-infill-prompts.json"
CODE = "def area(w, h):\n    \"\"\"Rectangle area.\"\"\"\n    return w * h\n\n\n"


def cases() -> list[tuple[str, dict[str, Any]]]:
    long_prefix = CODE * 150  # about 2,500 tokens: cut from its start to 1,536
    long_suffix = "\n" + CODE * 60  # about 1,000 tokens: cut from its end to what a quarter batch leaves
    chunk = {"filename": "geometry/shapes.py", "text": CODE * 20}
    return [
        ("plain", {"input_prefix": "def f(x):\n    ", "input_suffix": "\n\nprint(f(2))\n"}),
        ("empty", {"input_prefix": "", "input_suffix": ""}),
        ("unicode", {"input_prefix": "# café → 東京\nname = \"", "input_suffix": "\"\nprint(name)  # 🚀\n"}),
        ("prompt field", {"input_prefix": "def g():\n", "input_suffix": "\n", "prompt": "    return <|fim_pad|>"}),
        ("extra chunks", {"input_prefix": "from util import g\n\n", "input_suffix": "\n",
                          "input_extra": [{"filename": "util.py", "text": "def g(y):\n    return y\n"},
                                          {"text": "X = 1\n"}]}),
        ("long prefix and suffix", {"input_prefix": long_prefix, "input_suffix": long_suffix}),
        ("extras past the context", {"input_prefix": "x = ", "input_suffix": "\n", "n_predict": 64,
                                     "input_extra": [chunk, dict(chunk, filename="b.py"), dict(chunk, filename="c.py")]}),
    ]


def main() -> int:
    srv = LlamaServer(binaries_dir(importlib.metadata.version("llama_cpp_python")), "none", resolve(MODEL), None, 2,
                      CTX, slots=1)
    recorded = []
    try:
        srv.wait_ready()
        for name, body in cases():
            # one token: the prompt is what is recorded; n_predict only matters to the extras' share
            sent = {**body, "n_predict": 1, "temperature": 0} if "n_predict" not in body else {**body, "temperature": 0}
            status, _, raw = http("POST", srv.base + "/infill", sent, timeout=600)
            answer = json.loads(raw)
            if status != 200:
                raise RuntimeError(f"{name}: HTTP {status}: {raw[:300]!r}")
            recorded.append({"name": name, "body": sent, "prompt": answer["prompt"],
                             "tokens_evaluated": answer["tokens_evaluated"]})
            print(f"{name}: {answer['tokens_evaluated']} tokens")
    finally:
        srv.stop()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"llama_cpp_python": importlib.metadata.version("llama_cpp_python"), "model": MODEL,
                               "n_ctx": CTX, "cases": recorded}, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
