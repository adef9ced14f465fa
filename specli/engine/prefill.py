"""KV-cache reuse helpers (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix_len(cached: Sequence[int], tokens: Sequence[int]) -> int:
    """Number of leading tokens two sequences share."""
    n = min(len(cached), len(tokens))
    i = 0
    while i < n and cached[i] == tokens[i]:
        i += 1
    return i
