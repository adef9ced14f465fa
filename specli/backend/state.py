"""Buffers for a sequence's saved KV state (the prompt cache's entries)."""

from __future__ import annotations

import mmap

StateBuffer = bytearray | mmap.mmap  # a sequence's saved state


def state_buffer(size: int) -> StateBuffer:
    """A writable buffer for a saved state. Past 1 MiB an anonymous mapping of its own, so
    that its memory goes back to the system when it is freed: glibc raises its mmap
    threshold to the size of the largest block freed, and then serves states of tens of
    MiB from a heap that keeps the pages (RSS grew 150 MiB past the cache's cap)."""
    return mmap.mmap(-1, size) if size >= 2**20 else bytearray(size)
