"""The local model store: where model files live, their sha256 markers, and presence.

A model's file is ``<models_dir>/<name>.gguf``; beside it ``<name>.gguf.sha256`` caches
its hash, keyed by the file's size and mtime so any change voids it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol


class Expected(Protocol):
    """What a source checks its bytes against (registry.schema's ModelSpec has these)."""

    @property
    def name(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def sha256(self) -> str: ...


Progress = Callable[[str, int, int], None]
"""progress(stage_description, done_bytes, total_bytes); total 0 means unknown."""

MODELS_DIR_ENV = "SPECLI_MODELS_DIR"
CHUNK = 1 << 20  # 1 MiB per network/zip read and progress tick
HASH_CHUNK = 4 << 20
SHA_RE = re.compile(r"^[0-9a-f]{64}$")


class Reader(Protocol):
    def read(self, size: int, /) -> bytes: ...


class Writer(Protocol):
    def write(self, data: bytes, /) -> object: ...


class Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


def models_dir() -> Path:
    """$SPECLI_MODELS_DIR, else $XDG_CACHE_HOME/specli/models, else ~/.cache/specli/models."""
    env = os.environ.get(MODELS_DIR_ENV)
    if env:
        path = Path(env).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (
            Path(xdg).expanduser()
            if xdg and os.path.isabs(os.path.expanduser(xdg))
            else Path.home() / ".cache"
        )
        path = base / "specli" / "models"
    with contextlib.suppress(OSError):  # read-only is fine for lookups; pull() reports it
        path.mkdir(parents=True, exist_ok=True)
    return path


def model_path(spec: Expected) -> Path:
    return models_dir() / f"{spec.name}.gguf"


def marker_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def read_marker(path: Path, st: os.stat_result) -> str | None:
    """The cached sha256 of `path` if the marker matches its current size and mtime."""
    try:
        fields = marker_path(path).read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(fields) != 3 or not SHA_RE.match(fields[0]):
        return None
    if fields[1] != str(st.st_size) or fields[2] != str(st.st_mtime_ns):
        return None
    return fields[0]


def write_marker(path: Path, digest: str, st: os.stat_result) -> None:
    marker = marker_path(path)
    tmp = marker.with_name(f"{marker.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(f"{digest} {st.st_size} {st.st_mtime_ns}\n", encoding="ascii")
        os.replace(tmp, marker)
    except OSError:
        remove(tmp)  # a cache only: a read-only models dir just means re-hashing


def stream(
    src: Reader,
    h: Hasher,
    out: Writer | None = None,
    on_bytes: Callable[[int], None] | None = None,
    chunk: int = CHUNK,
) -> int:
    """Read `src` to the end in chunks, hashing each (and writing it to `out` if given);
    on_bytes(bytes so far) after each chunk. Returns the byte count."""
    n = 0
    while data := src.read(chunk):
        if out is not None:
            out.write(data)
        h.update(data)
        n += len(data)
        if on_bytes is not None:
            on_bytes(n)
    return n


def hash_file(path: Path, progress: Progress | None = None, stage: str = "") -> str:
    h = hashlib.sha256()
    total = path.stat().st_size

    def on_bytes(done: int) -> None:
        if progress is not None:
            progress(stage, done, total)

    with open(path, "rb") as f:
        stream(f, h, on_bytes=on_bytes, chunk=HASH_CHUNK)
    return h.hexdigest()


def actual_sha(path: Path, progress: Progress | None = None, stage: str = "") -> str | None:
    """sha256 of `path`, from the marker when it is current, else hashed (and cached)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    cached = read_marker(path, st)
    if cached is not None:
        return cached
    digest = hash_file(path, progress, stage)
    write_marker(path, digest, st)  # stat from before hashing: a change since voids it
    return digest


def is_present(spec: Expected, verify: bool = False) -> bool:
    """True if the model file exists with the registry size (and, with verify, sha256;
    the hash is cached in ``<file>.sha256`` keyed by size and mtime)."""
    path = model_path(spec)
    try:
        if not path.is_file() or path.stat().st_size != spec.size:
            return False
    except OSError:
        return False
    return not verify or actual_sha(path) == spec.sha256


def remove(path: Path) -> None:
    """Delete a file or directory tree if it is there; errors are ignored."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"
