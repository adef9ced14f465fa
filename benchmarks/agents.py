"""Real coding agents against `specli serve` and llama.cpp's `llama-server` with the same
target, on small repository tasks, both greedy (the agents send no temperature):

    python -m benchmarks.agents --clients claude,opencode --markdown agents.md

Installs pinned Claude Code, opencode and Codex from npm into the user cache folder, starts both
servers, and runs each client on each task through a pass-through proxy that reads what
the servers answered (harness.agent_proxy). Per client, server and task: done or not
(the task's own check of the files or the answer), wall time, requests, prompt tokens
prefilled and read from a cache, decode tok/s, the first answer's time. With --restart
each server is started again (specli's prompt cache on disk kept) and every task runs
once more. Connecting each agent by hand: docs/agents.md."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.agent_proxy import Proxy, summarize
from specli import profiles, registry
from specli.bench.peers import binaries_dir
from specli.bench.servers import LlamaServer, Server, SpecliServer

AGENTS = {"claude": ("@anthropic-ai/claude-code", "2.1.332", "claude"),
          "opencode": ("opencode-ai", "1.18.33", "opencode"),
          "codex": ("@openai/codex", "0.171.0", "codex")}
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "agents"
MODEL = "local-model"  # the name the agents send; both servers answer any name
TASK_TIMEOUT_S = 1200


def agents_dir() -> Path:
    """Where the agents and their scratch homes live: specli/agents in the user cache folder."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specli" / "agents"


@dataclass(frozen=True)
class Task:
    name: str
    prompt: str
    files: dict[str, str]
    check: Callable[[Path, str], bool]  # (work dir, the agent's printed answer) -> done
    small_model_can: bool  # within reach of the 1.5B default target, by its runs


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _add_fixed(work: Path, out: str) -> bool:
    r = subprocess.run([sys.executable, "-c", "from calc import add; assert add(2, 3) == 5"], cwd=work,
                       capture_output=True)
    return r.returncode == 0


CALC = "def add(a, b):\n    return a - b\n"
TASKS = [
    Task("new-file", "Create a file named hello.txt that contains exactly the text: Hello, world",
         {"README.md": "A scratch project.\n"},
         lambda w, out: _read(w / "hello.txt").strip() == "Hello, world", True),
    Task("read-answer", "What does the function add in calc.py return? Read the file, then answer in one sentence.",
         {"calc.py": CALC}, lambda w, out: "a - b" in out or "subtract" in out.lower() or "difference" in out.lower(),
         True),
    Task("fix-add", "Fix the bug in calc.py: add(a, b) must return the sum.", {"calc.py": CALC}, _add_fixed, False),
]


def install(name: str, version: str) -> Path:
    """The agent's program at `version`, installed once from npm under the user cache folder."""
    package, _, program = AGENTS[name]
    prefix = agents_dir() / f"{name}-{version}"
    exe = prefix / "node_modules" / ".bin" / program
    if not exe.exists():
        print(f"installing {package}@{version} from npm", file=sys.stderr)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), f"{package}@{version}"],
                       check=True, stdout=subprocess.DEVNULL)
    return exe


def agent_command(name: str, exe: Path, task: Task, base: str, home: Path, work: Path, ctx: int
                  ) -> tuple[list[str], dict[str, str]]:
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "TERM": "dumb", "LANG": "C.UTF-8"}
    if name == "claude":
        env |= {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_AUTH_TOKEN": "none", "ANTHROPIC_MODEL": MODEL,
                "ANTHROPIC_SMALL_FAST_MODEL": MODEL, "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096",
                "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(ctx), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_TELEMETRY": "1", "IS_SANDBOX": "1"}
        return [str(exe), "-p", task.prompt, "--dangerously-skip-permissions", "--max-turns", "12"], env
    if name == "codex":
        env |= {"CODEX_HOME": str(codex_home(exe, home, base, ctx)), "BENCH_API_KEY": "none"}
        return [str(exe), "exec", "--skip-git-repo-check", task.prompt], env
    config = {"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
              "provider": {"bench": {"npm": "@ai-sdk/openai-compatible", "name": "bench",
                                     "options": {"baseURL": base + "/v1", "apiKey": "none"},
                                     "models": {MODEL: {"name": MODEL}}}},
              "model": f"bench/{MODEL}", "permission": {"edit": "allow", "bash": "allow"}}
    (work / "opencode.json").write_text(json.dumps(config, indent=2))
    env |= {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1"}
    return [str(exe), "run", task.prompt, "-m", f"bench/{MODEL}"], env


def codex_home(exe: Path, home: Path, base: str, ctx: int) -> Path:
    """CODEX_HOME with a provider for `base` (Responses API) and a model catalog entry for
    MODEL whose apply_patch is the freeform (custom, Lark grammar) tool: without one Codex
    sends no apply_patch tool to an unknown model. The entry is Codex's own gpt-5.5 entry,
    read from its program, made local (docs/agents.md)."""
    codex = home / ".codex"
    codex.mkdir(parents=True, exist_ok=True)
    base_prompt = json.loads(next(FIXTURES.glob("codex-1-*.json")).read_text())["body"]["input"][0]
    entry = codex_entry(exe, MODEL, ctx, base_prompt["content"][0]["text"])
    (codex / "model-catalog.json").write_text(json.dumps({"models": [entry]}))
    (codex / "config.toml").write_text(f"""model = "{MODEL}"
model_provider = "bench"
model_catalog_json = "{codex / 'model-catalog.json'}"
approval_policy = "never"
sandbox_mode = "workspace-write"
check_for_update_on_startup = false

[model_providers.bench]
name = "bench"
base_url = "{base}/v1"
wire_api = "responses"
env_key = "BENCH_API_KEY"

[analytics]
enabled = false
""")
    return codex


def codex_entry(exe: Path, model: str, ctx: int, base_instructions: str) -> dict[str, Any]:
    """A catalog entry for `model`: Codex's own gpt-5.5 entry made local, its apply_patch
    the freeform tool (docs/agents.md; tests/fixtures/agents/README.md)."""
    entry = dict(codex_catalog(exe)["gpt-5.5"])
    entry.update(slug=model, display_name=model, prefer_websockets=False, support_verbosity=False,
                 default_verbosity=None, input_modalities=["text"], supports_image_detail_original=False,
                 context_window=ctx, max_context_window=ctx, default_reasoning_level=None,
                 supported_reasoning_levels=[], supports_reasoning_summaries=False,
                 supports_reasoning_summary_parameter=False, upgrade=None, available_in_plans=[], service_tiers=[],
                 additional_speed_tiers=[], supports_search_tool=False, include_apps_usage_instructions=False,
                 include_plugin_usage_instructions=False, shell_type="default", apply_patch_tool_type="freeform",
                 base_instructions=base_instructions)
    entry.pop("model_messages", None)
    return entry


def codex_catalog(exe: Path) -> dict[str, dict[str, Any]]:
    """Codex's built-in model catalog, the JSON document its program carries."""
    modules = exe.parent.parent  # node_modules: the program is in the platform's package
    program = next(modules.glob("@openai/codex-*/vendor/*/bin/codex"), None) or exe.resolve()
    data = program.read_bytes()
    at = data.find(b'{\n  "models": [')
    if at < 0:
        raise RuntimeError(f"no model catalog found in {program}")
    catalog, _ = json.JSONDecoder().raw_decode(data[at:at + 8_000_000].decode("utf-8", "replace"))
    return {m["slug"]: m for m in catalog["models"]}


@dataclass
class Run:
    client: str
    server: str
    task: str
    phase: str  # first start, or after a restart
    done: bool
    exit_code: int
    wall_s: float
    figures: dict[str, Any]
    tail: str = ""  # the end of what the agent printed


def run_task(client: tuple[str, str], exe: Path, task: Task, proxy: Proxy, server: str, phase: str, ctx: int) -> Run:
    name, version = client
    # every task in one project folder, its files committed with fixed dates: agents put the
    # working directory in their system prompts and git status in the first message, and a
    # user comes back to the same project for one task after another (what the cache is for)
    work = agents_dir() / "work" / "project"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    home = agents_dir() / f"home-{name}-{version}"  # kept: opencode installs its plugin there once
    for rel, text in task.files.items():
        (work / rel).write_text(text)
    fixed = {**os.environ, "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z"}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=work, check=True)
    subprocess.run(["git", "add", "-A"], cwd=work, check=True)
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "start"],
                   cwd=work, check=True, env=fixed)
    argv, env = agent_command(name, exe, task, proxy.base, home, work, ctx)
    proxy.take()
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=TASK_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
        code, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        code, out = 124, str(e.stdout or "")
    wall = time.perf_counter() - t0
    done = task.check(work, out)
    return Run(f"{name} {version}", server, task.name, phase, done, code, wall, summarize(proxy.take()), out[-600:])


def start(server: str, args: argparse.Namespace, state: str) -> Server:
    """A server; specli's prompt cache and history store in `state`, kept across restarts."""
    s = profiles.resolve_settings(args.profile)
    if server == "specli":
        srv: Server = SpecliServer(["--profile", args.profile, "--ctx", str(args.ctx), "--threads", str(args.threads)],
                                   env={"SPECLI_PROMPT_CACHE_DIR": state + "/prompt-cache",
                                        "SPECLI_HISTORY_DIR": state + "/history"})
    else:
        target = registry.resolve(s.target)
        srv = LlamaServer(binaries_dir(args.llama_version), args.spec_type, target, None, args.threads, args.ctx,
                          slots=None)
    srv.wait_ready(1800)
    return srv


def run(args: argparse.Namespace) -> list[Run]:
    # each client at each of its versions (--claude-version 2.1.197,2.1.332)
    clients = [(c, v) for c in args.clients.split(",") if c for v in getattr(args, f"{c}_version").split(",") if v]
    tasks = [t for t in TASKS if t.name in args.tasks.split(",")] if args.tasks else TASKS
    exes = {c: install(*c) for c in clients}
    for name, version in exes:  # opencode's first start installs its plugin package from npm: not the server's time
        if name != "opencode":
            continue
        warm = Path(tempfile.mkdtemp(prefix="agents-warm-"))
        argv, env = agent_command("opencode", exes[name, version], TASKS[0], "http://127.0.0.1:9",
                                  agents_dir() / f"home-opencode-{version}", warm, args.ctx)
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(argv, cwd=warm, env=env, capture_output=True, timeout=90, stdin=subprocess.DEVNULL)
        shutil.rmtree(warm, ignore_errors=True)
    runs: list[Run] = []
    cache = tempfile.mkdtemp(prefix="specli-agents-cache-")
    phases = ["first start", "restarted"] if args.restart else ["first start"]
    for server in args.servers.split(","):
        for phase in phases:
            srv = start(server, args, cache)
            proxy = Proxy(srv.base)
            try:
                for client in clients:
                    for task in tasks:
                        r = run_task(client, exes[client], task, proxy, server, phase, args.ctx)
                        runs.append(r)
                        f = r.figures
                        print(f"{r.client:16} {server:12} {phase:11} {task.name:12} done={r.done!s:5} rc={r.exit_code:3} "
                              f"{r.wall_s:7.1f} s req {f['requests']:2} prompt {f['prompt_tokens']:6} cached "
                              f"{f['cached_tokens']:6} decode {f['decode_tps']:5.1f} tok/s first "
                              f"{f['first_wall_s'] or 0:6.1f} s", file=sys.stderr, flush=True)
            finally:
                proxy.close()
                srv.stop()
    shutil.rmtree(cache, ignore_errors=True)
    return runs


def markdown(runs: list[Run]) -> str:
    lines = ["| client | server | phase | task | done | wall s | requests | prompt tokens | cached | prefilled | "
             "decode tok/s | first answer s |", "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        f = r.figures
        lines.append(f"| {r.client} | {r.server} | {r.phase} | {r.task} | {'yes' if r.done else 'no'} | "
                     f"{r.wall_s:.1f} | {f['requests']} | {f['prompt_tokens']} | {f['cached_tokens']} | "
                     f"{f['prefilled_tokens']} | {f['decode_tps']:.1f} | {f['first_wall_s'] or 0:.1f} |")
    return "\n".join(lines) + "\n" + "\n" + per_client(runs)


def per_client(runs: list[Run]) -> str:
    """Per client and phase: tasks done, protocol errors and the summed wall time on each
    server, and llama-server's time over specli's (the issue's goal: >= 1.0x)."""
    keys = sorted({(r.client, r.phase) for r in runs}, key=lambda k: (k[0], k[1] != "first start"))
    lines = ["| client | phase | specli done | llama-server done | errors (specli / llama-server) | specli s | "
             "llama-server s | llama-server / specli |", "|---|---|---|---|---|---:|---:|---:|"]
    for client, phase in keys:
        by = {s: [r for r in runs if (r.client, r.phase, r.server) == (client, phase, s)]
              for s in ("specli", "llama-server")}
        wall = {s: sum(r.wall_s for r in rs) for s, rs in by.items()}
        done = {s: f"{sum(r.done for r in rs)}/{len(rs)}" for s, rs in by.items()}
        errors = " / ".join(str(sum(r.figures["errors"] for r in rs)) for rs in by.values())
        ratio = f"{wall['llama-server'] / wall['specli']:.2f}x" if wall["specli"] and wall["llama-server"] else "-"
        lines.append(f"| {client} | {phase} | {done['specli']} | {done['llama-server']} | {errors} | "
                     f"{wall['specli']:.1f} | {wall['llama-server']:.1f} | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="claude,opencode")
    for name, (package, version, _) in AGENTS.items():
        p.add_argument(f"--{name}-version", default=version,
                       help=f"{package} version(s) from npm, comma-separated (default {version})")
    p.add_argument("--tasks", default="", help=f"comma-separated, of: {', '.join(t.name for t in TASKS)}")
    p.add_argument("--servers", default="specli,llama-server")
    p.add_argument("--profile", default="default")
    p.add_argument("--ctx", type=int, default=32768)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--spec-type", default="ngram-mod", help="llama-server's speculation (none: plain)")
    p.add_argument("--llama-version", default=importlib.metadata.version("llama_cpp_python"))
    p.add_argument("--restart", action="store_true", help="run every task again after restarting each server")
    p.add_argument("--json", dest="json_out", default=None)
    p.add_argument("--markdown", default=None)
    args = p.parse_args()
    runs = run(args)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([asdict(r) for r in runs], indent=2))
    text = markdown(runs)
    if args.markdown:
        Path(args.markdown).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
