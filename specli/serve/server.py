"""`specli serve`: checks, the network warning (serve/security.py), uvicorn in the main thread (so that
signals reach it), the generation thread beside it, and a clean end: SIGTERM or Ctrl-C
stop accepting, end the running generation at its next step, save the history store
and leave with 143 or 130."""

from __future__ import annotations

import contextlib
import signal
import socket
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import uvicorn
from rich.console import Console

from specli.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, SpecliError, UsageError
from specli.profiles import Settings
from specli.runtime import Runtime
from specli.runtime.kv.prompt_cache import CacheOptions
from specli.serve import DEFAULT_HOST, DEFAULT_MAX_BODY_MIB, DEFAULT_PORT, DEFAULT_QUEUE
from specli.serve.app import AppConfig, create_app
from specli.serve.jobs import RequestRecord
from specli.serve.security import exposure_warning, policy
from specli.serve.stats import ServerMetrics
from specli.serve.view import ServeDashboard, batch_split, log_line
from specli.serve.worker import Worker

EXIT_WAIT_S = 4.0  # after a signal: the longest wait for the running step before leaving anyway


@dataclass(frozen=True)
class ServeOptions:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    queue: int = DEFAULT_QUEUE
    max_body: int = int(DEFAULT_MAX_BODY_MIB * 2**20)
    dashboard: bool = False
    max_tokens_cap: int | None = None  # the server's --max-tokens, when one was given
    recalibrate: bool = False
    cache: CacheOptions | None = CacheOptions()  # None: no prompt cache
    parallel: int = 1  # slots
    aliases: tuple[str, ...] = ()  # --alias
    strict_model: bool = False
    park_idle: bool = True  # --park-idle
    heads_learn: int = 0  # --heads-learn: new rows between rounds (0: off)
    allowed_hosts: tuple[str, ...] = ()  # --allowed-hosts: Host names served besides the local ones
    cors_origins: str | None = None  # --cors-origins LIST|localhost|* (None: the page's own origin only)
    cors_methods: str | None = None
    cors_headers: str | None = None
    cors_credentials: bool = False


def check_listen(host: str, port: int) -> None:
    """Refuse an address that cannot be bound, before loading anything."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except (OSError, OverflowError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise UsageError(f"cannot listen on {host}:{port}: {why}",
                         "pick another --port, stop the program using it, or give a local --host") from None


def model_names(target: str) -> tuple[str, frozenset[str]]:
    """The model id clients see (the registry name, or the file's stem) and the other
    names a request may use for it."""
    path = Path(target)
    model_id = path.stem if target.endswith(".gguf") else target
    return model_id, frozenset({target, path.name, path.stem})


def run_serve(s: Settings, o: ServeOptions, console: Console) -> int:
    """Serve until SIGTERM or Ctrl-C; returns the exit code (loading errors raise)."""
    guard = policy(o.host, o.allowed_hosts, o.cors_origins, o.cors_methods, o.cors_headers, o.cors_credentials)
    check_listen(o.host, o.port)
    if (warning := exposure_warning(o.host, o.port, guard, bool(o.api_key))) is not None:
        console.print(warning, style="bold red", markup=False)
    stats = ServerMetrics()
    worker: Worker | None = None

    def status() -> str:
        waiting = worker.n_waiting if worker is not None else 0
        slots = worker.slots if worker is not None else None
        split = f"; last batch's rows by slot {batch_split(slots.stats.last, o.parallel)}" if slots else ""
        return (f"{sum(stats.requests.values())} served, {waiting} waiting; {stats.generation_tokens} tokens "
                f"generated, {stats.accepted_tokens}/{stats.draft_tokens} drafted accepted{split}")

    dash = ServeDashboard(console, status) if o.dashboard else None
    model_id, aliases = model_names(s.target)
    url = f"http://{o.host if ':' not in o.host else f'[{o.host}]'}:{o.port}/v1"
    server: _Server | None = None

    def record(r: RequestRecord) -> None:
        stats.add(r)
        if dash is not None:
            dash.record(r)
        else:
            console.print(log_line(r), markup=False, highlight=False, soft_wrap=True)

    def ready(rt: Runtime) -> None:
        for note in rt.notes:
            console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
        draft = f" + draft {rt.draft.name}" if rt.draft is not None else ""
        console.print(f"specli serve: {url} (model {model_id!r}: {rt.target.name}{draft}; drafter {s.drafter}, "
                      f"{o.parallel} slots, queue {o.queue}{', API key required' if o.api_key else ''}); Ctrl-C stops it",
                      markup=False, highlight=False, soft_wrap=True)

    def failed(e: BaseException) -> None:
        if server is not None:
            server.should_exit = True

    worker = Worker(s, o.queue, recalibrate=o.recalibrate, parallel=o.parallel, max_tokens_cap=o.max_tokens_cap,
                    cache=o.cache,
                    on_record=record,
                    on_progress=dash.progress if dash is not None else (lambda job, c: None),
                    on_ready=ready, on_failed=failed, park_idle=o.park_idle, heads_learn=o.heads_learn,
                    on_round=lambda r: console.print(r.line(), markup=False, highlight=False, soft_wrap=True),
                    on_stage=lambda text: console.print(f"specli serve: {text}", markup=False, highlight=False,
                                                       soft_wrap=True))
    app = create_app(worker, stats, AppConfig(model_id, aliases, listed=o.aliases, strict_model=o.strict_model,
                                              api_key=o.api_key, max_body=o.max_body, security=guard))
    config = uvicorn.Config(app, host=o.host, port=o.port, log_level="error", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=2, timeout_keep_alive=5, server_header=False)
    server = _Server(config, on_signal=lambda sig: worker.stop())
    console.print(f"specli serve: loading {s.target} on {url} (GET /health answers 503 until ready)",
                  markup=False, highlight=False, soft_wrap=True)
    worker.start()
    with dash if dash is not None else contextlib.nullcontext():
        server.run()
    worker.stop()
    if not worker.join(EXIT_WAIT_S) and not _wait_for_cache(worker, console) and worker.rt is not None:
        worker.rt.save_history()  # a step still runs in llama.cpp: keep what was served, then leave
    if isinstance(worker.error, SpecliError):
        raise worker.error
    if worker.error is not None and server.signal is None:
        raise worker.error
    if server.signal == signal.SIGTERM:
        console.print("specli serve: terminated", markup=False)
        return EXIT_TERMINATED
    if server.signal == signal.SIGINT:
        console.print("specli serve: stopped", markup=False)
        return EXIT_INTERRUPTED
    return 0


def _wait_for_cache(worker: Worker, console: Console) -> bool:
    """Whether the worker, past its last step and writing the prompt cache to disk (GBs
    at long contexts: tens of seconds), ended while waited for, saying so; a second
    Ctrl-C leaves at once, without what is not written yet."""
    if not worker.writing_cache:
        return False
    cache = worker.cache
    where = f" to {cache.disk.dir}" if cache is not None and cache.disk is not None else ""
    console.print(f"specli serve: writing the prompt cache{where} (Ctrl-C again leaves without the rest)",
                  markup=False, highlight=False, soft_wrap=True)
    t0 = time.perf_counter()
    try:
        done = worker.join()
    except KeyboardInterrupt:
        return False
    console.print(f"specli serve: prompt cache written in {time.perf_counter() - t0:.1f} s", markup=False)
    return done


class _Server(uvicorn.Server):
    """uvicorn's server with specli's signal handling: the first SIGINT/SIGTERM stops the
    worker and uvicorn gracefully, a second Ctrl-C forces it; nothing is re-raised after
    (the process leaves with its own exit code once the history is saved)."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[int], None]) -> None:
        super().__init__(config)
        self.on_signal = on_signal
        self.signal: int | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        old = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = sig
            self.on_signal(sig)
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True
