"""`specli bench --clients N`: the bench's prompts replayed over HTTP, N at once, against
`specli serve --parallel N` and, for each `--peer llama.cpp:TYPE`, llama.cpp's
`llama-server` with N slots and that spec type (same model, threads and context, greedy).
Waves of N first turns are sent at once to each server in turn; the table gives each
server's wall time over all waves, tokens per second, and time to first token."""

from __future__ import annotations

import importlib.metadata
import json
import statistics
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from specli import profiles, registry
from specli.bench.command import write_output
from specli.bench.modes import parse_peer_spec
from specli.bench.peers import binaries_dir
from specli.bench.plan import BenchOptions, bench_prompts
from specli.bench.servers import LlamaServer, Messages, Server, SpecliServer, at_once
from specli.errors import UsageError
from specli.profiles import Settings
from specli.runtime.draft_choice import draft_path

PEER_PREFIX = "llama.cpp:"
SPEC_TYPE = {"ngram-simple": "ngram-simple", "ngram-mod": "ngram-mod", "draft": "draft-simple", "none": "none"}
SERVE_FLAGS = ("target", "draft", "drafter", "ctx", "threads", "draft_max", "n_gpu_layers", "draft_n_gpu_layers")


@dataclass
class ClientsRow:
    """One server over every wave."""

    name: str
    wall_s: float = 0.0
    tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0

    def add(self, r: dict[str, Any]) -> None:
        self.wall_s += r["wall"]
        self.tokens += r["completion_tokens"]
        self.ttft += r["ttft"]
        self.drafted += r["drafted"]
        self.accepted += r["accepted"]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "wall_s": round(self.wall_s, 3), "tokens": self.tokens,
                "tokens_per_second": round(self.tokens / self.wall_s, 2) if self.wall_s else 0.0,
                "ttft_max_s": round(max(self.ttft, default=0.0), 3),
                "ttft_median_s": round(statistics.median(self.ttft), 3) if self.ttft else 0.0,
                "drafted": self.drafted, "accepted": self.accepted}


def spec_types(peers: list[str]) -> list[str]:
    """llama-server spec types of `--peer llama.cpp:TYPE` (llama.cpp:none for plain slots)."""
    out: list[str] = []
    for p in peers:
        if not p.startswith(PEER_PREFIX):
            raise UsageError(f"--clients runs llama.cpp's llama-server as its peer, not {p!r}",
                             "use --peer llama.cpp:none, llama.cpp:ngram-simple, llama.cpp:ngram-mod or llama.cpp:draft")
        kind = p[len(PEER_PREFIX):]
        out.append("none" if kind == "none" else SPEC_TYPE[parse_peer_spec(kind)[0]])
    return out


def serve_args(opts: BenchOptions, s: Settings, n: int) -> list[str]:
    """`specli serve` flags for the bench's profile and settings, N slots."""
    args = [*(["--profile", opts.profile] if opts.profile else []), "--parallel", str(n), "--queue", str(n),
            "--no-prompt-cache-disk"]
    for key in SERVE_FLAGS:
        value = opts.base_overrides().get(key)
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def clients_command(opts: BenchOptions, n: int, console: Console) -> int:
    """Run the replay; print the table (and write --json). Returns the exit code."""
    if n < 1:
        raise UsageError(f"--clients must be at least 1, got {n}")
    s = profiles.resolve_settings(opts.profile, opts.base_overrides())
    _, prompts = bench_prompts(opts)
    requests: list[Messages] = [[{"role": "user", "content": p.turns[0]}] for p in prompts]
    max_tokens = opts.max_tokens or s.max_tokens
    types = spec_types(list(opts.peer) if isinstance(opts.peer, list) else [opts.peer] if opts.peer else [])
    servers: dict[str, Server] = {}
    try:
        servers[f"specli serve --parallel {n}"] = SpecliServer(serve_args(opts, s, n))
        if types:
            bin_dir = binaries_dir(importlib.metadata.version("llama_cpp_python"))
            target, draft = registry.resolve(s.target), draft_path(s)
            for t in types:
                servers[f"llama-server -np {n} {t}"] = LlamaServer(bin_dir, t, target, draft, s.threads or 2, s.ctx,
                                                                    slots=n)
        for srv in servers.values():
            srv.wait_ready(900)
        rows = {name: ClientsRow(name) for name in servers}
        for start in range(0, len(requests), n):
            wave = requests[start:start + n]
            for name, srv in servers.items():
                rows[name].add(at_once(srv.base, wave, max_tokens, {"specli": {"history": False}}
                                       if name.startswith("specli") else None))
    finally:
        for srv in servers.values():
            srv.stop()
    console.print(table(list(rows.values()), n, len(requests), max_tokens))
    if opts.json_out:
        doc = json.dumps({"clients": n, "prompts": len(requests), "max_tokens": max_tokens,
                          "servers": [r.to_json() for r in rows.values()]}, indent=2) + "\n"
        write_output(opts.json_out, doc, "JSON")
    return 0


def table(rows: list[ClientsRow], n: int, n_prompts: int, max_tokens: int) -> Table:
    t = Table(title=f"{n_prompts} prompts, {n} at once, up to {max_tokens} tokens each", title_justify="left")
    for h in ("server", "wall s", "tok/s", "specli's lead", "TTFT median s", "TTFT max s", "accepted / drafted"):
        t.add_column(h)
    base = rows[0].wall_s
    for r in rows:
        j = r.to_json()
        t.add_row(r.name, f"{r.wall_s:.1f}", f"{j['tokens_per_second']:.1f}",
                  f"{r.wall_s / base:.2f}x" if base else "-", f"{j['ttft_median_s']:.2f}",
                  f"{j['ttft_max_s']:.2f}", f"{r.accepted} / {r.drafted}")
    return t
