"""`specli rpc-server`: this machine's CPU or GPUs served to `--rpc` clients over
llama.cpp's RPC protocol, in-process."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from specli.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, RpcError, Terminated, UsageError
from specli.rpc_endpoints import BadEndpoint, Endpoint, parse_endpoint

INSECURE_WARNING = (
    "WARNING: llama.cpp's RPC protocol has no authentication and no encryption. Anyone who can reach "
    "{ep} can run computations on this machine and read what it holds. Serve only on a trusted network, "
    "or bind to 127.0.0.1 and reach it through an SSH tunnel (ssh -L {port}:127.0.0.1:{port} HOST)."
)


def endpoint(host: str, port: int) -> Endpoint:
    """`host:port` with the host as an IPv4 address (llama.cpp's server takes no names)."""
    try:
        ep = parse_endpoint(f"{host}:{port}")
        return Endpoint(socket.gethostbyname(ep.host), ep.port)
    except BadEndpoint as e:
        raise UsageError(f"cannot serve on {host}:{port}: {e}", "give --host NAME_OR_IPV4 --port 1..65535") from None
    except OSError as e:
        raise UsageError(f"cannot serve on {host}:{port}: {e.strerror or e}", "give --host an IPv4 address") from None


def check_free(ep: Endpoint) -> None:
    """Refuse a port that is taken, before llama.cpp tries (it only logs the failure)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ep.host, ep.port))
        except OSError as e:
            raise RpcError(f"cannot listen on {ep}: {e.strerror or e}",
                           "pick another --port, or stop the program using it") from None


def run_server(host: str, port: int, threads: int | None, cache: Path | None,
               say: Callable[[str], None]) -> int:
    """Serve until Ctrl-C or SIGTERM; returns the exit code. The server runs in a
    thread so that signals reach Python; the process then ends with os._exit, since
    llama.cpp's accept loop cannot be stopped."""
    from specli.backend import default_threads, rpc

    ep = endpoint(host, port)
    if not rpc.supported():
        raise rpc.NO_RPC_BUILD
    check_free(ep)
    if cache is not None:
        cache = cache.expanduser()
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot use --cache {cache}: {e.strerror or e}") from None
    if not ep.is_local:
        say(INSECURE_WARNING.format(ep=ep, port=ep.port))
    n_threads = threads or default_threads()
    ended: list[BaseException] = []

    def work() -> None:
        try:
            rpc.serve(ep, cache, n_threads)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            ended.append(e)

    server = threading.Thread(target=work, name="specli-rpc-server", daemon=True)
    server.start()
    say(f"specli rpc-server on {ep} ({n_threads} threads{f', cache {cache}' if cache else ''}); Ctrl-C stops it")
    try:
        while server.is_alive():
            server.join(0.5)
    except Terminated:
        return _leave("terminated", EXIT_TERMINATED)
    except KeyboardInterrupt:
        return _leave("stopped", EXIT_INTERRUPTED)
    if ended and isinstance(ended[0], RpcError):
        raise ended[0]
    raise RpcError(f"the RPC server on {ep} stopped", "rerun with --debug to see llama.cpp's log")


def _leave(what: str, code: int) -> int:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.write(f"rpc-server {what}\n")
        sys.stderr.flush()
    os._exit(code)
