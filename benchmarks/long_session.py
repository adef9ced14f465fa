"""Long-session measurement: does memory or speed drift over many turns / generations?

Loads a target + draft pair (both SmolLM2-135M by default) through specli.runtime, then
(a) drives a ChatSession for --turns short replies and (b) runs --generations calls of
specli.engine.run, recording RSS (VmRSS of this process), live Python objects and
tokens/s (wall clock, and per CPU second of this process, which a busy machine
disturbs less) every --every turns/generations. Prints a table and writes JSON to --out.
Not a test: it asserts nothing, it measures.

Usage: python -m benchmarks.long_session [--turns 200] [--generations 500] [--model NAME]
           [--max-tokens 16] [--ctx 8192] [--threads N] [--out long_session.json]

The JSON is rewritten after every row, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

from harness.processes import rss_mib

CHAT_LINES = [
    "Hi! How are you today?",
    "Name a fruit that is yellow.",
    "What is 2 + 2?",
    "Tell me a very short joke.",
    "What colour is the sky?",
    "Give me one word that rhymes with cat.",
    "What is the capital of France?",
    "Say something nice.",
    "Which is bigger, a mouse or an elephant?",
    "Count from one to five.",
    "What day comes after Monday?",
    "Name an animal that can fly.",
]

PROMPTS = [
    "Write a Python function that adds two numbers.",
    "Explain what a list is in one sentence.",
    "List three primary colours.",
    "What is the boiling point of water?",
    "Write a haiku about the sea.",
    "Translate 'good morning' into French.",
    "Give a synonym for 'happy'.",
    "What does CPU stand for?",
    "Describe a cat in five words.",
    "Why is the sky blue? Answer briefly.",
]


class Window:
    """Figures summed over one window of turns / generations."""

    def __init__(self) -> None:
        self.generated = 0
        self.seconds = 0.0
        self.decode_tokens = 0  # tokens after each reply's first one
        self.decode_seconds = 0.0  # time after each reply's first token (prefill excluded)
        self.prefilled = 0  # prompt tokens decoded (not found in the KV cache)
        self.reused = 0  # prompt tokens found in the KV cache
        self.drafted = 0
        self.accepted = 0
        self.errors = 0
        self.count = 0
        self.cpu0 = time.process_time()  # CPU seconds of this process: robust to a busy machine

    def add(self, c: Any, finish: str | None) -> None:
        self.count += 1
        self.generated += c.n_generated
        self.seconds += c.t_total
        if c.n_generated > 1 and c.t_first_token is not None:
            self.decode_tokens += c.n_generated - 1
            self.decode_seconds += c.t_total - c.t_first_token
        self.prefilled += c.n_prompt - c.n_prompt_reused
        self.reused += c.n_prompt_reused
        self.drafted += c.n_drafted
        self.accepted += c.n_accepted
        self.errors += finish in ("error", "interrupted")

    def row(self, kind: str, index: int, t0: float, **extra: Any) -> dict[str, Any]:
        return {
            "kind": kind,
            "n": index,
            "rss_mb": round(rss_mib(), 1),
            "py_objects": len(gc.get_objects()),
            "tokens": self.generated,
            "tok_s": round(self.generated / self.seconds, 2) if self.seconds > 0 else 0.0,
            "decode_tok_s": round(self.decode_tokens / self.decode_seconds, 2) if self.decode_seconds > 0 else 0.0,
            "s_per_item": round(self.seconds / self.count, 3) if self.count else 0.0,
            "tok_per_cpu_s": round(self.generated / cpu, 2) if (cpu := time.process_time() - self.cpu0) > 0 else 0.0,
            "prefill_tokens": self.prefilled,
            "reused_tokens": self.reused,
            "acceptance": round(self.accepted / self.drafted, 3) if self.drafted else None,
            "errors": self.errors,
            "wall_s": round(time.perf_counter() - t0, 1),
            **extra,
        }


def run_chat(rt: Any, turns: int, every: int, on_row: Any) -> list[dict[str, Any]]:
    from rich.console import Console

    from specli.cli.chat import ChatSession

    sink = io.StringIO()
    session = ChatSession(rt, Console(file=sink, width=120))
    rows: list[dict[str, Any]] = []
    w = Window()
    t0 = time.perf_counter()
    for i in range(1, turns + 1):
        turn = session.reply(f"{CHAT_LINES[i % len(CHAT_LINES)]} (turn {i})")
        w.add(turn.counters, turn.finish_reason)
        sink.seek(0)
        sink.truncate()  # measure the session, not the captured console output
        if i % every == 0 or i == turns:
            rows.append(w.row("chat", i, t0, turns_dropped=session.n_dropped, kv_tokens=rt.target.n_past))
            on_row(rows[-1])
            w = Window()
    return rows


def run_generations(rt: Any, generations: int, every: int, on_row: Any) -> list[dict[str, Any]]:
    from specli.engine import run

    config = rt.generation_config()
    prompts = [rt.prompt_tokens(p) for p in PROMPTS]
    rows: list[dict[str, Any]] = []
    w = Window()
    t0 = time.perf_counter()
    for i in range(1, generations + 1):
        res = run(rt.target, prompts[i % len(prompts)], config, rt.drafter())
        w.add(res.counters, res.finish_reason)
        if i % every == 0 or i == generations:
            rows.append(w.row("generate", i, t0))
            on_row(rows[-1])
            w = Window()
    return rows


def _fmt(row: dict[str, Any]) -> str:
    return (f"{row['kind']:>8} {row['n']:>5}  rss {row['rss_mb']:>7.1f} MiB  objects {row['py_objects']:>7}  "
            f"{row['tok_s']:>6.1f} tok/s  decode {row['decode_tok_s']:>6.1f} tok/s  "
            f"{row['tok_per_cpu_s']:>6.1f} tok/cpu-s  {row['s_per_item']:>6.2f} s each  prefill {row['prefill_tokens']:>6}  reused {row['reused_tokens']:>6}  "
            f"t={row['wall_s']:>6.0f}s" + (f"  dropped={row['turns_dropped']} kv={row['kv_tokens']}"
                                           if row["kind"] == "chat" else ""))


def _drift(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {}
    first, last = rows[0], rows[-1]
    return {"tok_s_first": first["tok_s"], "tok_s_last": last["tok_s"],
            "decode_tok_s_first": first["decode_tok_s"], "decode_tok_s_last": last["decode_tok_s"],
            "tok_per_cpu_s_first": first["tok_per_cpu_s"], "tok_per_cpu_s_last": last["tok_per_cpu_s"],
            "rss_first_mb": first["rss_mb"], "rss_last_mb": last["rss_mb"],
            "rss_growth_mb": round(last["rss_mb"] - first["rss_mb"], 1),
            "py_objects_growth": last["py_objects"] - first["py_objects"]}


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.long_session", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--generations", type=int, default=500)
    ap.add_argument("--model", default="smollm2-135m-instruct-q4_1", help="target and draft model")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=8192,
                    help="context window (default: SmolLM2's 8192, which holds all 200 short turns); "
                         "with --ctx 1024 the chat is full after ~30 turns and drops its oldest turns")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: llama.cpp's choice)")
    ap.add_argument("--every", type=int, default=50, help="record a row every N turns / generations")
    ap.add_argument("--out", type=Path, default=Path("long_session.json"))
    return ap.parse_args()


def _print_summary(report: dict[str, Any], out: Path) -> None:
    figures = report["figures"]
    print()
    print(f"{'':>8} {'n':>5}  {'RSS MiB':>8}  {'tok/s':>7}  {'decode':>7}")
    for key in ("rss_start_mb", "rss_models_loaded_mb"):
        print(f"{key:>22}: {figures[key]:.1f} MiB")
    for row in report["chat"] + report["generations"]:
        print(f"{row['kind']:>8} {row['n']:>5}  {row['rss_mb']:>8.1f}  {row['tok_s']:>7.1f}  {row['decode_tok_s']:>7.1f}")
    print(f"{'rss_before_close_mb':>22}: {figures['rss_before_close_mb']:.1f} MiB")
    print(f"{'rss_end_mb':>22}: {figures['rss_end_mb']:.1f} MiB (models freed)")
    print(f"chat drift: {report['chat_drift']}")
    print(f"generation drift: {report['generation_drift']}")
    print(f"wrote {out}")


def main() -> int:
    args = _args()
    figures: dict[str, Any] = {"rss_start_mb": round(rss_mib(), 1)}
    from specli import profiles
    from specli.runtime import open_runtime

    overrides: dict[str, Any] = {
        "target": args.model, "draft": args.model, "drafter": "draft", "max_tokens": args.max_tokens,
        "ctx": args.ctx, "temperature": args.temperature, "seed": 1234, "threads": args.threads,
    }
    settings = profiles.resolve_settings(None, overrides)
    figures["rss_after_imports_mb"] = round(rss_mib(), 1)
    t_load = time.perf_counter()
    rt = open_runtime(settings)
    figures["load_s"] = round(time.perf_counter() - t_load, 2)
    figures["rss_models_loaded_mb"] = round(rss_mib(), 1)
    print(f"start {figures['rss_start_mb']} MiB, after imports {figures['rss_after_imports_mb']} MiB, "
          f"models loaded {figures['rss_models_loaded_mb']} MiB ({figures['load_s']} s)", flush=True)

    chat: list[dict[str, Any]] = []
    gens: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "settings": dict(overrides) | {"turns": args.turns, "generations": args.generations, "every": args.every},
        "python": sys.version.split()[0], "machine": platform.machine(),
        "figures": figures, "chat": chat, "generations": gens, "complete": False,
    }

    def save() -> None:  # after every row, so a long run that is stopped keeps its figures
        report["chat_drift"], report["generation_drift"] = _drift(chat), _drift(gens)
        args.out.write_text(json.dumps(report, indent=2) + "\n")

    def on_row(row: dict[str, Any]) -> None:
        (chat if row["kind"] == "chat" else gens).append(row)
        print(_fmt(row), flush=True)
        save()

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)  # keep (and save) the figures measured so far
    try:
        if args.turns > 0:
            run_chat(rt, args.turns, args.every, on_row)
        figures["rss_after_chat_mb"] = round(rss_mib(), 1)
        if args.generations > 0:
            run_generations(rt, args.generations, args.every, on_row)
        figures["rss_before_close_mb"] = round(rss_mib(), 1)
    finally:
        rt.close()
        figures["rss_end_mb"] = round(rss_mib(), 1)
        save()
    report["complete"] = True
    save()
    _print_summary(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
