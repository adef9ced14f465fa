#!/usr/bin/env python
"""Long-session measurement: does memory or speed drift over many turns / generations?

Loads a target + draft pair (both SmolLM2-135M by default) through specli.runtime, then
(a) drives a ChatSession for --turns short replies and (b) runs --generations calls of
specli.engine.run, recording RSS (VmRSS of this process), live Python objects and
tokens/s every --every turns/generations. Prints a table and writes JSON to --out.
Not a test: it asserts nothing, it measures.

Usage: scripts/long_session.py [--turns 200] [--generations 500] [--model NAME]
                               [--max-tokens 16] [--ctx 2048] [--out long_session.json]
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any


def rss_mb() -> float:
    """Resident set size of this process in MiB (VmRSS from /proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


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


def _window_row(kind: str, index: int, t0: float, generated: int, seconds: float, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": kind,
        "n": index,
        "rss_mb": round(rss_mb(), 1),
        "py_objects": len(gc.get_objects()),
        "tokens": generated,
        "tok_s": round(generated / seconds, 2) if seconds > 0 else 0.0,
        "wall_s": round(time.perf_counter() - t0, 1),
        **extra,
    }


def run_chat(rt: Any, turns: int, every: int, profile: str | None, overrides: dict[str, Any]) -> list[dict[str, Any]]:
    from rich.console import Console

    from specli.chat import ChatSession

    sink = io.StringIO()
    session = ChatSession(rt, Console(file=sink, width=120), profile=profile, overrides=dict(overrides))
    rows: list[dict[str, Any]] = []
    gen, secs, finishes = 0, 0.0, 0
    t0 = time.perf_counter()
    for i in range(1, turns + 1):
        turn = session.reply(f"{CHAT_LINES[i % len(CHAT_LINES)]} (turn {i})")
        gen += turn.counters.n_generated
        secs += turn.counters.t_total
        finishes += turn.finish_reason in ("error", "interrupted")
        sink.seek(0)
        sink.truncate()  # measure the session, not the captured console output
        if i % every == 0 or i == turns:
            rows.append(_window_row("chat", i, t0, gen, secs, {
                "errors": finishes, "turns_dropped": session.n_dropped, "kv_tokens": rt.target.n_past,
            }))
            print(_fmt(rows[-1]), flush=True)
            gen, secs, finishes = 0, 0.0, 0
    return rows


def run_generations(rt: Any, generations: int, every: int) -> list[dict[str, Any]]:
    from specli.engine import run

    config = rt.generation_config()
    prompts = [rt.prompt_tokens(p) for p in PROMPTS]
    rows: list[dict[str, Any]] = []
    gen, secs, drafted, accepted = 0, 0.0, 0, 0
    t0 = time.perf_counter()
    for i in range(1, generations + 1):
        res = run(rt.target, prompts[i % len(prompts)], config, rt.drafter())
        c = res.counters
        gen += c.n_generated
        secs += c.t_total
        drafted += c.n_drafted
        accepted += c.n_accepted
        if i % every == 0 or i == generations:
            rows.append(_window_row("generate", i, t0, gen, secs, {
                "acceptance": round(accepted / drafted, 3) if drafted else None,
            }))
            print(_fmt(rows[-1]), flush=True)
            gen, secs, drafted, accepted = 0, 0.0, 0, 0
    return rows


def _fmt(row: dict[str, Any]) -> str:
    extra = "  ".join(f"{k}={v}" for k, v in row.items()
                      if k not in ("kind", "n", "rss_mb", "py_objects", "tok_s", "tokens", "wall_s"))
    return (f"{row['kind']:>8} {row['n']:>5}  rss {row['rss_mb']:>7.1f} MiB  objects {row['py_objects']:>8}  "
            f"{row['tok_s']:>7.1f} tok/s  ({row['tokens']} tok)  t={row['wall_s']:>6.1f}s  {extra}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--generations", type=int, default=500)
    ap.add_argument("--model", default="smollm2-135m-instruct-q4_1", help="target and draft model")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--every", type=int, default=50, help="record a row every N turns / generations")
    ap.add_argument("--out", type=Path, default=Path("long_session.json"))
    args = ap.parse_args()

    figures: dict[str, Any] = {"rss_start_mb": round(rss_mb(), 1)}
    from specli import profiles
    from specli.runtime import open_runtime

    overrides: dict[str, Any] = {
        "target": args.model, "draft": args.model, "drafter": "draft", "max_tokens": args.max_tokens,
        "ctx": args.ctx, "temperature": args.temperature, "seed": 1234, "threads": args.threads,
    }
    settings = profiles.resolve_settings(None, overrides)
    figures["rss_after_imports_mb"] = round(rss_mb(), 1)
    t_load = time.perf_counter()
    rt = open_runtime(settings)
    figures["load_s"] = round(time.perf_counter() - t_load, 2)
    figures["rss_models_loaded_mb"] = round(rss_mb(), 1)
    print(f"start {figures['rss_start_mb']} MiB, after imports {figures['rss_after_imports_mb']} MiB, "
          f"models loaded {figures['rss_models_loaded_mb']} MiB ({figures['load_s']} s)", flush=True)
    try:
        chat = run_chat(rt, args.turns, args.every, None, overrides) if args.turns > 0 else []
        figures["rss_after_chat_mb"] = round(rss_mb(), 1)
        gens = run_generations(rt, args.generations, args.every) if args.generations > 0 else []
    finally:
        rt.close()
    figures["rss_end_mb"] = round(rss_mb(), 1)

    def drift(rows: list[dict[str, Any]]) -> dict[str, Any]:
        if not rows:
            return {}
        return {"tok_s_first": rows[0]["tok_s"], "tok_s_last": rows[-1]["tok_s"],
                "rss_first_mb": rows[0]["rss_mb"], "rss_last_mb": rows[-1]["rss_mb"],
                "rss_growth_mb": round(rows[-1]["rss_mb"] - rows[0]["rss_mb"], 1)}

    report = {
        "settings": {k: v for k, v in overrides.items()} | {"turns": args.turns, "generations": args.generations,
                                                             "every": args.every},
        "python": sys.version.split()[0], "machine": platform.machine(),
        "figures": figures, "chat": chat, "generations": gens,
        "chat_drift": drift(chat), "generation_drift": drift(gens),
    }
    print()
    print(f"{'':>8} {'n':>5}  {'RSS MiB':>8}  {'tok/s':>7}")
    for key in ("rss_start_mb", "rss_models_loaded_mb"):
        print(f"{key:>22}: {figures[key]:.1f} MiB")
    for row in chat + gens:
        print(f"{row['kind']:>8} {row['n']:>5}  {row['rss_mb']:>8.1f}  {row['tok_s']:>7.1f}")
    print(f"{'rss_end_mb':>22}: {figures['rss_end_mb']:.1f} MiB")
    print(f"chat drift: {report['chat_drift']}")
    print(f"generation drift: {report['generation_drift']}")
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
