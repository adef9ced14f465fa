"""One OS thread for every llama.cpp decode of a process that decodes from several threads
(a server: its loading thread warms up and calibrates, its slots' threads decode in turns).

llama.cpp's CPU backend runs each graph on an OpenMP team of the calling thread; every
thread that ever decodes keeps a team of its own, and with a second team alive the decodes
of a 2-core machine slowed by a fifth to a third (the 1.5B Q4_K_M target's plain step at 1.7k
tokens: 41-44 ms from one thread, 51-55 ms from a thread after another had decoded; inside
`specli serve` 46-52 ms against llama-server's 33-37 ms, which decodes from one thread).
Off unless started: a one-thread program calls llama.cpp directly."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class _Call:
    __slots__ = ("fn", "done", "result", "error")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


_calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_start_lock = threading.Lock()


def _loop() -> None:
    while True:
        call = _calls.get()
        try:
            call.result = call.fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            call.error = e
        call.done.set()


def start() -> None:
    """From now on every `run` of this process happens on one thread."""
    global _thread
    with _start_lock:
        if _thread is None:
            _thread = threading.Thread(target=_loop, name="specli-decode", daemon=True)
            _thread.start()


def run(fn: Callable[[], T]) -> T:
    """`fn()` on the decode thread once started, else here."""
    if _thread is None or threading.current_thread() is _thread:
        return fn()
    call = _Call(fn)
    _calls.put(call)
    call.done.wait()
    if call.error is not None:
        raise call.error
    result: T = call.result
    return result
