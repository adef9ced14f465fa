"""Servers as real processes on 127.0.0.1 for the bench's client replays: `specli serve`
and llama.cpp's `llama-server` (built by scripts/build-llama-cpp.sh), and a client that
streams a chat completion and times it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

Messages = list[dict[str, str]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server process; its output goes to a log file."""

    def __init__(self, argv: list[str], name: str, port: int, env: dict[str, str] | None = None) -> None:
        self.port, self.program = port, Path(argv[0]).name
        self.base = f"http://127.0.0.1:{port}"
        self.log = open(tempfile.mktemp(prefix=f"{name}-", suffix=".log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "NO_COLOR": "1", **(env or {})})

    def wait_ready(self, timeout: float = 600) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.program} exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.base} not ready; see {self.log.name}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(300)  # specli writes its prompt cache to disk on the way out
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class SpecliServer(Server):
    """`specli serve` (this interpreter's specli) with `args`."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        port = free_port()
        super().__init__([sys.executable, "-m", "specli", "serve", "--port", str(port), *args], "specli-serve",
                         port, env)


class LlamaServer(Server):
    """llama.cpp's llama-server with one slot (`slots=None`: its default, 4)."""

    def __init__(self, bin_dir: Path, spec_type: str, target: Path, draft: Path | None, threads: int,
                 ctx: int, slots: int | None = 1) -> None:
        port = free_port()
        argv = [str(bin_dir / "llama-server"), "-m", str(target), "-t", str(threads), "-tb", str(threads),
                "-c", str(ctx), *(["-np", str(slots)] if slots is not None else []), "--port", str(port),
                "--host", "127.0.0.1", "--no-webui", "--temp", "0"]
        if spec_type != "none":
            argv += ["--spec-type", spec_type]
        if spec_type == "draft-simple":
            if draft is None:
                raise ValueError("llama-server's draft-simple needs a draft model")
            argv += ["-md", str(draft), "-td", str(threads), "-ngld", "0"]
        super().__init__(argv, f"llama-server-{spec_type}", port)


def stream_chat(base: str, messages: Messages, max_tokens: int, headers: dict[str, str],
                extra: dict | None = None) -> dict:
    """One streamed greedy chat completion, timed by the client; `extra` joins the body."""
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, **(extra or {})})
    conn = HTTPConnection(host, int(port), timeout=3600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"{base}: HTTP {resp.status}: {resp.read()[:300]!r}")
    parts: list[str] = []
    t_first = t_last = None
    usage: dict = {}
    timings: dict = {}
    figures: dict = {}
    finish = ""
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        obj = json.loads(data)
        usage = obj.get("usage") or usage
        timings = obj.get("timings") or timings
        figures = obj.get("specli") or figures
        for choice in obj.get("choices", []):
            text = (choice.get("delta") or {}).get("content")
            if text:
                now = time.perf_counter()
                t_first = t_first or now
                t_last = now
                parts.append(text)
            finish = choice.get("finish_reason") or finish
    wall = time.perf_counter() - t0
    conn.close()
    return {"text": "".join(parts), "wall": wall, "t0": t0, "first": t_first or t0 + wall, "last": t_last or t0 + wall,
            "usage": usage, "timings": timings, "specli": figures, "finish": finish}


def at_once(base: str, requests: list[Messages], max_tokens: int, extra: dict | None = None) -> dict[str, Any]:
    """Every request sent at once; each one's figures and the wall until the last ends."""
    out: list[dict | None] = [None] * len(requests)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            out[i] = stream_chat(base, requests[i], max_tokens, {}, extra)
        except Exception as e:  # noqa: BLE001 - raised below, in the caller's thread
            errors.append(e)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{base}: {len(errors)} of {len(requests)} requests failed: {errors[0]}")
    done = [r for r in out if r is not None]
    return {"wall": wall, "ttft": [r["first"] - t0 for r in done], "total": [r["last"] - t0 for r in done],
            "texts": [r["text"] for r in done], "tokens": [r["specli"].get("tokens") for r in done],
            "completion_tokens": sum(int(r["usage"].get("completion_tokens", 0)) for r in done),
            "drafted": sum(int(r["timings"].get("draft_n", 0)) for r in done),
            "accepted": sum(int(r["timings"].get("draft_n_accepted", 0)) for r in done)}
