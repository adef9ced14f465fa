"""Bounded llama.cpp calls for models on RPC servers, and surviving a lost server.

llama.cpp's RPC client aborts the process when a server stops answering
(`GGML_ABORT("Remote RPC server crashed ...")` in its dispatcher thread) and blocks
forever when one goes silent. So every llama.cpp call that may talk to a server runs
in a worker thread (`call`) and the caller waits with a bound; an abort callback
parks the dispatcher thread instead of aborting and hands the error to the caller as
RpcError. A model that lost its server is dropped unfreed. `reconnect` starts a new
epoch: this process's sockets to the servers are shut down (a server serves one
client at a time), threads of older epochs are ignored when they abort later, and new
connections get new dispatchers (see rpc.spelling)."""

from __future__ import annotations

import ctypes
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from specli.errors import EXIT_RPC, RpcError

T = TypeVar("T")

# aborts of llama.cpp's RPC client that mean "the server is gone"
RPC_ABORTS = ("Remote RPC server crashed", "Failed to connect", "RPC handshake failed")
# ...of which these happen while llama.cpp holds its connection mutexes: parking the
# thread blocks every later connection in this process
STUCK_ABORTS = ("Failed to connect", "RPC handshake failed")
INTERRUPT_GRACE = 5.0  # seconds a call may take to end after Ctrl-C before it is given up
ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)


@dataclass
class _State:
    lost: str | None = None  # why the current epoch's connection is gone
    ever_lost: bool = False  # a parked thread exists: the process must leave with os._exit
    epoch: int = 0  # connections made after a loss use new dispatchers
    stuck: str | None = None  # llama.cpp's connection mutexes are held by a parked thread
    stale_threads: frozenset[int] = frozenset()  # native ids of threads of older epochs
    connected: set[str] = field(default_factory=set)  # endpoints connected in this epoch


_state = _State()
_lock = threading.Lock()
_waiting: set[threading.Event] = set()


def _native_threads() -> frozenset[int]:
    try:
        return frozenset(int(t) for t in os.listdir("/proc/self/task"))
    except OSError:  # not Linux: aborts of older epochs cannot be told apart
        return frozenset()


def _mark_lost(why: str) -> None:
    with _lock:
        if _state.lost is None:
            _state.lost = why
        _state.ever_lost = True
        for ev in _waiting:
            ev.set()


@ABORT_CALLBACK
def _on_abort(message: bytes | None) -> None:
    lines = (message or b"").decode("utf-8", "replace").strip().splitlines()
    why = re.sub(r"^\S+:\d+: ", "", lines[-1]).strip() if lines else "llama.cpp aborted"  # no file:line
    lost_server = any(k in why for k in RPC_ABORTS)
    if not lost_server or threading.current_thread() is threading.main_thread():
        # another fault, or one with nobody to hand it to: llama.cpp's own abort
        sys.stdout.flush()
        os.write(2, f"\nerror: llama.cpp aborted: {why}\n".encode())
        if lost_server:
            os._exit(EXIT_RPC)
        return  # llama.cpp aborts the process
    if threading.get_native_id() in _state.stale_threads:
        _state.ever_lost = True  # an older epoch's dispatcher: its model is already dropped
    else:
        if any(k in why for k in STUCK_ABORTS):
            _state.stuck = why
        _mark_lost(why)
    while True:  # park this thread: returning would let llama.cpp abort the process
        time.sleep(3600)


def install(set_abort_callback: Callable[[Any], Any]) -> None:
    """Route llama.cpp's aborts through `_on_abort` (once per process)."""
    if not getattr(install, "done", False):
        set_abort_callback(_on_abort)
        install.done = True  # type: ignore[attr-defined]


def lost() -> str | None:
    """Why the current connection is gone, or None."""
    return _state.lost


def ever_lost() -> bool:
    """A server was lost in this process: threads are parked in llama.cpp, so the
    process must end with os._exit (interpreter shutdown could wait on them)."""
    return _state.ever_lost


def epoch() -> int:
    return _state.epoch


def connected(endpoint: str) -> bool:
    return endpoint in _state.connected


def add_connected(endpoint: str) -> None:
    _state.connected.add(endpoint)


def reconnect(endpoints: Iterable[str]) -> None:
    """Start a new epoch after a loss: shut this process's sockets to `endpoints` (so
    that servers still up go back to accepting) and forget the old connections."""
    with _lock:
        if _state.lost is None:
            return
        if _state.stuck is not None:
            raise RpcError(f"cannot reconnect in this process: llama.cpp is stuck after '{_state.stuck}'",
                           "leave and start specli again once the servers are up")
        _state.lost = None
        _state.epoch += 1
        _state.stale_threads = _native_threads()
        _state.connected = set()
    _shut_sockets_to(set(endpoints))


def _shut_sockets_to(endpoints: set[str]) -> None:
    """shutdown() this process's TCP connections to `endpoints` (host:port)."""
    peers: set[tuple[str, int]] = set()
    for ep in endpoints:
        host, _, port = ep.rpartition(":")
        try:
            peers.add((socket.gethostbyname(host), int(port)))
        except OSError:
            continue
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(fd)) as s:  # the dup is closed, the socket shut for all
                if s.type == socket.SOCK_STREAM and s.family == socket.AF_INET and s.getpeername() in peers:
                    s.shutdown(socket.SHUT_RDWR)
        except OSError:
            continue


def call(fn: Callable[[], T], what: str, timeout: float | None) -> T:
    """Run `fn` (a llama.cpp call that may talk to RPC servers) in a worker thread and
    wait at most `timeout` seconds. Raises RpcError when a server is lost or silent;
    the call is then abandoned (and the connection with it)."""
    if _state.lost is not None:
        raise RpcError(f"{what}: the RPC connection was lost earlier ({_state.lost})",
                       "start the server again, then /reset in chat or run the command again")
    done = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e
        done.set()

    with _lock:
        _waiting.add(done)
    try:
        threading.Thread(target=work, name="specli-rpc-call", daemon=True).start()
        try:
            finished = done.wait(timeout)
        except BaseException:  # Ctrl-C: the model is usable again only if the call ends
            if not done.wait(INTERRUPT_GRACE):
                _mark_lost("interrupted while waiting for the RPC server")
            raise
    finally:
        with _lock:
            _waiting.discard(done)
    if "error" in box:
        raise box["error"]
    if "value" in box:
        return box["value"]  # type: ignore[no-any-return]
    if not finished:
        _mark_lost(f"no answer in {timeout:g} s")
        raise RpcError(f"{what}: no answer from the RPC server in {timeout:g} s",
                       "check the server and the network; output so far is kept")
    raise RpcError(f"{what}: lost the RPC server ({_state.lost})", "check the server; output so far is kept")
