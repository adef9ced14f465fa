"""Record what a coding agent from npm really sends to a local model server
(tests/fixtures/agents, whose README says how the fixtures there were made).

A stand-in server on 127.0.0.1 saves every request (method, path, headers, the body as
sent) and answers every model call with the text "Done.": Anthropic `message_start` ...
`message_stop` events for `/v1/messages` (one JSON message when `stream` is false),
`data: {chunk}` ... `data: [DONE]` for `/v1/chat/completions`, `response.created` ...
`response.completed` events for `/v1/responses`, one model for `GET /v1/models`, 404 for
anything else. The driver installs the agent with npm into the user cache folder (where
benchmarks.agents keeps its agents), makes a scratch git repo (calc.py with a bug,
test_calc.py, one commit) and a fresh HOME, runs the agent once per run under
`timeout 120` with stdin /dev/null, an `env -i` style environment and the prompt
"Fix the bug in calc.py" (Claude Code and Codex in a loopback-only network namespace,
`unshare -n`, with the recorder inside it), and writes one fixture file per distinct
request into --out, with the scratch paths and today's date replaced:

    python -m benchmarks.record_agents --agent claude --version 2.1.197 --out tests/fixtures/agents
    python -m benchmarks.record_agents --agent codex --version 0.169.1 --out tests/fixtures/agents
    python -m benchmarks.record_agents --agent opencode --version 1.18.33 --out /tmp/fixtures
    python -m benchmarks.record_agents --agent claude --runs claude,claude-default,claude-tuned --out /tmp/f
    python -m benchmarks.record_agents --serve /tmp/requests.jsonl   # only the recorder, until ^C

Runs: claude (ANTHROPIC_MODEL set, IS_SANDBOX=1, --dangerously-skip-permissions),
claude-default (no ANTHROPIC_MODEL, --permission-mode acceptEdits), claude-tuned (claude
plus CLAUDE_CODE_MAX_OUTPUT_TOKENS=4096, CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768,
CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1); codex (no model metadata) and
codex-freeform (a model catalog entry with the freeform apply_patch tool, made from the
agent's own gpt-5.5 entry and the base instructions the codex run sent); opencode.
Fixtures are named `<agent>-<version>-<n>-<kind>.json`; the raw log of each run, the
agent's output and its exit code stay in the scratch folder (--scratch, /tmp/agentrec).
The stand-in server is harness.agent_recorder. Runs in the project's venv (it imports
benchmarks.agents), Linux."""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.agents import AGENTS, CALC, codex_entry, install
from harness.agent_recorder import MODEL, TEXT, RecorderServer, decoded, session

ROOT = Path(__file__).resolve().parent.parent  # where `python -m benchmarks.record_agents` finds the package
FIXTURE_AGENT = {"claude": "claude-code", "opencode": "opencode", "codex": "codex"}
RUNS = {"claude": ("claude", "claude-default", "claude-tuned"), "codex": ("codex", "codex-freeform"),
        "opencode": ("opencode",)}
DEFAULT_RUNS = {"claude": ("claude",), "codex": ("codex", "codex-freeform"), "opencode": ("opencode",)}
RUN_LABEL = {"claude-default": "default-model", "claude-tuned": "max-output-4096",
             "codex-freeform": "freeform-apply-patch"}  # added to the names of the model calls' fixtures
NETNS = ("claude", "codex")  # opencode installs its plugin package from npm, so it needs the network
PROMPT = "Fix the bug in calc.py"
PORT = 18765
TIMEOUT_S = 120
KEPT_HEADERS = ("anthropic-version", "anthropic-beta", "content-type", "accept", "user-agent", "authorization",
                "x-api-key")
SECRET_HEADERS = ("authorization", "x-api-key")
FIXED_DATE = ("2025-01-01", "Wed Jan 01 2025", "January 2025")
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


# --- the driver -----------------------------------------------------------------------------


def slug(path: Path | str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", str(path))


def netns_prefix() -> tuple[list[str] | None, str]:
    """How to start a loopback-only network namespace here, or None and why not."""
    why = ""
    for prefix in (["unshare", "-n"], ["unshare", "-r", "-n"]):
        try:
            r = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            why = str(e)
            continue
        if r.returncode == 0:
            return prefix, ""
        why = r.stderr.strip() or f"exit {r.returncode}"
    return None, why


def make_repo(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "calc.py").write_text(CALC)
    (work / "test_calc.py").write_text(TEST_CALC)
    fixed = {**os.environ, "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z"}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=work, check=True)
    subprocess.run(["git", "add", "-A"], cwd=work, check=True)
    subprocess.run(["git", "-c", "user.name=user", "-c", "user.email=user@example.com", "commit", "-qm", "calc"],
                   cwd=work, check=True, env=fixed)


@dataclass
class Context:
    agent: str
    exe: Path
    base: str
    home: Path
    work: Path
    earlier: dict[str, list[dict[str, Any]]]  # run name -> the requests it made


def command(run: str, ctx: Context) -> tuple[list[str], dict[str, str]]:
    """The agent's argv and its whole environment for one run, as the fixtures' README says."""
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": str(ctx.home), "TERM": "dumb",
           "LANG": "C.UTF-8"}
    exe = str(ctx.exe)
    if ctx.agent == "claude":
        env |= {"ANTHROPIC_BASE_URL": ctx.base, "ANTHROPIC_AUTH_TOKEN": "dummy",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1"}
        if run == "claude-default":
            return [exe, "-p", PROMPT, "--permission-mode", "acceptEdits"], env
        env |= {"ANTHROPIC_MODEL": MODEL, "IS_SANDBOX": "1"}
        if run == "claude-tuned":
            env |= {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096", "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "32768",
                    "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY": "1"}
        return [exe, "-p", PROMPT, "--dangerously-skip-permissions"], env
    if ctx.agent == "codex":
        codex = ctx.home / ".codex"
        codex.mkdir(parents=True, exist_ok=True)
        catalog = ""
        if run == "codex-freeform":
            plain = [r for r in ctx.earlier.get("codex", []) if r["path"].split("?")[0] == "/v1/responses"]
            if not plain:
                raise SystemExit("the codex-freeform run takes its base instructions from the codex run: run both")
            first = json.loads(raw_body(plain[0]))["input"][0]
            (codex / "model-catalog.json").write_text(json.dumps(
                {"models": [codex_entry(ctx.exe, MODEL, 32768, first["content"][0]["text"])]}))
            catalog = f'model_catalog_json = "{codex / "model-catalog.json"}"\n'
        (codex / "config.toml").write_text(f"""model = "{MODEL}"
model_provider = "specli"
{catalog}approval_policy = "never"
sandbox_mode = "workspace-write"
check_for_update_on_startup = false

[model_providers.specli]
name = "specli (local)"
base_url = "{ctx.base}/v1"
wire_api = "responses"
env_key = "SPECLI_API_KEY"

[analytics]
enabled = false
""")
        env |= {"CODEX_HOME": str(codex), "SPECLI_API_KEY": "dummy"}
        return [exe, "exec", "--skip-git-repo-check", PROMPT], env
    config = {"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
              "provider": {"specli": {"npm": "@ai-sdk/openai-compatible", "name": "specli (local)",
                                      "options": {"baseURL": ctx.base + "/v1", "apiKey": "dummy"},
                                      "models": {MODEL: {"name": "Qwen2.5 Coder 1.5B"}}}},
              "model": f"specli/{MODEL}"}
    (ctx.work / "opencode.json").write_text(json.dumps(config, indent=2) + "\n")
    env |= {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1"}
    return [exe, "run", PROMPT, "-m", f"specli/{MODEL}"], env


def raw_body(record: dict[str, Any]) -> bytes:
    headers = {k.lower(): v for k, v in record["headers"]}
    return decoded(base64.b64decode(record["body_b64"]), headers.get("content-encoding", ""))


def replacer(work: Path, home: Path, today: datetime.date) -> Callable[[str], str]:
    """The README's plain string replacements: scratch repo and its slug, scratch HOME, today
    (2026-12-05, Sat Dec 05 2026, December 2026 -> 2025-01-01, Wed Jan 01 2025, January 2025)."""
    pairs = [(str(work), "/home/user/project"), (slug(work), "-home-user-project"), (str(home), "/home/user"),
             (today.isoformat(), FIXED_DATE[0]), (today.strftime("%a %b %d %Y"), FIXED_DATE[1]),
             (today.strftime("%B %Y"), FIXED_DATE[2])]

    def replace(text: str) -> str:
        for old, new in pairs:
            text = text.replace(old, new)
        return text
    return replace


def replaced(value: Any, replace: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return replace(value)
    if isinstance(value, list):
        return [replaced(v, replace) for v in value]
    if isinstance(value, dict):
        return {replace(k): replaced(v, replace) for k, v in value.items()}
    return value


def kind(agent: str, run: str, method: str, path: str, body: Any) -> str:
    route = path.split("?")[0].rstrip("/")
    label = RUN_LABEL.get(run)
    if route == "/v1/models":
        return "models-list"
    if route.endswith("/count_tokens"):
        return "count-tokens"
    if route == "/v1/messages":
        name = "messages"
    elif route == "/v1/responses":
        name = "responses"
    elif route == "/v1/chat/completions" and agent == "opencode":
        name = "agent-turn" if isinstance(body, dict) and body.get("tools") else "title"
    else:
        name = slug(f"{method.lower()}{route or '-root'}").strip("-").lower()
    return f"{name}-{label}" if label else name


def fixture(agent: str, version: str, record: dict[str, Any], replace: Callable[[str], str]) -> dict[str, Any]:
    raw = raw_body(record)
    try:
        body: Any = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", "replace")
    headers: dict[str, str] = {}
    for k, v in record["headers"]:
        k = k.lower()
        if k in KEPT_HEADERS and k not in headers:
            headers[k] = "REDACTED" if k in SECRET_HEADERS else v
    return {"agent": FIXTURE_AGENT[agent], "version": version, "method": record["method"],
            "path": replace(record["path"]), "headers": headers, "body": replaced(body, replace)}


def tool_count(body: Any) -> int:
    return len(body.get("tools") or []) if isinstance(body, dict) else 0


def record(agent: str, version: str, runs: list[str], out: Path, scratch: Path, port: int, use_netns: bool) -> int:
    exe = install(agent, version)
    shown = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    print(f"{agent} {version}: {exe} --version -> {(shown.stdout or shown.stderr).strip()}")
    prefix: list[str] | None = None
    if use_netns and agent in NETNS:
        prefix, why = netns_prefix()
        if prefix is None:
            print(f"NOTE: `unshare -n` does not work here ({why}): {agent} runs without a network namespace")
    today = datetime.date.today()
    out.mkdir(parents=True, exist_ok=True)
    work, home = scratch / "work", scratch / "home"
    base = f"http://127.0.0.1:{port}"
    ctx = Context(agent, exe, base, home, work, {})
    replace = replacer(work, home, today)
    seen: set[tuple[str, str, bytes]] = set()
    n, failed = 0, 0
    for run in runs:
        rundir = scratch / "runs" / f"{agent}-{version}-{run}"
        shutil.rmtree(rundir, ignore_errors=True)
        rundir.mkdir(parents=True)
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        make_repo(work)
        argv, env = command(run, ctx)
        netns = prefix is not None and agent in NETNS
        spec = {"dir": str(rundir), "port": port, "loopback": netns, "argv": argv, "env": env, "cwd": str(work),
                "timeout": TIMEOUT_S}
        (rundir / "spec.json").write_text(json.dumps(spec, indent=2))
        inner = [sys.executable, "-m", "benchmarks.record_agents", "--session", str(rundir / "spec.json")]
        t0 = time.monotonic()
        subprocess.run([*(prefix or []), *inner] if netns else inner, check=True, cwd=ROOT)
        took = time.monotonic() - t0
        code = int((rundir / "exit_code").read_text())
        stdout = (rundir / "stdout.txt").read_text(errors="replace")
        stderr = (rundir / "stderr.txt").read_text(errors="replace")
        log = rundir / "requests.jsonl"
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        ctx.earlier[run] = records
        ok = code == 0 and TEXT in stdout
        failed += not ok
        print(f"run {run}: exit {code}, {took:.0f} s, {'printed' if TEXT in stdout else 'did NOT print'} "
              f"{TEXT!r}, {len(records)} requests{'' if netns else ' (no network namespace)'}")
        print("  stdout: " + (stdout.strip()[-300:] or "(nothing)").replace("\n", "\n          "))
        if stderr.strip():
            print("  stderr: " + stderr.strip()[-600:].replace("\n", "\n          "))
        for rec in records:
            key = (rec["method"], rec["path"], raw_body(rec))
            if key in seen:
                continue
            seen.add(key)
            n += 1
            fix = fixture(agent, version, rec, replace)
            name = f"{FIXTURE_AGENT[agent]}-{version}-{n}-{kind(agent, run, rec['method'], rec['path'], fix['body'])}"
            (out / f"{name}.json").write_text(json.dumps(fix, indent=2, ensure_ascii=False) + "\n")
            print(f"  {name}.json: {rec['method']} {rec['path']}, body {len(key[2]):,} B as sent, "
                  f"{tool_count(fix['body'])} tools")
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agent", choices=sorted(AGENTS))
    p.add_argument("--version", help="npm version (default: the one benchmarks.agents uses)")
    p.add_argument("--runs", help="comma-separated runs (claude: claude, claude-default, claude-tuned; codex: codex, "
                                  "codex-freeform; opencode: opencode); default: " +
                                  "; ".join(f"{k}: {','.join(v)}" for k, v in DEFAULT_RUNS.items()))
    p.add_argument("--out", type=Path, help="folder for the fixture files")
    p.add_argument("--port", type=int, default=PORT)
    p.add_argument("--scratch", type=Path, default=Path("/tmp/agentrec"),
                   help="scratch folder: work repo, HOME, each run's raw log and output (default /tmp/agentrec)")
    p.add_argument("--no-netns", action="store_true", help="run Claude Code and Codex without `unshare -n`")
    p.add_argument("--serve", type=Path, metavar="LOG", help="only run the recorder, appending requests to LOG")
    p.add_argument("--session", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.session:
        return session(a.session)
    if a.serve:
        server = RecorderServer(a.port, a.serve)
        print(f"recording to {a.serve} on http://127.0.0.1:{a.port}", file=sys.stderr)
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
        return 0
    if not a.agent or not a.out:
        p.error("--agent and --out are needed (or --serve LOG)")
    runs = a.runs.split(",") if a.runs else list(DEFAULT_RUNS[a.agent])
    unknown = [r for r in runs if r not in RUNS[a.agent]]
    if unknown:
        p.error(f"runs {unknown} are not {a.agent}'s: {', '.join(RUNS[a.agent])}")
    version = a.version or AGENTS[a.agent][1]
    try:
        return record(a.agent, version, runs, a.out.resolve(), a.scratch.resolve(), a.port, not a.no_netns)
    except subprocess.CalledProcessError as e:
        print(f"failed: {' '.join(map(str, e.cmd))} exited {e.returncode}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
