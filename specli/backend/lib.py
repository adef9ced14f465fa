"""llama.cpp itself: its log (kept for error messages) and its one-time initialisation."""

from __future__ import annotations

import collections
import ctypes
import os

import llama_cpp

# llama.cpp's log lines, kept for error messages; printed only when SPECLI_DEBUG is set.
_LOG_TAIL: collections.deque[str] = collections.deque(maxlen=64)


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    line = text.decode("utf-8", errors="replace")
    _LOG_TAIL.append(line)
    if os.environ.get("SPECLI_DEBUG"):
        os.write(2, text)


_initialised = False


def init_backend() -> None:
    """Route llama.cpp's log through specli and initialise it (once per process)."""
    global _initialised
    if not _initialised:
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _initialised = True


def last_log_error() -> str:
    """llama.cpp's latest logged error line, or "" (for error messages)."""
    for line in reversed(_LOG_TAIL):
        s = line.strip()
        if s and ("error" in s.lower() or "failed" in s.lower()):
            return s
    return ""
