"""The prompt cache's files: one saved conversation state per file, under a folder per
model pair and context, bounded in bytes, oldest removed first.

A file is MAGIC, a 4-byte header length, a JSON header (format version, the identity
of the models and context it was made with, the token lists, the payload's sizes and
sha256), then the target's and the draft's sequence states. It is written to a
temporary name and renamed, so a reader never sees half of one. A file whose header
or payload does not match is refused (and removed), never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specli.backend import StateBuffer, state_buffer

FORMAT_VERSION = 1
STALE_TMP_S = 60.0  # a temporary file this old is no write in progress
MAGIC = b"SPECLIKV"
SUFFIX = ".kv"


@dataclass(frozen=True)
class Identity:
    """What a saved state is only valid for: the model files, the llama.cpp build and the
    context's parameters."""

    target: str
    draft: str
    build: str
    params: tuple[tuple[str, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "draft": self.draft, "build": self.build, "params": dict(self.params)}

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Header:
    id: str
    tokens: list[int]
    draft_tokens: list[int]
    target_bytes: int
    draft_bytes: int
    sha256: str
    name: str = ""
    path: Path = field(default=Path(), compare=False)
    extra: dict[str, Any] = field(default_factory=dict)  # what the saver keeps with it (a chat's turns)

    @property
    def nbytes(self) -> int:
        return self.target_bytes + self.draft_bytes


class DiskStore:
    """The files of one identity, and the byte bound over the whole cache folder."""

    def __init__(self, root: Path, identity: Identity, max_bytes: int) -> None:
        self.root, self.identity, self.max_bytes = root, identity, max_bytes
        self.dir = root / identity.key()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.refused = 0  # files found not matching, or corrupt: removed
        self.evicted: list[Path] = []  # files removed to keep the bound, for the cache to forget
        for tmp in self.dir.glob("*.tmp"):  # a write cut short (a server killed while saving)
            with contextlib.suppress(OSError):
                if time.time() - tmp.stat().st_mtime > STALE_TMP_S:
                    tmp.unlink()

    def scan(self) -> list[Header]:
        """The headers of this identity's files, oldest first; files that do not match are
        removed."""
        found: list[tuple[float, Header]] = []
        for path in self.dir.glob(f"*{SUFFIX}"):
            header = self._header(path)
            if header is None:
                self._refuse(path)
            else:
                found.append((path.stat().st_mtime, header))
        return [h for _, h in sorted(found, key=lambda x: x[0])]

    def write(self, entry_id: str, tokens: list[int], draft_tokens: list[int], target_state: StateBuffer,
              draft_state: StateBuffer, name: str = "", extra: dict[str, Any] | None = None) -> Header | None:
        """Write one entry atomically; None where it cannot fit the bound at all."""
        size = len(target_state) + len(draft_state)
        if size > self.max_bytes:
            return None
        digest = hashlib.sha256(target_state)
        digest.update(draft_state)
        header = Header(entry_id, list(tokens), list(draft_tokens), len(target_state), len(draft_state),
                        digest.hexdigest(), name, self.dir / f"{entry_id}{SUFFIX}", dict(extra or {}))
        head = json.dumps({"version": FORMAT_VERSION, "identity": self.identity.to_json(), "id": entry_id,
                           "name": name, "extra": header.extra, "tokens": header.tokens, "draft_tokens": header.draft_tokens,
                           "target_bytes": header.target_bytes, "draft_bytes": header.draft_bytes,
                           "sha256": header.sha256}, separators=(",", ":")).encode()
        self.make_room(size + len(head))
        tmp = header.path.with_suffix(".tmp")
        with tmp.open("wb") as f:
            f.write(MAGIC + struct.pack("<I", len(head)) + head)
            f.write(target_state)
            f.write(draft_state)
        os.replace(tmp, header.path)
        return header

    def read(self, header: Header) -> tuple[StateBuffer, StateBuffer] | None:
        """The states behind `header`; None (the file removed) where it is gone, truncated
        or corrupt."""
        try:
            with header.path.open("rb") as f:
                (n_head,) = struct.unpack("<I", f.read(len(MAGIC) + 4)[len(MAGIC):])
                f.seek(len(MAGIC) + 4 + n_head)
                target, draft = state_buffer(header.target_bytes), state_buffer(header.draft_bytes)
                ok = f.readinto(target) == len(target) and f.readinto(draft) == len(draft) and not f.read(1)
        except (OSError, struct.error):
            ok = False
        if ok:
            digest = hashlib.sha256(target)
            digest.update(draft)
            ok = digest.hexdigest() == header.sha256
        if not ok:
            self._refuse(header.path)
            return None
        with contextlib.suppress(OSError):
            os.utime(header.path)  # recently used: evicted last
        return target, draft

    def remove(self, header: Header) -> None:
        with contextlib.suppress(OSError):
            header.path.unlink()

    def used_bytes(self) -> int:
        return sum(p.stat().st_size for p in self._files())

    def make_room(self, size: int) -> None:
        """Remove the least recently used files in the whole cache folder (any identity)
        until `size` more bytes fit the bound."""
        files = sorted(self._files(), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in files)
        while files and total + size > self.max_bytes:
            p = files.pop(0)
            total -= p.stat().st_size
            with contextlib.suppress(OSError):
                p.unlink()
                self.evicted.append(p)

    def _files(self) -> list[Path]:
        return [p for p in self.root.glob(f"*/*{SUFFIX}") if p.is_file()]

    def _header(self, path: Path) -> Header | None:
        try:
            with path.open("rb") as f:
                if f.read(len(MAGIC)) != MAGIC:
                    return None
                (n_head,) = struct.unpack("<I", f.read(4))
                head = json.loads(f.read(n_head))
            if head.get("version") != FORMAT_VERSION or head.get("identity") != self.identity.to_json():
                return None
            size = len(MAGIC) + 4 + n_head + int(head["target_bytes"]) + int(head["draft_bytes"])
            if path.stat().st_size != size:
                return None
            return Header(str(head["id"]), [int(t) for t in head["tokens"]], [int(t) for t in head["draft_tokens"]],
                          int(head["target_bytes"]), int(head["draft_bytes"]), str(head["sha256"]),
                          str(head.get("name", "")), path, dict(head.get("extra") or {}))
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            return None

    def _refuse(self, path: Path) -> None:
        self.refused += 1
        with contextlib.suppress(OSError):
            path.unlink()
