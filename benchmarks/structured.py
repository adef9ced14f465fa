"""JSON-schema output over HTTP: `specli serve` (auto with and without the grammar's
forced tokens, plain decoding with and without the schema) against llama.cpp's
`llama-server` with the same schema in `response_format` and each speculative type;
same model, threads and context, greedy, one run, requests interleaved (request i goes
to every system and mode in turn, so the machine's drift hits all alike).

    python -m benchmarks.structured --profile default --json structured.json --markdown structured.md

The schema is a coding agent's tool call with nested objects (a file, a list of edits,
each with a line, an action and text), 128-256 tokens an answer. Every answer is checked
against the schema (bounds included) by a small validator here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.serve import LlamaServer, result, stream_chat
from harness.processes import ServeProcess
from specli import profiles, registry
from specli.bench.peers import binaries_dir

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": ["edit_file", "create_file"]},
        "arguments": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 60},
                "edits": {"type": "array", "minItems": 2, "maxItems": 4, "items": {
                    "type": "object",
                    "properties": {
                        "line": {"type": "integer", "minimum": 1, "maximum": 9999},
                        "action": {"type": "string", "enum": ["insert", "replace", "delete"]},
                        "old_text": {"type": "string", "maxLength": 80},
                        "new_text": {"type": "string", "maxLength": 80},
                    },
                    "required": ["line", "action", "old_text", "new_text"], "additionalProperties": False}},
                "reason": {"type": "string", "maxLength": 120},
            },
            "required": ["path", "edits", "reason"], "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"], "additionalProperties": False,
}
SYSTEM = ("You are a coding agent. Answer with one tool call as a JSON object: "
          '{"name": "edit_file", "arguments": {"path": ..., "edits": [{"line": ..., "action": ..., '
          '"old_text": ..., "new_text": ...}, ...], "reason": ...}}.')
TASKS = [
    "In src/inventory.py, rename the variable qty to quantity on lines 12 and 30.",
    "In app/server.py, the port on line 8 should be 8080 instead of 80, and the host on line 9 should be 0.0.0.0.",
    "Fix the off-by-one in utils/ranges.py: line 21 uses range(1, n) but must use range(n), and line 22 uses i - 1.",
    "In tests/test_math.py, replace assertEquals with assertEqual on lines 14, 19 and 27.",
    "In README.md, line 3 says 'Pyhton' and line 40 says 'recieve'; fix both typos.",
    "In config/settings.yaml, set debug to false on line 2 and log_level to warning on line 5.",
]
FORMAT = {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": SCHEMA}}
# (name, request additions) for specli; llama-server gets FORMAT with each spec type
SPECLI_MODES = {
    "specli auto + grammar": {"response_format": FORMAT},
    "specli auto, no forced": {"response_format": FORMAT, "specli": {"grammar_drafts": False}},
    "specli plain + schema": {"response_format": FORMAT, "specli": {"drafter": "none"}},
    "specli plain, no schema": {"specli": {"drafter": "none"}},
}


def valid(value: Any, schema: dict[str, Any]) -> bool:
    """The part of JSON Schema SCHEMA uses."""
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema["type"]
    if kind == "object":
        return (isinstance(value, dict) and set(schema["required"]) <= set(value) <= set(schema["properties"])
                and all(valid(value[k], schema["properties"][k]) for k in value))
    if kind == "array":
        return (isinstance(value, list) and schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", 10**9)
                and all(valid(v, schema["items"]) for v in value))
    if kind == "string":
        return isinstance(value, str) and len(value) <= schema.get("maxLength", 10**9)
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)
                and schema.get("minimum", -10**18) <= value <= schema.get("maximum", 10**18))
    return False


def parses(text: str) -> bool:
    try:
        return valid(json.loads(text), SCHEMA)
    except ValueError:
        return False


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    s = profiles.resolve_settings(args.profile)
    target, draft = registry.resolve(s.target), registry.resolve(s.draft) if s.draft else None
    systems: dict[str, Any] = {}
    history = tempfile.mkdtemp(prefix="specli-bench-structured-history-")
    rows: list[dict[str, Any]] = []
    specli = ServeProcess(["--profile", args.profile, "--threads", str(args.threads), "--ctx", str(args.ctx),
                           "--queue", "1", "--no-history"], env={"SPECLI_HISTORY_DIR": history})
    try:
        for t in [t for t in args.spec_types.split(",") if t]:
            systems[f"llama-server {t}"] = LlamaServer(binaries_dir(args.llama_version), t, target, draft,
                                                       args.threads, args.ctx)
        specli.wait_ready(900)
        for srv in systems.values():
            srv.wait_ready()
        runs = [(name, specli, extra) for name, extra in SPECLI_MODES.items()]
        runs += [(name, srv, {"response_format": FORMAT}) for name, srv in systems.items()]
        for rep in range(args.repeat):
            for i, task in enumerate(TASKS[: args.tasks]):
                messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
                for name, srv, extra in runs:
                    r = result(name, "structured", i, stream_chat(srv.base, messages, args.max_tokens, {}, extra))
                    ok = parses(r.text) if "response_format" in extra else None
                    rows.append({**asdict(r), "rep": rep, "valid": ok})
                    print(f"{rep} {i} {name:26} {r.completion_tokens:4d} tok {r.wall_s:6.2f} s decode "
                          f"{r.decode_tps:6.1f} tok/s acc {r.accepted}/{r.drafted} valid {ok}", file=sys.stderr,
                          flush=True)
        return rows
    finally:
        specli.stop()
        for srv in systems.values():
            srv.stop()


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per system: decode tok/s (median, and pooled: tokens / decode seconds), decode
    seconds (first to last streamed token: the answers' lengths differ, llama-server's
    JSON has whitespace), wall, validity; each one's ratios to specli auto + grammar."""
    out = []
    for name in dict.fromkeys(r["system"] for r in rows):
        rs = [r for r in rows if r["system"] == name]
        n_tok = sum(r["completion_tokens"] - 1 for r in rs)
        decode_s = sum((r["completion_tokens"] - 1) / r["decode_tps"] for r in rs if r["decode_tps"] > 0)
        checked = [r["valid"] for r in rs if r["valid"] is not None]
        out.append({"system": name, "requests": len(rs), "tokens": sum(r["completion_tokens"] for r in rs),
                    "decode_tps_median": statistics.median(r["decode_tps"] for r in rs),
                    "decode_tps_pooled": n_tok / decode_s if decode_s else 0.0,
                    "decode_s": decode_s, "wall_s": sum(r["wall_s"] for r in rs),
                    "drafted": sum(r["drafted"] for r in rs), "accepted": sum(r["accepted"] for r in rs),
                    "valid": f"{sum(checked)}/{len(checked)}" if checked else "-"})
    ours = next(o for o in out if o["system"] == "specli auto + grammar")
    for o in out:
        o["specli_faster_by"] = ours["decode_tps_pooled"] / o["decode_tps_pooled"] if o["decode_tps_pooled"] else 0.0
        o["specli_sooner_by"] = o["decode_s"] / ours["decode_s"] if ours["decode_s"] else 0.0
    return out


def markdown(table: list[dict[str, Any]], title: str) -> str:
    lines = [f"### {title}", "", "| system | answers valid | tokens | decode tok/s (pooled) | median | decode s | "
             "wall s | drafted / accepted | auto + grammar: tok/s ratio | decode time ratio |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for o in table:
        lines.append(f"| {o['system']} | {o['valid']} | {o['tokens']} | {o['decode_tps_pooled']:.1f} | "
                     f"{o['decode_tps_median']:.1f} | {o['decode_s']:.1f} | {o['wall_s']:.1f} | "
                     f"{o['drafted']} / {o['accepted']} | {o['specli_faster_by']:.2f}x | {o['specli_sooner_by']:.2f}x |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.structured", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="default")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--tasks", type=int, default=len(TASKS))
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--spec-types", default="none,ngram-simple,ngram-mod,draft-simple")
    p.add_argument("--llama-version", default="0.3.36")
    p.add_argument("--json", dest="json_out")
    p.add_argument("--markdown")
    args = p.parse_args()
    rows = run(args)
    table = summary(rows)
    md = markdown(table, f"JSON-schema tool calls over HTTP, profile {args.profile}, {args.threads} threads, "
                         f"{args.tasks} tasks x {args.repeat}, greedy")
    print(md)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"summary": table, "requests": rows}, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
