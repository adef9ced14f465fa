"""llama.cpp's RPC backend: reaching `rpc-server`s as offload devices, serving one, and
surviving one that goes away.

llama.cpp's RPC client aborts the process when a server stops answering
(`GGML_ABORT("Remote RPC server crashed ...")` in its dispatcher thread) and blocks
forever when one goes silent. So every llama.cpp call that may talk to a server runs
in a worker thread (`call`), the calling thread waits for it with a bound, and an
abort callback turns the dispatcher's abort into `RpcError` in the caller: the
dispatcher thread is parked instead of aborting, the model that used it is dropped
unfreed (freeing it would talk to the dead server), and a later connection to the
same server uses a fresh dispatcher (`_spelling`)."""

from __future__ import annotations

import ctypes
import os
import re
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import llama_cpp

from specli.backend.system import init_backend
from specli.endpoints import Endpoint, parse_endpoints
from specli.errors import EXIT_RPC, RpcError

T = TypeVar("T")

# the RPC protocol of the llama.cpp this llama-cpp-python vendors (ggml-rpc.h); a
# server of another major version, or a newer minor one, cannot serve this client
PROTO_MAJOR, PROTO_MINOR = 7, 0
_CMD_HELLO = 14
_CAPS_SIZE = 24
PROBE_SECONDS = 5.0
DEVICE_GPU, DEVICE_IGPU = 1, 2

_LIB_DIR = Path(llama_cpp.__file__).parent / "lib"


def _lib(stem: str) -> ctypes.CDLL:
    """The copy of a ggml library that libllama was linked against. The wheel ships
    libX.so, libX.so.0, ... as separate files (wheels have no symlinks), each its own
    copy with its own globals once loaded: by SONAME, dlopen finds the one in use."""
    for name in (f"{stem}.so.0", str(_LIB_DIR / f"{stem}.so.0"), str(_LIB_DIR / f"{stem}.dylib"),
                 str(_LIB_DIR / f"{stem}.so")):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError(f"cannot load {stem} from {_LIB_DIR}")


_ggml = _lib("libggml")
_base = _lib("libggml-base")
_vp = ctypes.c_void_p
_ggml.ggml_backend_reg_by_name.argtypes, _ggml.ggml_backend_reg_by_name.restype = [ctypes.c_char_p], _vp
_ggml.ggml_backend_reg_get_proc_address.argtypes = [_vp, ctypes.c_char_p]
_ggml.ggml_backend_reg_get_proc_address.restype = _vp
_ggml.ggml_backend_reg_dev_count.argtypes, _ggml.ggml_backend_reg_dev_count.restype = [_vp], ctypes.c_size_t
_ggml.ggml_backend_reg_dev_get.argtypes, _ggml.ggml_backend_reg_dev_get.restype = [_vp, ctypes.c_size_t], _vp
_ggml.ggml_backend_dev_count.argtypes, _ggml.ggml_backend_dev_count.restype = [], ctypes.c_size_t
_ggml.ggml_backend_dev_get.argtypes, _ggml.ggml_backend_dev_get.restype = [ctypes.c_size_t], _vp
_ggml.ggml_backend_dev_type.argtypes, _ggml.ggml_backend_dev_type.restype = [_vp], ctypes.c_int
_ggml.ggml_backend_dev_by_type.argtypes, _ggml.ggml_backend_dev_by_type.restype = [ctypes.c_int], _vp
_ABORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_base.ggml_set_abort_callback.argtypes, _base.ggml_set_abort_callback.restype = [_ABORT_CB], _vp
_ADD_SERVER = ctypes.CFUNCTYPE(_vp, ctypes.c_char_p)
_START_SERVER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.POINTER(_vp))


def supported() -> bool:
    """Whether this llama.cpp build has the RPC backend (GGML_RPC=ON)."""
    init_backend()
    return bool(llama_cpp.llama_supports_rpc())


def has_local_gpu() -> bool:
    """A GPU on this machine (llama_supports_gpu_offload also says yes for RPC builds)."""
    init_backend()
    return bool(_ggml.ggml_backend_dev_by_type(DEVICE_GPU) or _ggml.ggml_backend_dev_by_type(DEVICE_IGPU))


def local_gpus() -> list[int]:
    """This machine's GPU devices, in llama.cpp's order."""
    init_backend()
    devs = [_ggml.ggml_backend_dev_get(i) for i in range(_ggml.ggml_backend_dev_count())]
    return [d for d in devs if _ggml.ggml_backend_dev_type(d) in (DEVICE_GPU, DEVICE_IGPU)]


def _proc(name: str) -> int:
    if not supported():
        raise RpcError("this llama.cpp build has no RPC backend",
                       "run scripts/setup.sh again (it builds llama-cpp-python with -DGGML_RPC=ON)")
    reg = _ggml.ggml_backend_reg_by_name(b"RPC")
    addr = _ggml.ggml_backend_reg_get_proc_address(reg, name.encode())
    if not addr:
        raise RpcError(f"llama.cpp's RPC backend has no {name}")
    return int(addr)


# -- the abort callback and bounded calls ---------------------------------------------
@dataclass
class _State:
    lost: str | None = None  # why the current connection is gone
    ever_lost: bool = False  # a parked thread exists: the process must leave with os._exit
    epoch: int = 0  # connections made after a loss use new dispatchers
    installed: bool = False


_state = _State()
_lock = threading.Lock()
_waiting: set[threading.Event] = set()


@_ABORT_CB
def _on_abort(message: bytes | None) -> None:
    lines = (message or b"").decode("utf-8", "replace").strip().splitlines()
    why = re.sub(r"^\S+:\d+: ", "", lines[-1]) if lines else "llama.cpp aborted"  # no source file:line
    if threading.current_thread() is threading.main_thread():
        # not reached through `call`: nothing to hand the error to, so leave cleanly
        sys.stdout.flush()
        os.write(2, f"\nerror: llama.cpp aborted: {why}\n".encode())
        os._exit(EXIT_RPC)
    with _lock:
        _state.lost = why
        _state.ever_lost = True
        for ev in _waiting:
            ev.set()
    while True:  # park this thread: returning would let llama.cpp abort the process
        time.sleep(3600)


def _install() -> None:
    if not _state.installed:
        _base.ggml_set_abort_callback(_on_abort)
        _state.installed = True


def ever_lost() -> bool:
    """A server was lost in this process: threads are parked in llama.cpp, so the
    process must end with os._exit (interpreter shutdown could wait on them)."""
    return _state.ever_lost


def reconnect() -> None:
    """Start over after a loss: later connections use new dispatchers."""
    with _lock:
        if _state.lost is not None:
            _state.lost = None
            _state.epoch += 1


def call(fn: Callable[[], T], what: str, timeout: float | None) -> T:
    """Run `fn` (a llama.cpp call that may talk to RPC servers) in a worker thread and
    wait at most `timeout` seconds (None: as long as the servers answer). Raises
    RpcError when a server is lost or silent; the call is then abandoned."""
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
        except BaseException:  # Ctrl-C: let the call end before the caller touches the model again
            done.wait(timeout)
            raise
    finally:
        with _lock:
            _waiting.discard(done)
    if "error" in box:
        raise box["error"]
    if "value" in box:
        return box["value"]  # type: ignore[no-any-return]
    with _lock:
        if _state.lost is None:
            _state.lost = f"no answer in {timeout:g} s"
            _state.ever_lost = True
        lost = _state.lost
    raise RpcError(f"{what}: lost the RPC server ({lost})" if finished else
                   f"{what}: no answer from the RPC server in {timeout:g} s",
                   "check the server and the network; output so far is kept")


# -- client ---------------------------------------------------------------------------
def probe(ep: Endpoint, timeout: float = PROBE_SECONDS) -> tuple[int, int, int]:
    """Connect and say HELLO as llama.cpp's client does; returns the server's protocol
    version. Raises RpcError naming the endpoint when it cannot serve this client."""
    try:
        with socket.create_connection((ep.host, ep.port), timeout=timeout) as s:
            s.sendall(struct.pack("<BQ", _CMD_HELLO, _CAPS_SIZE) + bytes(_CAPS_SIZE))
            head = _recv(s, 8)
            (size,) = struct.unpack("<Q", head)
            body = _recv(s, size) if 4 <= size <= 1024 else b""
    except TimeoutError:
        raise RpcError(f"RPC server {ep} did not answer in {timeout:g} s",
                       "it may be serving another client (one at a time) or be behind a firewall") from None
    except OSError as e:
        raise RpcError(f"cannot reach RPC server {ep}: {e.strerror or e}",
                       f"start it there with: specli rpc-server --host 0.0.0.0 --port {ep.port}") from None
    if len(body) < 4:
        raise RpcError(f"{ep} does not speak llama.cpp's RPC protocol", "check the host and port")
    major, minor, patch = body[0], body[1], body[2]
    if major != PROTO_MAJOR or minor > PROTO_MINOR:
        raise RpcError(
            f"RPC server {ep} speaks protocol {major}.{minor}.{patch}, this specli's llama.cpp {PROTO_MAJOR}.{PROTO_MINOR}",
            "run the same specli and llama-cpp-python version on every machine")
    return major, minor, patch


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionResetError(104, "the server closed the connection")
        out += chunk
    return out


def _spelling(ep: Endpoint) -> bytes:
    """The endpoint as handed to llama.cpp. It keeps one dispatcher per endpoint string
    for the life of the process, and the one of a lost connection is parked: after a
    loss, a leading zero on the port (read by std::stoi as the same port) gives a new one."""
    return f"{ep.host}:{'0' * _state.epoch}{ep.port}".encode()


def devices(endpoints: Sequence[str], timeout: float | None) -> list[int]:
    """llama.cpp devices of these servers, in order, each probed first."""
    eps = parse_endpoints(list(endpoints))
    for ep in eps:
        probe(ep)
    _install()
    add = _ADD_SERVER(_proc("ggml_backend_rpc_add_server"))
    out: list[int] = []
    for ep in eps:
        spelled = _spelling(ep)
        reg: int | None = call(lambda: add(spelled), f"connecting to {ep}", timeout)  # noqa: B023 - called now
        if not reg:
            raise RpcError(f"RPC server {ep} offers no device", "check the server's log")
        out += [_ggml.ggml_backend_reg_dev_get(reg, i) for i in range(_ggml.ggml_backend_reg_dev_count(reg))]
    return out


# -- server ---------------------------------------------------------------------------
def serve(ep: Endpoint, cache_dir: Path | None, threads: int) -> None:
    """Serve llama.cpp's RPC protocol on `ep` with this machine's GPUs (else its CPU);
    blocks until the process ends."""
    init_backend()
    start = _START_SERVER(_proc("ggml_backend_rpc_start_server"))
    devs = local_gpus() or [_ggml.ggml_backend_dev_by_type(0)]
    arr = (_vp * len(devs))(*devs)
    cache = str(cache_dir).encode() if cache_dir is not None else None
    start(str(ep).encode(), cache, threads, len(devs), arr)
