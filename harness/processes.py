"""Server processes for the tests and the benchmarks: a `specli serve` on 127.0.0.1
(started on a free port, its stderr collected, ready once /health answers 200), a
`specli rpc-server` (ready once it answers HELLO), one HTTP request, and a process's
resident memory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_rpc_server(port: int) -> subprocess.Popen[bytes]:
    """`specli rpc-server` on 127.0.0.1:port, answering HELLO before this returns."""
    from specli.backend.rpc import probe
    from specli.rpc_endpoints import Endpoint

    p = subprocess.Popen([sys.executable, "-m", "specli.cli", "rpc-server", "--port", str(port), "--threads", "2"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=default_sigint)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        if p.poll() is not None:
            raise AssertionError(f"rpc-server exited {p.returncode}: {p.stderr.read().decode()}")  # type: ignore[union-attr]
        try:
            probe(Endpoint("127.0.0.1", port), timeout=2)
            return p
        except Exception:
            time.sleep(0.2)
    p.kill()
    raise AssertionError("rpc-server did not answer in 30 s")


def stop_process(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.kill()
    p.wait(10)


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def proc_status(pid: int | str, key: str) -> int | None:
    """Field `key` (e.g. "VmRSS") of /proc/PID/status as a number (kB for sizes); None
    where there is none (not Linux, a process gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(key + ":")), None)
    except OSError:
        return None


def rss_mib(pid: int | str = "self", peak: bool = False) -> float:
    """Resident set size of process `pid` (default: this one) in MiB; `peak`: the largest
    it has been. NaN where /proc cannot tell."""
    kb = proc_status(pid, "VmHWM" if peak else "VmRSS")
    return float("nan") if kb is None else kb / 1024


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
         raw: bytes | None = None, timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; errors are answers too."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json",
                                                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@contextlib.contextmanager
def running(args: list[str], **kw: Any) -> Iterator[ServeProcess]:
    """A server started with `args`, ready, stopped on exit."""
    srv = ServeProcess(args, **kw)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


class ServeProcess:
    def __init__(self, args: list[str], port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "specli", "serve", "--port", str(self.port), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def health(self) -> int | None:
        try:
            return http("GET", self.base + "/health", timeout=5)[0]
        except OSError:
            return None

    def wait_ready(self, timeout: float = 300) -> list[int]:
        """Poll /health until 200; the statuses seen on the way (503 while loading)."""
        seen: list[int] = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"specli serve exited with {self.proc.returncode}:\n{self.log}")
            status = self.health()
            if status is not None:
                seen.append(status)
                if status == 200:
                    return seen
            time.sleep(0.02)
        raise TimeoutError(f"specli serve not ready after {timeout} s:\n{self.log}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(2)
        return self.proc.returncode

    def threads(self) -> int:
        """The process's thread count (Linux)."""
        return proc_status(self.proc.pid, "Threads") or 0

    def rss_mib(self) -> float:
        return rss_mib(self.proc.pid)
