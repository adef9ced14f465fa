"""Replay workloads over HTTP against `specli serve` and llama.cpp's `llama-server` (built
by scripts/build-llama-cpp.sh from the source the pinned llama-cpp-python vendors), same
model, threads and context, greedy, one run:

    python -m benchmarks.serve --profile default --json serve.json --markdown serve.md
    python -m benchmarks.serve --profile f16 --spec-types ngram-simple,ngram-mod,ngram-cache,draft-simple

Every server runs at once (idle but one: the models' pages are shared through mmap) and the
requests are interleaved, request i going to each system in turn, so that the machine's
drift hits all alike. Each system carries its own previous answer into its next edit
request. The same client streams every request and times it: wall time (request sent ->
last byte), time to first token, decode tok/s ((tokens - 1) / (last - first content
chunk)); acceptance and tokens per forward come from the servers' `timings` (draft_n,
draft_n_accepted; one forward emits the accepted tokens and one of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness import serve_workloads as wl
from harness.processes import ServeProcess
from specli import profiles, registry
from specli.bench.peers import binaries_dir
from specli.bench.servers import LlamaServer, stream_chat

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPEC_TYPES = "ngram-simple,ngram-mod,ngram-cache,draft-simple"


@dataclass
class Result:
    system: str
    workload: str
    index: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    wall_s: float
    ttft_s: float
    decode_tps: float
    drafted: int
    accepted: int
    finish_reason: str
    text: str

    @property
    def tokens_per_forward(self) -> float:
        forwards = self.completion_tokens - 1 - self.accepted  # after the first token
        return (self.completion_tokens - 1) / forwards if forwards > 0 else 0.0


def result(system: str, workload: str, i: int, r: dict) -> Result:
    n = int(r["usage"].get("completion_tokens", 0))
    details = r["usage"].get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens", r["timings"].get("cache_n", 0)) or 0)
    decode = r["last"] - r["first"]
    return Result(system, workload, i, int(r["usage"].get("prompt_tokens", 0)), cached, n, r["wall"],
                  r["first"] - r["t0"], (n - 1) / decode if n > 1 and decode > 0 else 0.0,
                  int(r["timings"].get("draft_n", 0)), int(r["timings"].get("draft_n_accepted", 0)),
                  r["finish"], r["text"])


def run(args: argparse.Namespace) -> list[Result]:
    s = profiles.resolve_settings(args.profile)
    target, draft = registry.resolve(s.target), registry.resolve(s.draft) if s.draft else None
    bin_dir = binaries_dir(args.llama_version)
    systems: dict[str, object] = {}
    history = tempfile.mkdtemp(prefix="specli-bench-serve-history-")
    try:
        specli = ServeProcess(["--profile", args.profile, "--threads", str(args.threads), "--ctx", str(args.ctx),
                               "--queue", "1"], env={"SPECLI_HISTORY_DIR": history})
        systems["specli"] = specli
        for t in [t for t in args.spec_types.split(",") if t]:
            systems[f"llama-server {t}"] = LlamaServer(bin_dir, t, target, draft, args.threads, args.ctx)
        specli.wait_ready(900)
        for srv in systems.values():
            srv.wait_ready()  # type: ignore[attr-defined]
        print(f"servers ready: {', '.join(systems)}", file=sys.stderr)
        results: list[Result] = []
        current = dict.fromkeys(systems, wl.FILE)
        answers: dict[str, list[str]] = {name: [] for name in systems}
        edits = wl.EDITS + wl.MORE_EDITS
        for w in args.workloads.split(","):
            requests = edits[: args.edits] if w == "edit" else wl.fresh_questions(args.fresh, Path(args.bench))
            for i, req in enumerate(requests):
                for name, srv in systems.items():
                    messages: list[dict[str, str]]
                    if w == "fresh":
                        messages = req  # type: ignore[assignment]
                    elif args.edit_format == "chat":
                        messages = wl.edit_chat(answers[name], edits[: i + 1])
                    else:
                        messages = wl.edit_prompt(current[name], req)  # type: ignore[arg-type]
                    max_tokens = args.edit_max_tokens if w == "edit" else args.fresh_max_tokens
                    r = result(name, w, i, stream_chat(srv.base, messages, max_tokens, {}))  # type: ignore[attr-defined]
                    if w == "edit":
                        current[name] = wl.file_from_answer(r.text, current[name])
                        answers[name].append(r.text)
                    results.append(r)
                    print(f"{w} {i} {name:28} {r.completion_tokens:5d} tok {r.wall_s:7.2f} s "
                          f"decode {r.decode_tps:6.1f} tok/s acc {r.accepted}/{r.drafted} "
                          f"tpf {r.tokens_per_forward:.2f} cached {r.cached_tokens}/{r.prompt_tokens}",
                          file=sys.stderr, flush=True)
        return results
    finally:
        for srv in systems.values():
            srv.stop()  # type: ignore[attr-defined]
        if args.json and "specli" in systems:  # its per-request lines: drafters used, cache
            Path(args.json).with_suffix(".specli.log").write_text(systems["specli"].log)  # type: ignore[attr-defined]


def summary(results: list[Result]) -> list[dict]:
    """Per workload and system: session wall time, decode tok/s (tokens / decode time,
    pooled), tokens per forward, acceptance; the session's ratio to specli's."""
    rows: list[dict[str, Any]] = []
    for w in dict.fromkeys(r.workload for r in results):
        by_sys: dict[str, list[Result]] = {}
        for r in results:
            if r.workload == w:
                by_sys.setdefault(r.system, []).append(r)
        for name, rs in by_sys.items():
            n = sum(r.completion_tokens for r in rs)
            decode_s = sum((r.completion_tokens - 1) / r.decode_tps for r in rs if r.decode_tps > 0)
            drafted, accepted = sum(r.drafted for r in rs), sum(r.accepted for r in rs)
            forwards = sum(r.completion_tokens - 1 - r.accepted for r in rs)
            rows.append({"workload": w, "system": name, "requests": len(rs), "tokens": n,
                         "wall_s": sum(r.wall_s for r in rs), "decode_tps": (n - len(rs)) / decode_s if decode_s else 0,
                         "ttft_s_median": statistics.median(r.ttft_s for r in rs),
                         "tokens_per_forward": (n - len(rs)) / forwards if forwards > 0 else 0.0,
                         "acceptance": accepted / drafted if drafted else 0.0,
                         "same_text_as_specli": sum(r.text == o.text for r, o in zip(rs, by_sys["specli"]))})
        specli_wall = next(row["wall_s"] for row in rows if row["workload"] == w and row["system"] == "specli")
        for row in rows:
            if row["workload"] == w:
                row["specli_speedup"] = row["wall_s"] / specli_wall
    return rows


def markdown(rows: list[dict], results: list[Result], title: str) -> str:
    out = [f"### {title}", "", "| workload | system | session wall s | specli faster by | decode tok/s | "
           "tokens/forward | acceptance | median TTFT s | same text as specli |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['workload']} | {r['system']} | {r['wall_s']:.1f} | {r['specli_speedup']:.2f}x | "
                   f"{r['decode_tps']:.1f} | {r['tokens_per_forward']:.2f} | {r['acceptance']:.2f} | "
                   f"{r['ttft_s_median']:.2f} | {r['same_text_as_specli']}/{r['requests']} |")
    out += ["", "Per request (wall s / decode tok/s / tokens per forward):", "",
            "| workload | # | " + " | ".join(dict.fromkeys(r.system for r in results)) + " |",
            "|---|---:|" + "---|" * len(dict.fromkeys(r.system for r in results))]
    keys = dict.fromkeys((r.workload, r.index) for r in results)
    for w, i in keys:
        cells = [f"{r.wall_s:.1f} / {r.decode_tps:.1f} / {r.tokens_per_forward:.2f}"
                 for r in results if r.workload == w and r.index == i]
        out.append(f"| {w} | {i} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    import importlib.metadata

    p = argparse.ArgumentParser(prog="python -m benchmarks.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="default", help="specli profile (its target and draft are llama-server's too)")
    p.add_argument("--workloads", default="edit,fresh")
    p.add_argument("--spec-types", default=DEFAULT_SPEC_TYPES, help="llama-server --spec-type values; none = plain")
    p.add_argument("--edits", type=int, default=len(wl.EDITS),
                   help=f"edit requests (up to {len(wl.EDITS) + len(wl.MORE_EDITS)})")
    p.add_argument("--edit-format", choices=("whole", "chat"), default="chat",
                   help="carry the previous answer as the file (whole) or as the conversation (chat)")
    p.add_argument("--fresh", type=int, default=4)
    p.add_argument("--edit-max-tokens", type=int, default=1536)
    p.add_argument("--fresh-max-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--bench", default=str(ROOT.parent / "shared" / "bench" / "spec_bench_question.jsonl"))
    p.add_argument("--llama-version", default=importlib.metadata.version("llama_cpp_python"))
    p.add_argument("--json", help="write every request and the summary")
    p.add_argument("--markdown", help="write the tables")
    args = p.parse_args()
    results = run(args)
    rows = summary(results)
    md = markdown(rows, results, f"specli serve vs llama-server, profile {args.profile}, {args.threads} threads, "
                                 f"edit format {args.edit_format}")
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "summary": rows,
                                               "requests": [asdict(r) for r in results]}, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
