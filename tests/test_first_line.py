"""Nothing long happens silently (issue 64): under a pseudo-terminal, on a cold calibration
cache, each command's first line comes within 2 s of its start, and a first use's
calibration says what it measures before measuring it."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import SMOL, model_file

FIRST_LINE_S = 2.0


@dataclass
class Terminal:
    """A command on a pseudo-terminal: its output as it comes, with the time of each read."""

    pid: int
    fd: int
    t0: float
    out: bytearray = field(default_factory=bytearray)
    first_line_s: float | None = None

    @classmethod
    def start(cls, args: list[str], env: dict[str, str]) -> Terminal:
        t0 = time.perf_counter()
        pid, fd = pty.fork()
        if pid == 0:  # the child: the command, nothing else
            os.execve(sys.executable, [sys.executable, "-m", "specli", *args], env)
        return cls(pid, fd, t0)

    def read_until(self, done: Callable[[str], bool], timeout: float) -> str:
        """Read until `done(text so far)` or the end of output, at most `timeout` seconds."""
        end = time.perf_counter() + timeout
        while not done(self.text) and time.perf_counter() < end:
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # the command ended
                break
            if not data:
                break
            self.out += data
            if self.first_line_s is None and b"\n" in self.out and self.out.strip():
                self.first_line_s = time.perf_counter() - self.t0
        return self.text

    @property
    def text(self) -> str:
        return self.out.decode(errors="replace")

    def send(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def finish(self, timeout: float) -> int:
        """Read to the end of the output; the exit status (stopped after `timeout` seconds)."""
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            self.read_until(lambda _: False, 0.5)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.read_until(lambda _: False, 0.2)
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        return self.stop()

    def stop(self) -> int:
        """SIGTERM, then the exit status (SIGKILL after 30 s)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        end = time.perf_counter() + 30
        while time.perf_counter() < end:
            self.read_until(lambda _: False, 0.2)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


@pytest.fixture
def cold(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine that has never calibrated: an empty cache folder, the
    models where they are."""
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "SPECLI_MODELS_DIR": str(model_file(SMOL).parent),
            "COLUMNS": "120", "LINES": "40", "TERM": "xterm-256color"}


PAIR = ["--target", SMOL, "--draft", SMOL, "--ctx", "512"]


def _calibration(env: dict[str, str]) -> dict[str, dict[str, object]]:
    path = Path(env["XDG_CACHE_HOME"]) / "specli" / "calibration.json"
    return json.loads(path.read_text())["entries"] if path.exists() else {}


def test_generate_exact_says_what_it_measures_at_once_and_takes_seconds(cold: dict[str, str]) -> None:
    term = Terminal.start(["generate", "--exact", "-n", "8", *PAIR, "Say hi."], cold)
    code = term.finish(240)
    out = term.text
    assert term.first_line_s is not None and term.first_line_s <= FIRST_LINE_S, (term.first_line_s, out[:400])
    assert out.lstrip().startswith("specli: loading"), out[:400]
    said = out.index("first use of --exact with this pair")
    assert "measured in" in out and "specli calibrate --exact" in out and said < out.index("measured in")
    assert "finish:" in out and code == 0, out[-800:]
    (entry,) = _calibration(cold).values()
    assert entry["quick"] and entry["draft_ratio"] > 0 and entry["exact_batch"] >= 1
    assert not entry["contexts"]  # the long-context curve waits for `specli calibrate --ctx`


def test_chat_says_it_is_loading_then_what_a_first_reply_measures(cold: dict[str, str]) -> None:
    term = Terminal.start(["chat", *PAIR, "--drafter", "auto", "-n", "8"], cold)
    try:
        term.read_until(lambda t: "> " in t, 60)
        assert term.first_line_s is not None and term.first_line_s <= FIRST_LINE_S, (term.first_line_s, term.text)
        assert "loading" in term.text.splitlines()[0]
        term.send("Say hi.")
        out = term.read_until(lambda t: t.count("> ") >= 2, 240)
        term.send("/exit")
    finally:
        term.stop()
    assert "first use of this pair" in out and "measured in" in out, out[-1500:]


def test_serve_says_it_is_loading_at_once(cold: dict[str, str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    term = Terminal.start(["serve", "--port", str(port), *PAIR], cold)
    try:
        term.read_until(lambda t: "\n" in t, 30)
    finally:
        term.stop()
    assert term.first_line_s is not None and term.first_line_s <= FIRST_LINE_S, (term.first_line_s, term.text)
    assert "loading" in term.text.splitlines()[0]
