"""The target across llama.cpp RPC servers (localhost only): endpoints refused before
anything loads, output over RPC equal to local output, a draft that stays local, and
faults (a server down at start, killed mid-generation, gone silent) that end in a
clear error and exit code 10 with the text so far kept, never a hang or a crash."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from harness.processes import default_sigint, free_port, start_rpc_server, stop_process
from specli import profiles
from specli.cli import app
from specli.errors import EXIT_RPC, ProfileError
from specli.rpc_endpoints import BadEndpoint, Endpoint, parse_endpoint, parse_endpoints
from tests.conftest import QWEN_DRAFT, QWEN_TARGET, SMOL, model_file
from tests.rpc_relay import Relay

runner = CliRunner()
SPECLI = [sys.executable, "-m", "specli.cli"]
TIMEOUT = 120  # no test waits longer on a process


# -- endpoints (pure) -----------------------------------------------------------------
@pytest.mark.parametrize("text, want", [
    ("127.0.0.1:50052", Endpoint("127.0.0.1", 50052)),
    (" gpu-box.local:1 ", Endpoint("gpu-box.local", 1)),
    ("localhost:65535", Endpoint("localhost", 65535)),
])
def test_endpoint_parses(text: str, want: Endpoint) -> None:
    assert parse_endpoint(text) == want


@pytest.mark.parametrize("text, why", [
    ("127.0.0.1", "HOST:PORT"), (":50052", "HOST:PORT"), ("host:0", "port"), ("host:65536", "port"),
    ("host:port", "port"), ("[::1]:50052", "IPv6"), ("::1:50052", "IPv6"), ("bad host:1", "host name"),
    ("-x:1", "host name"),
])
def test_bad_endpoint_names_the_problem(text: str, why: str) -> None:
    with pytest.raises(BadEndpoint, match=why):
        parse_endpoint(text)


def test_endpoint_lists() -> None:
    assert [str(e) for e in parse_endpoints("a:1, b:2")] == ["a:1", "b:2"]
    assert [str(e) for e in parse_endpoints(["a:1", "b:2,c:3"])] == ["a:1", "b:2", "c:3"]
    for bad, why in (("a:1,,b:2", "empty"), ("a:1,a:1", "twice"), ([], "no endpoint")):
        with pytest.raises(BadEndpoint, match=why):
            parse_endpoints(bad)
    assert Endpoint("localhost", 1).is_local and Endpoint("127.0.0.2", 1).is_local
    assert not Endpoint("192.168.1.2", 1).is_local and not Endpoint("box", 1).is_local


def test_rpc_settings_are_checked() -> None:
    s = profiles.resolve_settings(None, {"rpc": "a:1,b:2", "n_gpu_layers": -1})
    assert s.rpc == ("a:1", "b:2") and s.draft_rpc is None
    assert profiles.resolve_settings(None, {"rpc": "none"}).rpc is None
    with pytest.raises(ProfileError, match="rpc.*host name"):
        profiles.resolve_settings(None, {"rpc": "bad host:1", "n_gpu_layers": -1})
    with pytest.raises(ProfileError, match="n_gpu_layers is 0") as e:
        profiles.resolve_settings(None, {"rpc": "a:1"})
    assert "--n-gpu-layers -1" in e.value.one_line()
    with pytest.raises(ProfileError, match="draft_n_gpu_layers is 0"):
        profiles.resolve_settings(None, {"draft_rpc": "a:1"})


def test_shipped_rpc_profile_is_valid() -> None:
    s = profiles.resolve_settings("rpc")
    assert s.rpc and len(s.rpc) == 2 and s.n_gpu_layers == -1 and s.draft_rpc is None


def test_malformed_rpc_is_refused_before_anything_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    from specli import runtime

    monkeypatch.setattr(runtime, "open_runtime", lambda *a, **k: pytest.fail("loaded"))
    res = runner.invoke(app, ["generate", "--rpc", "10.0.0.1", "--n-gpu-layers", "-1", "hi"])
    assert res.exit_code == 6
    assert "rpc" in res.output and "HOST:PORT" in res.output and "Traceback" not in res.output


# -- servers ----------------------------------------------------------------------------
def port_near(preferred: int) -> int:
    """`preferred` when it is free (stable ports keep one calibration per test set-up in
    the user's cache: its key names the servers), else any free port."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            return free_port()


@pytest.fixture(scope="module")
def servers() -> Iterator[list[str]]:
    model_file(QWEN_TARGET)
    ports = [port_near(50352), port_near(50353)]
    procs = [start_rpc_server(port) for port in ports]
    yield [f"127.0.0.1:{port}" for port in ports]
    for p in procs:
        stop_process(p)


def rpc_args(endpoints: list[str]) -> list[str]:
    return ["--rpc", ",".join(endpoints), "--n-gpu-layers", "-1"]


def test_server_refuses_a_taken_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = subprocess.run([*SPECLI, "rpc-server", "--port", str(port)], capture_output=True, text=True,
                             timeout=TIMEOUT)
    assert res.returncode == EXIT_RPC, res.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in res.stderr and "Traceback" not in res.stderr


def test_server_warns_when_not_local() -> None:
    port = free_port()
    p = subprocess.Popen([*SPECLI, "rpc-server", "--host", "0.0.0.0", "--port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=default_sigint)
    assert p.stderr is not None
    try:
        os.set_blocking(p.stderr.fileno(), False)
        err, t0 = b"", time.monotonic()
        while b"Ctrl-C stops it" not in err and time.monotonic() - t0 < 60 and p.poll() is None:
            err += p.stderr.read() or b""
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        p.wait(30)
        err += p.stderr.read() or b""
    finally:
        stop_process(p)
    text = " ".join(err.decode().split())
    assert "no authentication" in text and "SSH tunnel" in text, text
    assert p.returncode == 130


def test_server_down_at_start_is_a_clear_error() -> None:
    model_file(SMOL)
    port = free_port()
    t0 = time.monotonic()
    res = subprocess.run([*SPECLI, "generate", "--target", SMOL, "--draft", "none", "--drafter", "ngram",
                          *rpc_args([f"127.0.0.1:{port}"]), "hi"], capture_output=True, text=True, timeout=TIMEOUT)
    assert res.returncode == EXIT_RPC, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"cannot reach RPC server 127.0.0.1:{port}" in lines[0], res.stderr
    assert time.monotonic() - t0 < 60


QWEN_PROMPTS = ["Write a Python function that returns the n-th Fibonacci number.",
                "Explain what a hash map is in two sentences.",
                "def quicksort(xs):"]
# The servers hold plain CPU weight buffers; this process repacks its weights for faster
# kernels, which sum in another order. Where the two differ, the local run's top two
# logits must be this close (measured on these prompts: 0.019 and 0.007).
NEAR_TIE = 0.1


def _greedy(target: object, drafter: object | None, prompt: str, margins: bool = False) -> tuple[list[int], list]:
    from specli.engine import GenerationConfig, run, verify_step
    from specli.engine.verify import MarginRecorder
    from specli.runtime import prompting

    target.reset()  # type: ignore[attr-defined]
    recorder = MarginRecorder(verify_step) if margins else None
    tokens = prompting.prompt_tokens(target, prompt, [], system=None, raw=False)  # type: ignore[arg-type]
    out = run(target, tokens, GenerationConfig(max_tokens=48), drafter, recorder or verify_step)  # type: ignore[arg-type]
    return out.tokens, (recorder.margins if recorder else [])


def _same_or_near_tie(local: tuple[list[int], list], other: list[int]) -> None:
    """Equal, or the first difference is the local run's runner-up token within
    NEAR_TIE of its top logit (the bench's tie-aware verdict)."""
    tokens, margins = local
    diff = next((i for i, (a, b) in enumerate(zip(tokens, other)) if a != b), None)
    if diff is None:
        assert len(other) == len(tokens)
    else:
        runner_up, gap = margins[diff]
        assert other[diff] == runner_up and gap < NEAR_TIE, f"differs at token {diff}: gap {gap}"


def test_output_over_rpc_equals_local(servers: list[str]) -> None:
    """The target split half and half over two servers. Plain greedy decoding gives the
    tokens of a local run with the servers' weight layout, token for token, and the
    default local run's except at near-ties; speculative decoding with the draft local
    does the same: the network changes nothing."""
    from specli.backend import LoadOptions, Model
    from specli.runtime import open_runtime

    s = profiles.resolve_settings(None, {"target": QWEN_TARGET, "draft": QWEN_DRAFT, "drafter": "draft",
                                         "draft_max": 4, "rpc": ",".join(servers), "n_gpu_layers": -1,
                                         "tensor_split": "1,1", "ctx": 1024})
    rt = open_runtime(s)
    local_plain = Model(model_file(QWEN_TARGET), LoadOptions(n_ctx=1024, repack=False))
    local = Model(model_file(QWEN_TARGET), LoadOptions(n_ctx=1024))
    try:
        assert rt.target.remote and rt.draft is not None and not rt.draft.remote
        for prompt in QWEN_PROMPTS:
            remote_base, _ = _greedy(rt.target, None, prompt)
            assert remote_base == _greedy(local_plain, None, prompt)[0], prompt
            local_base = _greedy(local, None, prompt, margins=True)
            _same_or_near_tie(local_base, remote_base)
            remote_spec, _ = _greedy(rt.target, rt.drafter(), prompt)
            assert remote_spec == _greedy(local_plain, rt.drafter(), prompt)[0], prompt
            _same_or_near_tie(local_base, remote_spec)
    finally:
        local.close()
        local_plain.close()
        rt.close()


def test_runtime_over_rpc_keeps_the_draft_local(servers: list[str]) -> None:
    from specli.runtime import open_runtime

    s = profiles.resolve_settings(None, {"target": QWEN_TARGET, "draft": QWEN_DRAFT, "drafter": "auto",
                                         "rpc": ",".join(servers), "n_gpu_layers": -1, "ctx": 512})
    rt = open_runtime(s)
    try:
        assert rt.target.remote and rt.draft is not None and not rt.draft.remote
        assert "rpc=" in rt.calibration_key()
        logits = rt.target.decode(rt.target.tokenize("def f(x):"), [0])
        assert logits.shape == (1, rt.target.n_vocab)
    finally:
        rt.close()


# -- faults ------------------------------------------------------------------------------
STORY = ["--target", SMOL, "--draft", "none", "--drafter", "ngram", "--ctx", "4096", "--raw", "-n", "3000",
         "Once upon a time, in a land far away,"]


def _read_some(p: subprocess.Popen[bytes], n: int = 40, timeout: float = 60) -> bytes:
    assert p.stdout is not None
    os.set_blocking(p.stdout.fileno(), False)
    got = b""
    t0 = time.monotonic()
    while len(got) < n and time.monotonic() - t0 < timeout and p.poll() is None:
        chunk = p.stdout.read(256)
        if chunk:
            got += chunk
        time.sleep(0.05)
    return got


def _generate_over(endpoint: str, extra: list[str] = ()) -> subprocess.Popen[bytes]:  # type: ignore[assignment]
    return subprocess.Popen([*SPECLI, "generate", *STORY, *rpc_args([endpoint]), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, preexec_fn=default_sigint)


def _ends_with_rpc_error(p: subprocess.Popen[bytes], first: bytes, bound: float) -> str:
    t0 = time.monotonic()
    out, err = p.communicate(timeout=bound + 30)
    assert time.monotonic() - t0 < bound, "took too long to give up"
    text = err.decode()
    assert p.returncode == EXIT_RPC, text
    assert "Traceback" not in text and ("lost the RPC server" in text or "no answer" in text), text
    shown = (first + out).decode()
    assert shown.strip() and shown.endswith("\n")  # the text so far, then the closing newline
    return text


def test_server_killed_mid_generation_ends_cleanly() -> None:
    model_file(SMOL)
    port = free_port()
    server = start_rpc_server(port)
    try:
        p = _generate_over(f"127.0.0.1:{port}")
        first = _read_some(p)
        assert first, p.stderr.read().decode() if p.poll() is not None else "no output"  # type: ignore[union-attr]
        server.kill()
        _ends_with_rpc_error(p, first, bound=30)
    finally:
        stop_process(server)


def test_silent_server_is_given_up_within_the_timeout() -> None:
    model_file(SMOL)
    port = free_port()
    server = start_rpc_server(port)
    try:
        with Relay(("127.0.0.1", port)) as relay:
            p = _generate_over(f"127.0.0.1:{relay.port}", ["--rpc-timeout", "5"])
            first = _read_some(p)
            assert first
            relay.freeze()
            err = _ends_with_rpc_error(p, first, bound=25)
            assert "no answer" in err and "5 s" in err
    finally:
        stop_process(server)


@pytest.mark.parametrize("n_servers", [1, 2])
def test_chat_survives_a_lost_server_and_reconnects(n_servers: int) -> None:
    """The first server is killed mid-reply and started again; with two, the other one
    stays up and must serve the reconnected chat too (it serves one client at a time,
    so the lost connection's socket to it has to be shut)."""
    model_file(SMOL)
    ports = [free_port() for _ in range(n_servers)]
    others = [start_rpc_server(port) for port in ports[1:]]
    port = ports[0]
    server = start_rpc_server(port)
    split = ["--tensor-split", "1,1"] if n_servers == 2 else []
    # --raw: the reply continues the text instead of ending its turn, so it is still
    # running when the server is killed
    p = subprocess.Popen([*SPECLI, "chat", "--target", SMOL, "--draft", "none", "--drafter", "none", "--ctx",
                          "4096", "-n", "3000", "--raw", *rpc_args([f"127.0.0.1:{pt}" for pt in ports]), *split],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=default_sigint, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert p.stdin is not None
    try:
        p.stdin.write(b"Once upon a time, in a land far away,\n")
        p.stdin.flush()
        first = _read_some(p, n=200)
        server.kill()
        server.wait(10)
        time.sleep(3)
        server = start_rpc_server(port)
        p.stdin.write(b"/reset\n/set max_tokens 20\nThe capital of France is\n/exit\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=TIMEOUT)
    finally:
        for proc in (server, *others):
            stop_process(proc)
        if p.poll() is None:
            p.kill()
    text = " ".join((first + out).decode().split())  # rich wraps lines at 80 columns
    assert p.returncode == 0, err.decode()
    assert "3000 tokens" not in text and "finish: error" in text  # the first reply was cut short
    assert "lost the RPC server" in text and "/reset" in text, text
    assert "reconnected" in text, text
    after = text.split("reconnected", 1)[1]
    assert "20 tokens" in after and "finish: length" in after, text  # a whole reply after reconnecting
    assert "Traceback" not in text + err.decode()


# -- bounded calls (no server: plain Python functions in the worker) --------------------
def test_bounded_call_returns_raises_and_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from specli.backend import bounded, rpc
    from specli.errors import RpcError

    monkeypatch.setattr(bounded, "_state", bounded._State())  # this process's real state stays clean
    assert bounded.call(lambda: 42, "answering", 5) == 42
    with pytest.raises(ZeroDivisionError):
        bounded.call(lambda: 1 / 0, "dividing", 5)
    t0 = time.monotonic()
    with pytest.raises(RpcError, match="waiting: no answer from the RPC server in 0.2 s"):
        bounded.call(lambda: time.sleep(2), "waiting", 0.2)
    assert time.monotonic() - t0 < 1.5
    assert bounded.ever_lost() and bounded.lost() == "no answer in 0.2 s"
    with pytest.raises(RpcError, match="lost earlier"):  # nothing more on a lost connection...
        bounded.call(lambda: 1, "again", 5)
    bounded.reconnect([])  # ...until the caller starts over
    assert bounded.call(lambda: 1, "again", 5) == 1 and bounded.epoch() == 1
    assert rpc.spelling(Endpoint("h", 50052)) == b"h:050052"  # a fresh dispatcher in llama.cpp
    assert threading.get_native_id() in bounded._state.stale_threads  # older threads' aborts are ignored
