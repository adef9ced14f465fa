"""A persistent store of earlier outputs, one per vocabulary, with a suffix index over it.

File `<directory>/<vocab_key>.hist`, little-endian:
    header  magic b"SPECLIHS", u32 format version, u32 key length, u64 documents,
            u64 tokens, u32 crc32 of everything after the header
    key     the vocabulary key (utf-8)
    lengths int32 per document, oldest first
    tokens  int32, the documents one after another

Saving takes an exclusive flock on a side `.lock` file, re-reads the file, appends this
process's new documents, drops the oldest documents past the size cap, and replaces the
file atomically (temp file, fsync, os.replace); readers never lock. A damaged file is
reported in `notes`, read as empty, and rewritten on the next save.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import struct
import zlib
from pathlib import Path

import numpy as np

from specli.history.index import Continuation, SuffixIndex, Tokens

__all__ = ["Continuation", "HistoryStore", "SuffixIndex", "documents", "history_dir"]

MAGIC = b"SPECLIHS"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIIQQI")
_SUFFIX = ".hist"


class DamagedStore(Exception):
    """A store file that cannot be read back; the message says why."""


def history_dir() -> Path:
    """SPECLI_HISTORY_DIR, else the user cache dir's specli/history."""
    if override := os.environ.get("SPECLI_HISTORY_DIR"):
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specli" / "history"


def _stem(vocab_key: str) -> str:
    """The key itself when it is a safe file name, else its hash."""
    if re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}", vocab_key):
        return vocab_key
    return hashlib.blake2b(vocab_key.encode(), digest_size=16).hexdigest()


def read_store(path: Path) -> tuple[str, np.ndarray, np.ndarray]:
    """(vocab key, document lengths, tokens) of a store file; DamagedStore if it is not
    one, FileNotFoundError if there is none."""
    data = path.read_bytes()
    if len(data) < _HEADER.size:
        raise DamagedStore(f"truncated ({len(data)} bytes)")
    magic, version, key_len, n_docs, n_tokens, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise DamagedStore("not a history store (bad magic)")
    if version != FORMAT_VERSION:
        raise DamagedStore(f"format version {version}, expected {FORMAT_VERSION}")
    size = _HEADER.size + key_len + 4 * (n_docs + n_tokens)
    if size != len(data):
        raise DamagedStore(f"{len(data)} bytes where the header says {size}: truncated or damaged")
    body = memoryview(data)[_HEADER.size :]
    if zlib.crc32(body) != crc:
        raise DamagedStore("checksum mismatch")
    try:
        key = bytes(body[:key_len]).decode()
    except UnicodeDecodeError as err:
        raise DamagedStore("unreadable vocabulary key") from err
    lengths = np.frombuffer(data, "<i4", n_docs, _HEADER.size + key_len).astype(np.int64)
    tokens = np.frombuffer(data, "<i4", n_tokens, _HEADER.size + key_len + 4 * n_docs)
    if (n_docs and lengths.min() < 1) or int(lengths.sum()) != n_tokens or (n_tokens and tokens.min() < 0):
        raise DamagedStore("inconsistent document lengths or tokens")
    return key, lengths, tokens


def write_store(path: Path, vocab_key: str, lengths: np.ndarray, tokens: np.ndarray) -> None:
    """Write a store file atomically: a temp file beside it, fsync, os.replace."""
    key = vocab_key.encode()
    parts: list[bytes | memoryview] = [key, np.ascontiguousarray(lengths, "<i4").data, np.ascontiguousarray(tokens, "<i4").data]
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(_HEADER.pack(MAGIC, FORMAT_VERSION, len(key), len(lengths), len(tokens), crc))
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    try:  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _n_to_evict(lengths: np.ndarray, max_tokens: int) -> int:
    """How many of the oldest documents to drop so the rest hold at most max_tokens."""
    from_newest = np.cumsum(lengths[::-1])
    keep = int(np.searchsorted(from_newest, max_tokens, "right"))
    return len(lengths) - keep


def _read_own(path: Path, vocab_key: str) -> tuple[np.ndarray, np.ndarray]:
    """(document lengths, tokens) of the store file for `vocab_key`; DamagedStore if the
    file is not one or was written for another vocabulary."""
    key, lengths, tokens = read_store(path)
    if key != vocab_key:
        raise DamagedStore(f"written for vocabulary {key!r}")
    return lengths, tokens


def _split(lengths: np.ndarray, tokens: np.ndarray) -> list[np.ndarray]:
    return np.split(tokens, np.cumsum(lengths)[:-1]) if len(lengths) else []


def documents(vocab_key: str, directory: Path | None = None) -> list[np.ndarray]:
    """The stored outputs of models with `vocab_key`, oldest first (none if there is no
    store or it cannot be read)."""
    try:
        return _split(*_read_own((directory or history_dir()) / (_stem(vocab_key) + _SUFFIX), vocab_key))
    except (OSError, DamagedStore):
        return []


class HistoryStore:
    """A SuffixIndex persisted for one vocabulary under directory/<vocab_key>.hist."""

    def __init__(self, vocab_key: str, path: Path, max_tokens: int, index: SuffixIndex,
                 notes: list[str], rewrite: bool = False) -> None:
        self.vocab_key = vocab_key
        self.path = path
        self.max_tokens = max_tokens
        self.index = index
        self.notes = notes
        self.pending: list[np.ndarray] = []  # documents added since the last save
        self._rewrite = rewrite  # the file on disk is damaged: save even with nothing new

    @classmethod
    def open(cls, vocab_key: str, directory: Path | None = None,
             max_tokens: int = 10_000_000) -> HistoryStore:
        """The store for `vocab_key` (empty if there is none or it cannot be read)."""
        path = (directory or history_dir()) / (_stem(vocab_key) + _SUFFIX)
        notes: list[str] = []
        docs: list[np.ndarray] = []
        rewrite = False
        try:
            lengths, tokens = _read_own(path, vocab_key)
            drop = _n_to_evict(lengths, max_tokens)
            docs = _split(lengths, tokens)[drop:]
        except FileNotFoundError:
            pass
        except DamagedStore as err:
            notes.append(f"history store {path} is damaged ({err}); starting empty, rewritten on the next save")
            rewrite = True
        except OSError as err:
            notes.append(f"history store {path} cannot be read ({err}); starting empty")
        return cls(vocab_key, path, max_tokens, SuffixIndex(docs), notes, rewrite)

    def add(self, tokens: Tokens) -> None:
        """One more document, in the index now and in the file at the next save()."""
        doc = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if len(doc):
            self.index.add(doc)
            self.pending.append(doc)

    def save(self) -> None:
        """Append the pending documents to the file under an exclusive lock, keeping every
        document other processes saved before (bar the oldest, past max_tokens). A store
        that cannot be written costs only a note."""
        if not self.pending and not self._rewrite:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._append_locked()
            finally:
                os.close(fd)  # releases the lock
        except OSError as err:
            self.notes.append(f"history store {self.path} not saved ({err})")
            return
        self.pending.clear()
        self._rewrite = False

    def _append_locked(self) -> None:
        old_lengths = np.zeros(0, dtype=np.int64)
        old_tokens = np.zeros(0, dtype=np.int32)
        try:
            old_lengths, old_tokens = _read_own(self.path, self.vocab_key)
        except FileNotFoundError:
            pass
        except DamagedStore as err:
            if not self._rewrite:
                self.notes.append(f"history store {self.path} is damaged ({err}); rewritten")
        lengths = np.concatenate([old_lengths, [len(d) for d in self.pending]]).astype(np.int64)
        tokens = np.concatenate([old_tokens, *self.pending]).astype(np.int32)
        drop = _n_to_evict(lengths, self.max_tokens)
        write_store(self.path, self.vocab_key, lengths[drop:], tokens[int(lengths[:drop].sum()) :])

    def stats(self) -> dict[str, int | str]:
        """This store as held in memory (pending documents included), and its file."""
        return {
            "path": str(self.path),
            "vocab_key": self.vocab_key,
            "n_documents": self.index.n_documents,
            "n_tokens": self.index.n_tokens,
            "pending_documents": len(self.pending),
            "file_bytes": self.path.stat().st_size if self.path.exists() else 0,
            "max_tokens": self.max_tokens,
        }

    @staticmethod
    def clear(directory: Path | None = None) -> int:
        """Delete every store file (and stray temp files) there; how many stores went."""
        directory = directory or history_dir()
        if not directory.is_dir():
            return 0
        for tmp in directory.glob(f"*{_SUFFIX}.tmp-*"):
            tmp.unlink(missing_ok=True)
        removed = 0
        for path in directory.glob(f"*{_SUFFIX}"):
            path.unlink(missing_ok=True)
            removed += 1
        return removed

    @staticmethod
    def all_stats(directory: Path | None = None) -> list[dict[str, int | str]]:
        """One entry per store file there, checked in full; status 'ok' or why not."""
        directory = directory or history_dir()
        out: list[dict[str, int | str]] = []
        for path in sorted(directory.glob(f"*{_SUFFIX}")) if directory.is_dir() else []:
            entry: dict[str, int | str] = {"path": str(path), "vocab_key": path.stem, "n_documents": 0,
                                           "n_tokens": 0, "file_bytes": 0}
            try:
                entry["file_bytes"] = path.stat().st_size
                key, lengths, tokens = read_store(path)
                entry.update(vocab_key=key, n_documents=len(lengths), n_tokens=len(tokens), status="ok")
            except (DamagedStore, OSError) as err:
                entry["status"] = f"damaged: {err}"
            out.append(entry)
        return out
