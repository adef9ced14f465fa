"""What identifies a model file cheaply, without reading its weights: the key that trained
heads and saved prompt-cache states are valid for."""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path


def fingerprint(path: Path) -> str:
    """What identifies a model file cheaply: its size, and the registry's sha256 beside
    it where there is one, else the sha256 of its first and last MiB (a GGUF's header
    names every tensor and its type)."""
    size = path.stat().st_size
    side = path.with_name(path.name + ".sha256")
    with contextlib.suppress(OSError):
        return f"{size}:{side.read_text().split()[0]}"
    h = hashlib.sha256()
    with path.open("rb") as f:
        h.update(f.read(2**20))
        f.seek(max(0, size - 2**20))
        h.update(f.read(2**20))
    return f"{size}:{h.hexdigest()}"
