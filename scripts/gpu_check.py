"""What specli's steps cost on this machine's accelerator, with random-weight models of real
shapes (#21): writes gpu-check.json and gpu-check.md.

For each model (Qwen2.5-0.5B / 1.5B / 7B shapes, F16 and Q4_K_M): the plain step t1 and
the batch-cost curve (a batch of n tokens in plain steps); specli's plain decoding
(decode tok/s, host ms per forward, with the argmax in llama.cpp's graph and without);
llama.cpp's own plain decoding on the same file (`llama-bench`, when given); and the
decode speedup each recorded mode would reach here: the steps it took with real weights
on the development machine (docs/gpu-check/steps.json: forwards per drafter and draft
length) priced with this machine's batch costs and host work.

    python scripts/gpu_check.py --out docs/gpu-check --gpu-layers 99 --llama-bench build/bin/llama-bench
    python scripts/gpu_check.py --small --out /tmp/gpu-check     # tiny shapes, CPU (CI)

scripts/gpu-check.sh builds llama.cpp and llama-cpp-python's library with CUDA first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("SPECLI_HISTORY_DIR", tempfile.mkdtemp(prefix="specli-gpu-check-"))

from specli.backend import LoadOptions, Model  # noqa: E402
from specli.drafters.auto.costs import interpolate  # noqa: E402
from specli.engine import (  # noqa: E402
    GenerationConfig,
    metrics,  # noqa: E402
    run,
)
from specli.gguf.writer import GGML_F16, GGML_F32, Tensor, write_gguf  # noqa: E402
from specli.types import SamplingParams  # noqa: E402

STEPS_FILE = Path(__file__).resolve().parent.parent / "docs" / "gpu-check" / "steps.json"
SIZES = (1, 2, 4, 8, 16, 33, 65)
Q4_K_M = 15  # llama_ftype LLAMA_FTYPE_MOSTLY_Q4_K_M


@dataclass(frozen=True)
class Shape:
    name: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    tied: bool  # the output layer is the token embedding


SHAPES = {
    "0.5b": Shape("Qwen2.5-0.5B", 151936, 896, 24, 14, 2, 4864, True),
    "1.5b": Shape("Qwen2.5-1.5B", 151936, 1536, 28, 12, 2, 8960, True),
    "7b": Shape("Qwen2.5-7B", 152064, 3584, 28, 28, 4, 18944, False),
    "tiny": Shape("tiny", 2048, 64, 2, 4, 2, 128, True),
    "tiny-draft": Shape("tiny-draft", 2048, 32, 1, 2, 1, 64, True),
}


def synthetic_vocab(n_vocab: int) -> tuple[list[str], list[int]]:
    """GPT-2 style byte-level tokens, fillers, and Qwen's three control tokens last; the
    end-of-text token is the very last (its output row is zeroed: never the argmax)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    tokens = [chr(c) for c in cs]
    tokens += [f"tok{i}" for i in range(n_vocab - len(tokens) - 3)]
    tokens += ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    types = [1] * (n_vocab - 3) + [3, 3, 3]
    return tokens, types


def make_model(path: Path, shape: Shape, seed: int = 0) -> Path:
    """A random-weight qwen2 GGUF (F16 matrices, F32 norms and biases) of `shape`."""
    rng = np.random.default_rng(seed)
    pool = (rng.standard_normal(1 << 20) * 0.02).astype(np.float32)
    ones = np.ones(1, np.float32)
    hd = shape.n_embd // shape.n_head
    kv = shape.n_head_kv * hd
    e, ff = shape.n_embd, shape.n_ff

    def mat(name: str, cols: int, rows: int, zero_tail: int = 0) -> Tensor:
        return Tensor(name, (cols, rows), GGML_F16, pool, zero_tail)

    def vec(name: str, n: int, values: np.ndarray = pool) -> Tensor:
        return Tensor(name, (n,), GGML_F32, values)

    tensors = [mat("token_embd.weight", e, shape.n_vocab, zero_tail=e), vec("output_norm.weight", e, ones)]
    if not shape.tied:
        tensors.append(mat("output.weight", e, shape.n_vocab, zero_tail=e))
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        tensors += [
            vec(b + "attn_norm.weight", e, ones),
            mat(b + "attn_q.weight", e, e), vec(b + "attn_q.bias", e),
            mat(b + "attn_k.weight", e, kv), vec(b + "attn_k.bias", kv),
            mat(b + "attn_v.weight", e, kv), vec(b + "attn_v.bias", kv),
            mat(b + "attn_output.weight", e, e),
            vec(b + "ffn_norm.weight", e, ones),
            mat(b + "ffn_gate.weight", e, ff), mat(b + "ffn_up.weight", e, ff), mat(b + "ffn_down.weight", ff, e),
        ]
    tokens, types = synthetic_vocab(shape.n_vocab)
    a = "qwen2"
    meta: dict[str, Any] = {
        "general.architecture": a, "general.name": f"{shape.name} (random weights)", "general.file_type": 1,
        f"{a}.context_length": 32768, f"{a}.embedding_length": e, f"{a}.block_count": shape.n_layer,
        f"{a}.feed_forward_length": ff, f"{a}.attention.head_count": shape.n_head,
        f"{a}.attention.head_count_kv": shape.n_head_kv, f"{a}.rope.freq_base": 1000000.0,
        f"{a}.attention.layer_norm_rms_epsilon": 1e-6,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": ["t o"],
        "tokenizer.ggml.eos_token_id": shape.n_vocab - 1, "tokenizer.ggml.bos_token_id": shape.n_vocab - 1,
        "tokenizer.ggml.add_bos_token": False,
    }
    write_gguf(path, meta, tensors)
    return path


def quantize(src: Path, dst: Path, threads: int) -> Path:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = Q4_K_M
    params.nthread = threads
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise RuntimeError(f"quantizing {src} failed")
    return dst


def batch_costs(m: Model, context: list[int], reps: int) -> tuple[float, dict[int, float]]:
    """(t1 in seconds, batch of n tokens in plain steps) at `context` cached tokens, every
    row asked as a verification asks them; medians of `reps` alternating rounds."""
    m.reset()
    m.decode(context)
    n0 = m.n_past
    seconds: dict[int, list[float]] = {n: [] for n in SIZES}
    for _ in range(reps):
        for n in SIZES:
            batch = [(7 * i + 11) % (m.n_vocab - 3) for i in range(n)]
            t0 = time.perf_counter()
            m.decode(batch, range(n))
            seconds[n].append(time.perf_counter() - t0)
            m.rollback(n0)
    t1 = statistics.median(seconds[1])
    return t1, {n: statistics.median(s) / t1 for n, s in seconds.items()}


def plain_decoding(m: Model, prompt: list[int], n_tokens: int) -> dict[str, float]:
    m.reset()
    config = GenerationConfig(max_tokens=n_tokens, sampling=SamplingParams(temperature=0.0), draft_max=0)
    run(m, prompt, config)  # warm-up
    m.reset()
    c = run(m, prompt, config).counters
    host = metrics.host_ms_per_forward(c)
    return {"decode_tok_s": metrics.decode_tokens_per_second(c), "host_ms": host["total"],
            "llama_ms": host["llama"], "tokens": c.n_generated}


def llama_bench(binary: str, path: Path, n_tokens: int, gpu_layers: int, threads: int) -> float | None:
    """llama.cpp's own plain decoding (`llama-bench -p 0 -n N`), tokens per second."""
    cmd = [binary, "-m", str(path), "-p", "0", "-n", str(n_tokens), "-r", "3", "-ngl", str(gpu_layers),
           "-t", str(threads), "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return None
    rows = json.loads(out.stdout)
    return float(rows[0]["avg_ts"]) if rows else None


def price(steps: dict[str, Any], ratios: dict[int, float], host_ms: float, t1: float, draft_step: float) -> float | None:
    """Decode speedup over plain decoding of a recorded mode with these costs: its
    forwards per (drafter, k) at the batch cost of k + 1 tokens, draft-model tokens at
    `draft_step`, and the host work it recorded per forward beyond plain decoding's."""
    sizes = sorted(ratios)
    values = [ratios[n] for n in sizes]
    seconds = 0.0
    for drafter, by_k in steps["steps_by_k"].items():
        for k, count in enumerate(by_k):
            draft_seconds = k * draft_step if drafter == "draft" else 0.0
            seconds += count * (interpolate(sizes, values, k + 1) * t1 + draft_seconds)
    forwards = sum(sum(v) for v in steps["steps_by_k"].values())
    seconds += forwards * (host_ms + steps["extra_host_ms"]) / 1000
    plain = (t1 + host_ms / 1000) * steps["n_tokens"]
    return plain / seconds if seconds > 0 else None


def record(bench_json: Path, target_type: str) -> None:
    """Add the steps each mode of a `specli bench --json` run took to STEPS_FILE, under
    `target_type`: forwards per drafter and draft length, tokens, and host ms per forward
    beyond the baseline's."""
    records = [r for r in json.loads(bench_json.read_text())["records"] if r["kind"] in ("baseline", "drafter")]
    host: dict[str, list[float]] = {}
    modes: dict[str, dict[str, Any]] = {}
    for r in records:
        m = modes.setdefault(r["mode"], {"steps_by_k": {}, "n_tokens": 0, "extra_host_ms": 0.0})
        m["n_tokens"] += r["n_generated"] - 1
        metrics.add_steps_by_k(m["steps_by_k"], r["steps_by_k"])
        host.setdefault(r["mode"], []).append(r["host_ms_per_forward"]["total"])
    base = statistics.median(host.get("baseline", [0.0]))
    for mode, m in modes.items():
        m["extra_host_ms"] = max(0.0, statistics.median(host[mode]) - base)
        m["source"] = f"{bench_json.name}: {sum(1 for r in records if r['mode'] == mode)} generations"
    steps = json.loads(STEPS_FILE.read_text()) if STEPS_FILE.exists() else {}
    steps.setdefault(target_type, {}).update({f"{mode} ({bench_json.stem})": m for mode, m in modes.items()})
    STEPS_FILE.parent.mkdir(parents=True, exist_ok=True)
    STEPS_FILE.write_text(json.dumps(steps, indent=1) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--record", nargs=2, metavar=("BENCH_JSON", "TYPE"),
                   help="add a `specli bench --json` run's steps to docs/gpu-check/steps.json (TYPE: F16 or Q4_K_M)")
    p.add_argument("--out", type=Path)
    p.add_argument("--small", action="store_true", help="tiny shapes (this CPU, CI)")
    p.add_argument("--sizes", default=None, help="comma-separated shapes (default 1.5b,7b; --small: tiny)")
    p.add_argument("--gpu-layers", type=int, default=0)
    p.add_argument("--llama-bench", default=None, help="llama.cpp's llama-bench built from the same source")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--models", type=Path, default=None, help="where to write the models (default: a temp dir)")
    args = p.parse_args()
    if args.record:
        record(Path(args.record[0]), args.record[1])
        return 0
    if args.out is None:
        p.error("--out is needed")
    threads = os.cpu_count() or 2
    names = (args.sizes or ("tiny" if args.small else "1.5b,7b")).split(",")
    draft_name = "tiny-draft" if args.small else "0.5b"
    work = args.models or Path(tempfile.mkdtemp(prefix="gpu-check-models-"))
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    recorded = json.loads(STEPS_FILE.read_text()) if STEPS_FILE.exists() else {}
    opts = LoadOptions(n_gpu_layers=args.gpu_layers, n_ctx=4096, n_threads=None if args.gpu_layers else 2)
    t_start = time.perf_counter()
    draft_f16 = make_model(work / f"{draft_name}-f16.gguf", SHAPES[draft_name])
    with Model(draft_f16, opts) as d:
        draft_t1, _ = batch_costs(d, list(range(256)), args.reps)
    report: dict[str, Any] = {"machine": platform.node(), "gpu_layers": args.gpu_layers, "threads": threads,
                              "draft_shape": draft_name, "draft_t1_ms": draft_t1 * 1000, "models": []}
    for name in names:
        f16 = make_model(work / f"{name}-f16.gguf", SHAPES[name])
        for kind, path in (("F16", f16), ("Q4_K_M", quantize(f16, work / f"{name}-q4_k_m.gguf", threads))):
            entry: dict[str, Any] = {"shape": name, "type": kind, "size_gib": path.stat().st_size / 2**30}
            prompt = [(13 * i + 5) % (SHAPES[name].n_vocab - 3) for i in range(64)]
            for argmax in ("off", "on"):
                os.environ["SPECLI_DEVICE_ARGMAX"] = argmax
                with Model(path, opts) as m:
                    if argmax == "off":
                        t1, ratios = batch_costs(m, list(range(256)), args.reps)
                        entry |= {"t1_ms": t1 * 1000, "batch_ratio": {str(n): r for n, r in ratios.items()}}
                    entry[f"specli_plain_argmax_{argmax}"] = plain_decoding(m, prompt, args.tokens)
            os.environ.pop("SPECLI_DEVICE_ARGMAX")
            if args.llama_bench:
                entry["llama_cpp_plain_tok_s"] = llama_bench(args.llama_bench, path, args.tokens, args.gpu_layers, threads)
            host = entry["specli_plain_argmax_off"]["host_ms"]
            entry["priced_speedup"] = {
                mode: price(steps, {int(n): r for n, r in entry["batch_ratio"].items()}, host, t1, draft_t1)
                for mode, steps in recorded.get(kind, {}).items()
            }
            report["models"].append(entry)
            print(f"{name} {kind}: t1 {entry['t1_ms']:.2f} ms, plain {entry['specli_plain_argmax_off']['decode_tok_s']:.1f} "
                  f"tok/s, host {host:.3f} ms/forward", flush=True)
    report["seconds"] = time.perf_counter() - t_start
    (args.out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "gpu-check.md").write_text(markdown(report))
    print(f"wrote {args.out / 'gpu-check.json'} and gpu-check.md in {report['seconds']:.0f} s")
    return 0


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# GPU check: {r['machine']}, {r['gpu_layers']} layers offloaded", "",
             f"Draft shape {r['draft_shape']}: {r['draft_t1_ms']:.2f} ms a token.", "",
             "| model | t1 ms | batch of 2 / 4 / 8 / 16 / 33 / 65, plain steps | specli plain tok/s (argmax in graph) "
             "| host ms/forward (in graph) | llama.cpp plain tok/s | specli / llama.cpp |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for m in r["models"]:
        off, on = m["specli_plain_argmax_off"], m["specli_plain_argmax_on"]
        ratios = " / ".join(f"{m['batch_ratio'][str(n)]:.2f}" for n in SIZES[1:])
        peer = m.get("llama_cpp_plain_tok_s")
        peer_cells = f"{peer:.1f} | {off['decode_tok_s'] / peer:.3f}x" if peer else "- | -"
        lines.append(f"| {m['shape']} {m['type']} | {m['t1_ms']:.2f} | {ratios} | {off['decode_tok_s']:.1f} "
                     f"({on['decode_tok_s']:.1f}) | {off['host_ms']:.3f} ({on['host_ms']:.3f}) | {peer_cells} |")
    modes = sorted({k for m in r["models"] for k in m["priced_speedup"]})
    if modes:
        lines += ["", "Decode speedup each mode would reach here, priced from the steps it took with real weights "
                  "on the development machine:", "", "| model | " + " | ".join(modes) + " |",
                  "|---|" + "---:|" * len(modes)]
        for m in r["models"]:
            cells = [f"{m['priced_speedup'][k]:.2f}x" if m["priced_speedup"].get(k) else "-" for k in modes]
            lines.append(f"| {m['shape']} {m['type']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
