"""`specli bench --suite fim`: fill-in-the-middle holes (specli.bench.fim_tasks) sent as
an editor sends them (llama-server's `/infill`, greedy, `n_indent` the cursor line's)
to `specli serve`, speculating and plain, and to llama-server with each `--peer`
llama.cpp:TYPE, one server at a time. Per hole and system: the whole answer's time,
prefilled tokens, tokens per forward, whether the filled module still passes its tests,
and whether specli's answer equals its plain decoding's. Then a keystroke sequence:
one file, the cursor moving on a few characters per request, per system the median
time and the tokens prefilled per request."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from http.client import HTTPConnection
from typing import Any

from rich.console import Console
from rich.table import Table

from specli import profiles, registry
from specli.bench.clients import serve_args, spec_types
from specli.bench.command import write_output
from specli.bench.fim_tasks import Hole, fim_holes, passes
from specli.bench.peers import binaries_dir
from specli.bench.plan import BenchOptions
from specli.bench.servers import LlamaServer, Server, SpecliServer
from specli.runtime.draft_choice import draft_path

N_PREDICT = 128
KEYSTROKES, STRIDE = 16, 3  # requests in the typing sequence, characters the cursor moves between them


@dataclass
class Answer:
    system: str
    hole: str
    multiline: bool
    text: str
    wall_s: float
    prompt_n: int  # tokens prefilled
    cache_n: int  # tokens read from a cache
    predicted_n: int
    forwards: int | None  # target forwards (specli), None where the server does not say
    stop_type: str
    finish: str  # specli's own finish reason ("suffix": it wrote the suffix's first line)
    prompt_ms: float = 0.0  # the servers' own timings: prefill
    predicted_ms: float = 0.0  # and decode
    passed: bool = False


def infill(base: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    host, port = base.removeprefix("http://").split(":")
    conn = HTTPConnection(host, int(port), timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/infill", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    wall = time.perf_counter() - t0
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{base}/infill: HTTP {resp.status}: {raw[:300]!r}")
    out: dict[str, Any] = json.loads(raw)
    return out, wall


def ask(system: str, base: str, hole: Hole, extra: dict[str, Any] | None = None) -> Answer:
    body = {"input_prefix": hole.prefix, "input_suffix": hole.suffix, "n_predict": N_PREDICT, "temperature": 0,
            "top_k": 1, "n_indent": hole.n_indent, "cache_prompt": True, **(extra or {})}
    out, wall = infill(base, body)
    t = out.get("timings", {})
    figures = out.get("specli") or {}
    answer = Answer(system, hole.id, hole.multiline, out["content"], wall, t.get("prompt_n", 0), t.get("cache_n", 0),
                    t.get("predicted_n", out.get("tokens_predicted", 0)), figures.get("target_forwards"),
                    out.get("stop_type", ""), figures.get("finish_reason", out.get("stop_type", "")),
                    t.get("prompt_ms", 0.0), t.get("predicted_ms", 0.0))
    answer.passed = passes(hole.filled(answer.text), hole.tests)
    return answer


def keystrokes(system: str, base: str, extra: dict[str, Any] | None = None) -> list[Answer]:
    """The cursor moving on STRIDE characters a request through one function's body."""
    hole = next(h for h in fim_holes() if h.multiline)
    source = hole.prefix + hole.expected + hole.suffix
    at = len(hole.prefix)
    out = []
    for i in range(KEYSTROKES):
        cut = at + i * STRIDE
        step = Hole(f"typing/{i}", source[:cut], source[cut:], "", "", True, hole.n_indent)
        out.append(ask(system, base, step, extra))
    return out


def run_systems(opts: BenchOptions, console: Console) -> tuple[list[Answer], list[Answer]]:
    s = profiles.resolve_settings(opts.profile, opts.base_overrides())
    holes = fim_holes()
    peers = list(opts.peer) if isinstance(opts.peer, list) else [opts.peer] if opts.peer else []
    # a history store of its own: what earlier runs generated (the same holes) drafts nothing here
    history = tempfile.mkdtemp(prefix="specli-fim-history-")
    servers: list[tuple[str, Any]] = [("specli", lambda: SpecliServer(serve_args(opts, s, 1),
                                                                      env={"SPECLI_HISTORY_DIR": history}))]
    bin_dir = binaries_dir(importlib.metadata.version("llama_cpp_python"))
    target, draft = registry.resolve(s.target), draft_path(s)
    for t in spec_types(peers):
        servers.append((f"llama-server {t}", lambda t=t: LlamaServer(bin_dir, t, target, draft, s.threads or 2,
                                                                      s.ctx, slots=1)))
    answers: list[Answer] = []
    typing: list[Answer] = []
    for name, make in servers:  # one at a time: 2 cores
        srv: Server = make()
        try:
            srv.wait_ready(1800)
            modes = [(f"specli {s.drafter}", None), ("specli plain", {"specli": {"drafter": "none"}})] \
                if name == "specli" else [(name, None)]
            for system, extra in modes:
                for hole in holes:
                    a = ask(system, srv.base, hole, extra)
                    answers.append(a)
                    console.print(f"{system:24} {hole.id:28} {a.wall_s:6.2f} s prefill {a.prompt_n:4} "
                                  f"gen {a.predicted_n:3} pass={a.passed!s:5} stop {a.finish}", highlight=False)
                typing += keystrokes(system, srv.base, extra)
        finally:
            srv.stop()
    shutil.rmtree(history, ignore_errors=True)
    return answers, typing


def summary(answers: list[Answer], typing: list[Answer]) -> list[dict[str, Any]]:
    plain = {a.hole: a.text for a in answers if a.system == "specli plain"}
    rows = []
    for system in dict.fromkeys(a.system for a in answers):
        mine = [a for a in answers if a.system == system]
        single = [a.wall_s for a in mine if not a.multiline]
        multi = [a.wall_s for a in mine if a.multiline]
        forwards = [a for a in mine if a.forwards]
        typed = [a for a in typing if a.system == system]
        rows.append({
            "system": system, "holes": len(mine), "passed": sum(a.passed for a in mine),
            "median_s": statistics.median(a.wall_s for a in mine),
            "median_single_s": statistics.median(single) if single else None,
            "median_multi_s": statistics.median(multi) if multi else None,
            "tokens_per_forward": (sum(a.predicted_n for a in forwards) / sum(a.forwards or 0 for a in forwards))
            if forwards else None,
            "equal_to_specli_plain": sum(plain.get(a.hole) == a.text for a in mine) if plain else None,
            "suffix_stops": sum(a.finish == "suffix" for a in mine),
            "decode_s": sum(a.predicted_ms for a in mine) / 1000, "prefill_s": sum(a.prompt_ms for a in mine) / 1000,
            "typing_median_s": statistics.median(a.wall_s for a in typed) if typed else None,
            "typing_median_prefill": statistics.median(a.prompt_n for a in typed) if typed else None,
        })
    return rows


def table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="fill in the middle: whole-answer time per hole (median), tests passed")
    for col in ("system", "passed", "median s", "single s", "multi s", "tok/fwd", "= plain", "suffix stops",
                "typing s", "typing prefill"):
        t.add_column(col, justify="left" if col == "system" else "right")
    for r in rows:
        def f(v: float | None, fmt: str = "{:.2f}") -> str:
            return "-" if v is None else fmt.format(v)
        t.add_row(r["system"], f"{r['passed']}/{r['holes']}", f(r["median_s"]), f(r["median_single_s"]),
                  f(r["median_multi_s"]), f(r["tokens_per_forward"]),
                  "-" if r["equal_to_specli_plain"] is None else f"{r['equal_to_specli_plain']}/{r['holes']}",
                  str(r["suffix_stops"]), f(r["typing_median_s"]), f(r["typing_median_prefill"], "{:.0f}"))
    return t


def fim_command(opts: BenchOptions, console: Console) -> int:
    if not console.is_terminal:  # a file or pipe: the table's columns are not squeezed into 80
        console = Console(highlight=False, width=max(console.width, 160))
    answers, typing = run_systems(opts, console)
    rows = summary(answers, typing)
    console.print(table(rows))
    if opts.json_out:
        doc = json.dumps({"rows": rows, "answers": [asdict(a) for a in answers],
                          "typing": [asdict(a) for a in typing]}, indent=2) + "\n"
        write_output(opts.json_out, doc, "JSON")
    return 0
