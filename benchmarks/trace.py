"""Replay an agent trace over HTTP against `specli serve` and llama.cpp's `llama-server`
(its defaults: 4 slots, unified KV, an 8 GiB prompt cache), same model, threads and
context, greedy, one run:

    python -m benchmarks.trace benchmarks/traces/agent.jsonl --profile default --json trace.json
    python -m benchmarks.trace my-agent.jsonl --spec-types ngram-mod,draft-simple --markdown trace.md

A trace is JSONL, one request per line:

    {"id": "main-2", "body": {"messages": [...], "max_tokens": 400}}
    {"id": "title-2", "body": {...}, "together": true}

`body` is an OpenAI chat request (sent streamed, at temperature 0). A string
`{{answer:ID}}` anywhere in its messages' contents becomes the text that system answered
to request ID, so each system carries its own answers. A line with `"together": true` is
sent at the same moment as the line before it. Request i goes to each system in turn
(the machine's drift hits all alike); lines sent together go together to one system,
then to the next.

Per request: wall time, prompt tokens, tokens taken from a cache (usage's cached_tokens,
else timings.cache_n), tokens prefilled, decode tok/s and acceptance (timings); per
trace: the sum of wall times (requests sent together count once, by the later end).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.processes import ServeProcess
from specli import profiles, registry
from specli.bench.peers import binaries_dir
from specli.bench.servers import LlamaServer, stream_chat

ANSWER = re.compile(r"\{\{answer:([^}]+)\}\}")


@dataclass(frozen=True)
class TraceRequest:
    id: str
    body: dict[str, Any]
    together: bool = False  # sent at once with the request before it


def read_trace(path: Path) -> list[TraceRequest]:
    out: list[TraceRequest] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        if not isinstance(obj.get("id"), str) or not isinstance(obj.get("body"), dict):
            raise ValueError(f"{path}:{n}: a trace line needs a string id and an object body")
        out.append(TraceRequest(obj["id"], obj["body"], bool(obj.get("together", False))))
    return out


def fill(body: dict[str, Any], answers: dict[str, str]) -> dict[str, Any]:
    """The body with every {{answer:ID}} replaced by this system's answer to ID."""
    def one(m: dict[str, Any]) -> dict[str, Any]:
        content = m.get("content")
        if isinstance(content, str):
            m = {**m, "content": ANSWER.sub(lambda g: answers[g.group(1)], content)}
        return m

    return {**body, "messages": [one(m) for m in body.get("messages", [])]}


@dataclass
class Row:
    system: str
    id: str
    wall_s: float
    t_start: float
    t_end: float
    prompt_tokens: int
    cached_tokens: int
    prefilled_tokens: int
    completion_tokens: int
    decode_tps: float
    drafted: int
    accepted: int
    text: str
    ttft_s: float = 0.0
    drafter_steps: dict[str, int] | None = None  # specli's: target forwards by drafter

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


def send(system: str, base: str, req: TraceRequest, answers: dict[str, str]) -> Row:
    body = fill(req.body, answers)
    extra = {k: v for k, v in body.items() if k not in ("messages", "max_tokens")}
    r = stream_chat(base, body["messages"], int(body.get("max_tokens", 256)), {}, extra)
    usage, timings = r["usage"], r["timings"]
    prompt = int(usage.get("prompt_tokens", 0))
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", timings.get("cache_n", 0)) or 0)
    n = int(usage.get("completion_tokens", 0))
    decode = r["last"] - r["first"]
    return Row(system, req.id, r["wall"], r["t0"], r["t0"] + r["wall"], prompt, cached,
               int(timings.get("prompt_n", prompt - cached)), n, (n - 1) / decode if n > 1 and decode > 0 else 0.0,
               int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0)), r["text"], r["first"] - r["t0"],
               (r.get("specli") or {}).get("drafter_steps"))


def groups(trace: list[TraceRequest]) -> list[list[TraceRequest]]:
    out: list[list[TraceRequest]] = []
    for req in trace:
        if req.together and out:
            out[-1].append(req)
        else:
            out.append([req])
    return out


def replay_group(system: str, base: str, group: list[TraceRequest], answers: dict[str, str]) -> list[Row]:
    """The group's requests sent at once, each on its own thread."""
    rows: list[Row | BaseException | None] = [None] * len(group)

    def one(i: int) -> None:
        try:
            rows[i] = send(system, base, group[i], answers)
        except BaseException as e:  # noqa: BLE001 - raised below, on the caller's thread
            rows[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(group))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in rows:
        if isinstance(r, BaseException):
            raise r
    done = [r for r in rows if isinstance(r, Row)]
    for req, r in zip(group, done):
        answers[req.id] = r.text
    return done


def trace_wall(rows: list[Row], trace: list[TraceRequest]) -> float:
    """Sum over groups of (last end - first start)."""
    by_id = {r.id: r for r in rows}
    return sum(max(by_id[q.id].t_end for q in g) - min(by_id[q.id].t_start for q in g) for g in groups(trace))


def run(args: argparse.Namespace) -> dict[str, list[Row]]:
    s = profiles.resolve_settings(args.profile)
    target, draft = registry.resolve(s.target), registry.resolve(s.draft) if s.draft else None
    trace = read_trace(Path(args.trace))
    systems: dict[str, Any] = {}
    history = tempfile.mkdtemp(prefix="specli-bench-trace-history-")
    cache = tempfile.mkdtemp(prefix="specli-bench-trace-cache-")
    try:
        systems["specli"] = ServeProcess(["--profile", args.profile, "--threads", str(args.threads), "--ctx",
                                          str(args.ctx), *args.specli_args.split()],
                                         env={"SPECLI_HISTORY_DIR": history, "SPECLI_PROMPT_CACHE_DIR": cache})
        for t in [t for t in args.spec_types.split(",") if t]:
            systems[f"llama-server {t}"] = LlamaServer(binaries_dir(args.llama_version), t, target, draft,
                                                       args.threads, args.ctx, slots=None)
        systems["specli"].wait_ready(900)
        for srv in systems.values():
            srv.wait_ready()
        print(f"servers ready: {', '.join(systems)}", file=sys.stderr)
        rows: dict[str, list[Row]] = {name: [] for name in systems}
        answers: dict[str, dict[str, str]] = {name: {} for name in systems}
        for group in groups(trace):
            for name, srv in systems.items():
                for r in replay_group(name, srv.base, group, answers[name]):
                    rows[name].append(r)
                    print(f"{r.id:10} {name:26} prompt {r.prompt_tokens:5d} cached {r.cached_tokens:5d} "
                          f"prefilled {r.prefilled_tokens:5d} gen {r.completion_tokens:4d} {r.wall_s:7.2f} s "
                          f"decode {r.decode_tps:6.1f} tok/s acc {r.accepted}/{r.drafted}", file=sys.stderr, flush=True)
        return rows
    finally:
        for srv in systems.values():
            srv.stop()
        if args.json_out and "specli" in systems:  # its per-request lines: drafters used, cache
            Path(args.json_out).with_suffix(".specli.log").write_text(systems["specli"].log)


def summary(rows: dict[str, list[Row]], trace: list[TraceRequest]) -> list[dict[str, Any]]:
    out = []
    for name, rs in rows.items():
        out.append({"system": name, "wall_s": round(trace_wall(rs, trace), 2),
                    "prompt_tokens": sum(r.prompt_tokens for r in rs), "cached_tokens": sum(r.cached_tokens for r in rs),
                    "prefilled_tokens": sum(r.prefilled_tokens for r in rs),
                    "completion_tokens": sum(r.completion_tokens for r in rs)})
    walls = {name: trace_wall(rs, trace) for name, rs in rows.items()}
    best_peer = min((w for name, w in walls.items() if name != "specli"), default=0.0)
    for o in out:
        wall = walls[str(o["system"])]
        o["vs_best_llama_server"] = round(best_peer / wall, 3) if wall and best_peer else None
    return out


def markdown(rows: dict[str, list[Row]], table: list[dict[str, Any]]) -> str:
    lines = ["| system | trace wall s | prompt tokens | from a cache | prefilled | generated | best llama-server / it |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {o['system']} | {o['wall_s']:.1f} | {o['prompt_tokens']} | {o['cached_tokens']} | "
              f"{o['prefilled_tokens']} | {o['completion_tokens']} | {o['vs_best_llama_server']} |" for o in table]
    lines += ["", "| request | system | wall s | prompt | cached | prefilled | generated | decode tok/s | acceptance |",
              "|---|---|---|---|---|---|---|---|---|"]
    ids = [r.id for r in next(iter(rows.values()))]
    for i in ids:
        for name, rs in rows.items():
            r = next(x for x in rs if x.id == i)
            lines.append(f"| {i} | {name} | {r.wall_s:.1f} | {r.prompt_tokens} | {r.cached_tokens} | "
                         f"{r.prefilled_tokens} | {r.completion_tokens} | {r.decode_tps:.1f} | {r.acceptance:.0%} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="the trace, JSONL (format above)")
    p.add_argument("--profile", default="default")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--spec-types", default="ngram-mod", help="llama-server's, comma-separated (none: no speculation)")
    p.add_argument("--specli-args", default="", help="more `specli serve` options, space-separated")
    p.add_argument("--llama-version", default=importlib.metadata.version("llama_cpp_python"))
    p.add_argument("--json", dest="json_out")
    p.add_argument("--markdown")
    args = p.parse_args()
    rows = run(args)
    table = summary(rows, read_trace(Path(args.trace)))
    for o in table:
        print(json.dumps(o))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"summary": table, "requests": {
            k: [asdict(r) for r in v] for k, v in rows.items()}}, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows, table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
