"""N clients at once against `specli serve` (its slots, and one slot: the server as it was)
and llama.cpp's `llama-server` with its defaults (4 slots, each --spec-type), same model,
threads and context, greedy, one run:

    python -m benchmarks.clients --profile default --clients 4 --json clients.json --markdown clients.md

Half the clients ask fresh coding questions (held-out Spec-Bench ones), half ask for an edit
of a file (harness.serve_workloads). Every system gets the same N requests at once,
systems in turn, `--reps` times; the client streams each request and times it: the wall
until the last answer, each request's time to first token and total time. Then each
request is sent alone to each specli server, and every answer given at once is compared
with it: a divergence is reported with the target's logit gap there (decoded one token
at a time in this process), beside the noise a slot's rows can show (`harness.slots.slot_noise`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import serve_workloads as wl
from harness.processes import ServeProcess
from harness.slots import divergence_gap, slot_noise
from specli import profiles, registry
from specli.backend import LoadOptions, Model
from specli.bench.peers import binaries_dir
from specli.bench.servers import LlamaServer, at_once, stream_chat

ROOT = Path(__file__).resolve().parent.parent
FRESH_OFFSET = 8  # coding questions after the ones benchmarks.serve uses: held out


def requests(n: int, bench: Path) -> list[list[dict[str, str]]]:
    """n requests: fresh questions and edits alternating (half each)."""
    fresh = wl.fresh_questions(FRESH_OFFSET + n, bench)[FRESH_OFFSET:]
    edits = [wl.edit_prompt(wl.FILE, e) for e in wl.EDITS[1:]]
    return [fresh[i // 2] if i % 2 == 0 else edits[i // 2 % len(edits)] for i in range(n)]


def divergences(profile: str, reqs: list[list[dict[str, str]]], alone: list[list[int]],
                together: list[list[int]]) -> tuple[list[dict], float]:
    """Each answer given at once that differs from the one given alone: where, and the
    target's logit gap between the two tokens there; and the noise bound of a slot."""
    from specli.runtime import prompting

    s = profiles.resolve_settings(profile)
    model = Model(registry.resolve(s.target), LoadOptions(n_ctx=4096, n_seq=2))
    found: list[dict] = []
    try:
        for i, (a, b) in enumerate(zip(alone, together, strict=True)):
            msgs = reqs[i]
            system = msgs[0]["content"] if msgs[0]["role"] == "system" else s.system
            rest = [m for m in msgs if m["role"] != "system"]
            prompt = prompting.prompt_tokens(model, rest[-1]["content"], rest[:-1], system=system)
            d = divergence_gap(model, prompt, a, b)
            if d is not None:
                found.append({"request": i, "position": d[0], "gap": round(d[1], 4)})
        noise = slot_noise(model)
    finally:
        model.close()
    return found, noise


def run(args: argparse.Namespace) -> dict[str, Any]:
    s = profiles.resolve_settings(args.profile)
    target, draft = registry.resolve(s.target), registry.resolve(s.draft) if s.draft else None
    reqs = requests(args.clients, Path(args.bench))
    history = tempfile.mkdtemp(prefix="specli-bench-clients-history-")
    common = ["--profile", args.profile, "--threads", str(args.threads), "--ctx", str(args.ctx),
              "--queue", str(args.clients), "--no-prompt-cache-disk"]
    systems: dict[str, Any] = {}
    try:
        systems[f"specli {args.clients} slots"] = ServeProcess([*common, "--parallel", str(args.clients)],
                                                               env={"SPECLI_HISTORY_DIR": history})
        if args.serial:
            systems["specli 1 slot"] = ServeProcess([*common, "--parallel", "1"], env={"SPECLI_HISTORY_DIR": history})
        for t in [t for t in args.spec_types.split(",") if t]:
            systems[f"llama-server {t}"] = LlamaServer(binaries_dir(args.llama_version), t, target, draft,
                                                       args.threads, args.ctx, slots=None)
        for srv in systems.values():
            srv.wait_ready(900)
        extra = {"specli": {"history": False, "return_tokens": True}}
        runs: dict[str, list[dict]] = {name: [] for name in systems}
        for rep in range(args.reps):
            for name, srv in systems.items():
                r = at_once(srv.base, reqs, args.max_tokens, extra if name.startswith("specli") else None)
                runs[name].append(r)
                print(f"rep {rep} {name:26} wall {r['wall']:6.1f} s ttft max {max(r['ttft']):5.1f} s "
                      f"acc {r['accepted']}/{r['drafted']}", file=sys.stderr, flush=True)
        alone: dict[str, list[dict]] = {}
        for name, srv in systems.items():
            if name.startswith("specli"):
                alone[name] = [stream_chat(srv.base, q, args.max_tokens, {}, extra) for q in reqs]
    finally:
        for srv in systems.values():
            srv.stop()
    diverged: dict[str, list[dict]] = {}
    noise = 0.0
    for name, answers in alone.items():
        solo = [a["specli"]["tokens"] for a in answers]
        found: list[dict] = []
        for r in runs[name]:
            more, noise = divergences(args.profile, reqs, solo, r["tokens"])
            found += more
        diverged[name] = found
    return {"runs": runs, "diverged": diverged, "noise": noise, "clients": args.clients,
            "max_tokens": args.max_tokens, "profile": args.profile}


def markdown(out: dict[str, Any]) -> str:
    runs = out["runs"]
    best_peer = min((statistics.median(r["wall"] for r in v), k) for k, v in runs.items()
                    if k.startswith("llama-server"))
    lines = [f"{out['clients']} clients at once, {out['max_tokens']} tokens each, profile {out['profile']} "
             f"(median of {len(next(iter(runs.values())))} runs; each run all systems in turn)", "",
             "| system | wall until the last answer (s) | vs best llama-server | longest TTFT (s) | "
             "TTFT per request (s) | total per request (s) | accepted / drafted |", "|---|---|---|---|---|---|---|"]
    for name, rs in runs.items():
        wall = statistics.median(r["wall"] for r in rs)
        mid = sorted(rs, key=lambda r: r["wall"])[len(rs) // 2]
        lines.append(f"| {name} | {wall:.1f} | {best_peer[0] / wall:.2f}x | {max(mid['ttft']):.1f} | "
                     f"{' / '.join(f'{t:.1f}' for t in mid['ttft'])} | {' / '.join(f'{t:.1f}' for t in mid['total'])} | "
                     f"{sum(r['accepted'] for r in rs)} / {sum(r['drafted'] for r in rs)} |")
    lines += ["", f"a slot's noise (largest logit difference against one-token rows: batches of 2-24, "
                  f"scattered cache cells): {out['noise']:.3f}; near-tie bound {2 * out['noise']:.3f}"]
    for name, found in out["diverged"].items():
        gaps = ", ".join(f"request {d['request']} at {d['position']}: gap {d['gap']:.3f}" for d in found)
        lines.append(f"- {name}: {len(found)} answers differ from the same request sent alone" + (f" ({gaps})" if gaps else ""))
    return "\n".join(lines) + "\n"


def main() -> int:
    os.environ.setdefault("SPECLI_LOG", "error")
    p = argparse.ArgumentParser(prog="python -m benchmarks.clients", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="default", help="specli profile (its target and draft are llama-server's too)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--serial", action=argparse.BooleanOptionalAction, default=True,
                   help="also specli with one slot (the server as it was)")
    p.add_argument("--spec-types", default="none,ngram-simple,ngram-mod,draft-simple",
                   help="llama-server --spec-type values; none = plain")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--bench", default=str(ROOT.parent / "shared" / "bench" / "spec_bench_question.jsonl"))
    p.add_argument("--llama-version", default=importlib.metadata.version("llama_cpp_python"))
    p.add_argument("--json", help="write every run and the divergences")
    p.add_argument("--markdown", help="write the table")
    args = p.parse_args()
    out = run(args)
    text = markdown(out)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
