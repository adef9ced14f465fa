"""llama.cpp's RPC backend: `rpc-server`s as offload devices (probed first), and
serving one. Calls that talk to servers are bounded by specli.backend.bounded."""

from __future__ import annotations

import ctypes
import functools
import socket
import struct
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import llama_cpp

from specli.backend import bounded
from specli.backend.lib import init_backend
from specli.errors import RpcError
from specli.rpc_endpoints import Endpoint, parse_endpoints

# the RPC protocol of the llama.cpp this llama-cpp-python vendors (ggml-rpc.h); a
# server of another major version, or a newer minor one, cannot serve this client
PROTO_MAJOR, PROTO_MINOR = 7, 0
_CMD_HELLO = 14
_CAPS_SIZE = 24
PROBE_SECONDS = 5.0
DEVICE_CPU, DEVICE_GPU, DEVICE_IGPU = 0, 1, 2
NO_RPC_BUILD = RpcError("this llama.cpp build has no RPC backend",
                        "run scripts/setup.sh again (it builds llama-cpp-python with -DGGML_RPC=ON)")


def _lib(lib_dir: Path, stem: str) -> ctypes.CDLL:
    """The copy of a ggml library that libllama was linked against. The wheel ships
    libX.so, libX.so.0, ... as separate files (wheels have no symlinks), each its own
    copy with its own globals once loaded: by SONAME, dlopen finds the one in use."""
    for name in (f"{stem}.so.0", str(lib_dir / f"{stem}.so.0"), str(lib_dir / f"{stem}.dylib"),
                 str(lib_dir / f"{stem}.so")):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError(f"cannot load {stem} from {lib_dir}")


@functools.cache
def _c() -> SimpleNamespace:
    """ggml's device registry and abort hook, bound on first use."""
    init_backend()
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    ggml, base, vp, size = _lib(lib_dir, "libggml"), _lib(lib_dir, "libggml-base"), ctypes.c_void_p, ctypes.c_size_t
    for fn, args, res in (("ggml_backend_reg_by_name", [ctypes.c_char_p], vp),
                          ("ggml_backend_reg_get_proc_address", [vp, ctypes.c_char_p], vp),
                          ("ggml_backend_reg_dev_count", [vp], size),
                          ("ggml_backend_reg_dev_get", [vp, size], vp),
                          ("ggml_backend_dev_count", [], size),
                          ("ggml_backend_dev_get", [size], vp),
                          ("ggml_backend_dev_type", [vp], ctypes.c_int),
                          ("ggml_backend_dev_by_type", [ctypes.c_int], vp)):
        getattr(ggml, fn).argtypes, getattr(ggml, fn).restype = args, res
    base.ggml_set_abort_callback.argtypes = [bounded.ABORT_CALLBACK]
    base.ggml_set_abort_callback.restype = vp
    return SimpleNamespace(ggml=ggml, base=base)


def supported() -> bool:
    """Whether this llama.cpp build has the RPC backend (GGML_RPC=ON)."""
    init_backend()
    return bool(llama_cpp.llama_supports_rpc())


def has_local_gpu() -> bool:
    """A GPU on this machine (llama_supports_gpu_offload also says yes for RPC builds)."""
    g = _c().ggml
    return bool(g.ggml_backend_dev_by_type(DEVICE_GPU) or g.ggml_backend_dev_by_type(DEVICE_IGPU))


def local_gpus() -> list[int]:
    """This machine's GPUs as llama.cpp adds them to a model: discrete ones, or the
    integrated ones when there is none."""
    g = _c().ggml
    devs = [g.ggml_backend_dev_get(i) for i in range(g.ggml_backend_dev_count())]
    gpus = [d for d in devs if g.ggml_backend_dev_type(d) == DEVICE_GPU]
    return gpus or [d for d in devs if g.ggml_backend_dev_type(d) == DEVICE_IGPU]


def _proc(name: str, signature: type) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    if not supported():
        raise NO_RPC_BUILD
    g = _c().ggml
    addr = g.ggml_backend_reg_get_proc_address(g.ggml_backend_reg_by_name(b"RPC"), name.encode())
    if not addr:
        raise RpcError(f"llama.cpp's RPC backend has no {name}")
    return signature(addr)  # type: ignore[no-any-return]


# -- client ---------------------------------------------------------------------------
def probe(ep: Endpoint, timeout: float = PROBE_SECONDS) -> tuple[int, int, int]:
    """Connect and say HELLO as llama.cpp's client does; returns the server's protocol
    version. Raises RpcError naming the endpoint when it cannot serve this client."""
    try:
        with socket.create_connection((ep.host, ep.port), timeout=timeout) as s:
            s.sendall(struct.pack("<BQ", _CMD_HELLO, _CAPS_SIZE) + bytes(_CAPS_SIZE))
            (size,) = struct.unpack("<Q", _recv(s, 8))
            body = _recv(s, size) if 4 <= size <= 1024 else b""
    except socket.gaierror as e:
        raise RpcError(f"cannot resolve the RPC server's host {ep.host!r}: {e.strerror or e}",
                       "check the name, or give its IPv4 address") from None
    except TimeoutError:
        raise RpcError(f"RPC server {ep} did not answer in {timeout:g} s",
                       "it may be serving another client (one at a time) or be behind a firewall") from None
    except OSError as e:
        raise RpcError(f"cannot reach RPC server {ep}: {e.strerror or e}",
                       f"start it there with: specli rpc-server --port {ep.port} (see README: security)") from None
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


def probe_all(endpoints: Sequence[str]) -> None:
    """Probe every endpoint not yet connected in this process's current epoch (a server
    serves one client at a time: one this process already uses would not answer)."""
    for ep in parse_endpoints(list(endpoints)):
        if not bounded.connected(str(ep)):
            probe(ep)


def spelling(ep: Endpoint) -> bytes:
    """The endpoint as handed to llama.cpp. It keeps one dispatcher per endpoint string
    for the life of the process, and those of a lost connection are parked: after a
    loss, leading zeros on the port (std::stoi reads the same port) give new ones."""
    return f"{ep.host}:{'0' * bounded.epoch()}{ep.port}".encode()


def devices(endpoints: Sequence[str], timeout: float) -> list[int]:
    """llama.cpp devices of these servers, in order, each probed first. The servers are
    never registered globally, so a model loaded without them stays local."""
    probe_all(endpoints)
    bounded.install(_c().base.ggml_set_abort_callback)
    add = _proc("ggml_backend_rpc_add_server", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p))
    g = _c().ggml
    out: list[int] = []
    for ep in parse_endpoints(list(endpoints)):
        spelled = spelling(ep)
        reg: int | None = bounded.call(lambda: add(spelled), f"connecting to {ep}", timeout)  # noqa: B023
        if not reg:
            raise RpcError(f"RPC server {ep} offers no device", "check the server's log")
        bounded.add_connected(str(ep))
        out += [g.ggml_backend_reg_dev_get(reg, i) for i in range(g.ggml_backend_reg_dev_count(reg))]
    return out


# -- server ---------------------------------------------------------------------------
def serve(ep: Endpoint, cache_dir: Path | None, threads: int) -> None:
    """Serve llama.cpp's RPC protocol on `ep` (an IPv4 address) with this machine's GPUs,
    else its CPU; blocks until the process ends."""
    start = _proc("ggml_backend_rpc_start_server", ctypes.CFUNCTYPE(
        None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)))
    devs = local_gpus() or [_c().ggml.ggml_backend_dev_by_type(DEVICE_CPU)]
    arr = (ctypes.c_void_p * len(devs))(*devs)
    start(str(ep).encode(), str(cache_dir).encode() if cache_dir is not None else None, threads, len(devs), arr)
