"""A prompt cache of several conversations, around llama.cpp sequences.

The target's KV cache (and the draft model's) holds one conversation: the live one. A
request that would throw a good part of it away saves it first, as an entry: each model's
sequence state (`llama_state_seq_get_data`) with its token list. A request restores the
entry that saves it the most prefill, when that beats what the live cache already
holds. Entries live in RAM, least recently used evicted first under a byte cap, and
spill to files (`cache_files`) that outlive the server; at exit every entry and the
live conversation are written there. llama-server's `--cache-ram` has the same shape
(PR 16391), which saves a slot's conversation where a request keeps less than half of
it; here also where it keeps most of it but drops an eighth (a new conversation on the
same system prompt and tools), and an entry that is a prefix of a newer one is dropped.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from specli.backend import Model, StateBuffer, available_memory, build_id, resolved_kernels
from specli.gguf import fingerprint
from specli.runtime.kv.cache_files import DiskStore, Header, Identity

MIN_ENTRY = 256  # tokens: a shorter conversation is prefilled again in a few seconds
# of the live conversation, what a request must drop for it to be saved: Claude Code's new
# conversations share 9.4k tokens of system prompt and tools and differ in their last 2.3k
# (20 %); a next turn drops less (the last answer, where it is rendered back otherwise)
SAVE_SHARE = 1 / 8
# tokens an entry must save over the live cache to be restored: a restore costs a few
# ms from RAM, a read of tens of MiB from disk; either is repaid by 64 tokens of prefill
MIN_GAIN = 64


class StatefulModel(Protocol):
    """What the cache needs of a loaded model (specli.backend.Model, or a slot's SeqModel)."""

    @property
    def tokens(self) -> list[int]: ...

    def save_state(self) -> StateBuffer: ...

    def load_state(self, data: StateBuffer, tokens: Sequence[int]) -> bool: ...

    def reset(self) -> None: ...


@dataclass
class Entry:
    """One saved conversation: in RAM (its states held), or on disk only."""

    id: str
    tokens: np.ndarray  # the target's, int32
    draft_tokens: list[int]
    nbytes: int
    target_state: StateBuffer | None = None
    draft_state: StateBuffer | None = None
    header: Header | None = None  # its file, where it has one
    used: int = 0
    name: str = ""

    @property
    def in_ram(self) -> bool:
        return self.target_state is not None


@dataclass(frozen=True)
class CacheUse:
    """What the cache did for one request."""

    source: str  # "ram" or "disk": an entry restored; "live": the live cache kept; "none"
    entry: str = ""
    n_restored: int = 0  # tokens of the prompt the restored entry held
    seconds: float = 0.0  # saving the live conversation and restoring the entry
    saved: str = ""  # the entry the live conversation was saved as, if it was

    def to_json(self) -> dict[str, object]:
        return {"source": self.source, "entry": self.entry or None, "restored_tokens": self.n_restored,
                "seconds": round(self.seconds, 4), "saved_entry": self.saved or None}


@dataclass
class CacheStats:
    hits: int = 0  # requests that restored an entry
    misses: int = 0  # requests that found no entry better than the live cache
    restored_tokens: int = 0
    saves: int = 0
    refused: int = 0  # entries llama.cpp or the file checks refused: recomputed
    ram_entries: int = 0
    ram_bytes: int = 0
    disk_entries: int = 0
    disk_bytes: int = 0
    ram_cap: int = 0
    disk_cap: int = 0


def worth_saving(n_live: int, n_kept: int) -> bool:
    """Whether a request keeping `n_kept` of the live conversation's `n_live` tokens
    drops enough of it to save it first (copying its state costs microseconds a token,
    prefilling it again tens of milliseconds)."""
    dropped = n_live - n_kept
    return dropped >= MIN_ENTRY and dropped >= SAVE_SHARE * n_live


def shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


@dataclass
class PromptCache:
    target: StatefulModel
    draft: StatefulModel | None
    ram_bytes: int
    disk: DiskStore | None = None
    entries: dict[str, Entry] = field(default_factory=dict)
    stats: CacheStats = field(default_factory=CacheStats)
    _clock: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _refused: int = 0  # states llama.cpp refused (the file checks count their own)

    def __post_init__(self) -> None:
        self.stats.ram_cap = self.ram_bytes
        if self.disk is not None:
            self.stats.disk_cap = self.disk.max_bytes
            for h in self.disk.scan():
                self.entries[h.id] = Entry(h.id, np.asarray(h.tokens, np.int32), h.draft_tokens, h.nbytes,
                                           header=h, used=next(self._clock), name=h.name)
        self._count()

    # -- a request -------------------------------------------------------------------
    def prepare(self, prompt: Sequence[int]) -> CacheUse:
        """Before `prompt` is prefilled: save the live conversation if the prompt would
        throw most of it away, and restore the entry that saves the most prefill."""
        t0 = time.perf_counter()
        want = np.asarray(prompt, np.int32)
        live = np.asarray(self.target.tokens, np.int32)
        n_live = shared_prefix(live, want)
        best, n_best = self._best(want)
        saved = ""
        restore = best is not None and n_best > n_live + MIN_GAIN
        if restore or worth_saving(len(live), n_live):
            saved = self.save_live()
            if restore:  # saving may have evicted it (from RAM to disk, or off the disk)
                best, n_best = self._best(want)
                restore = best is not None and n_best > n_live + MIN_GAIN
        if restore and best is not None and self._restore(best):
            self.stats.hits += 1
            self.stats.restored_tokens += n_best
            self._count()
            return CacheUse("disk" if best.header is not None and not best.in_ram else "ram", best.id, n_best,
                            time.perf_counter() - t0, saved)
        self.stats.misses += 1
        self._count()
        return CacheUse("live" if n_live else "none", "", 0, time.perf_counter() - t0, saved)

    def _best(self, want: np.ndarray) -> tuple[Entry | None, int]:
        best, n_best = None, 0
        for e in self.entries.values():
            n = shared_prefix(e.tokens, want)
            if n > n_best or n == n_best and best is not None and n and e.in_ram and not best.in_ram:
                best, n_best = e, n
        return best, n_best

    def _restore(self, e: Entry) -> bool:
        if e.in_ram:
            states = (e.target_state, e.draft_state)
        elif self.disk is None or e.header is None:
            self.entries.pop(e.id, None)
            return False
        else:
            states = self.disk.read(e.header)  # type: ignore[assignment]
            if states is None:  # corrupt or gone: dropped, the prompt is prefilled
                self.entries.pop(e.id, None)
                return False
        target_state, draft_state = states
        assert target_state is not None
        ok = self.target.load_state(target_state, e.tokens.tolist())
        if ok and self.draft is not None:
            if draft_state and e.draft_tokens:
                self.draft.load_state(draft_state, e.draft_tokens)  # refused: the draft model catches up
            else:
                self.draft.reset()
        if not ok:
            self._refused += 1
            self._drop(e)
            return False
        e.used = next(self._clock)
        return True

    # -- saving ------------------------------------------------------------------------
    def save_live(self, name: str = "") -> str:
        """Save the live conversation as an entry (unless an entry already holds it);
        its id, or "" where nothing was saved."""
        tokens = np.asarray(self.target.tokens, np.int32)
        if len(tokens) < (1 if name else MIN_ENTRY):
            return ""
        for e in list(self.entries.values()):
            n = shared_prefix(e.tokens, tokens)
            if n == len(tokens) and not name:  # already held, by it or a longer one
                e.used = next(self._clock)
                return ""
            if n == len(e.tokens) and not e.name:  # a prefix of this one: this one serves it
                self._drop(e)
        target_state, draft_state, draft_tokens = self._capture()
        entry_id = f"{time.time_ns():x}"
        self.entries[entry_id] = Entry(entry_id, tokens, draft_tokens, len(target_state) + len(draft_state),
                                       target_state, draft_state, used=next(self._clock), name=name)
        self.stats.saves += 1
        self._evict()
        self._count()
        return entry_id

    def _capture(self) -> tuple[StateBuffer, StateBuffer, list[int]]:
        """The live conversation's states (target, draft) and the draft model's tokens."""
        draft = self.draft
        draft_state = draft.save_state() if draft is not None and draft.tokens else bytearray()
        return self.target.save_state(), draft_state, list(draft.tokens) if draft is not None else []

    def _evict(self) -> None:
        """Least recently used entries leave RAM (to disk, where there is one) until the
        rest fit the cap."""
        in_ram = sorted((e for e in self.entries.values() if e.in_ram), key=lambda e: e.used)
        total = sum(e.nbytes for e in in_ram)
        while in_ram and total > self.ram_bytes:
            e = in_ram.pop(0)
            total -= e.nbytes
            self._spill(e)

    def _spill(self, e: Entry) -> None:
        if self.disk is not None and e.header is None and e.target_state is not None:
            e.header = self.disk.write(e.id, e.tokens.tolist(), e.draft_tokens, e.target_state,
                                       e.draft_state or bytearray(), e.name)
        e.target_state = e.draft_state = None
        if e.header is None:
            del self.entries[e.id]

    def _forget_evicted(self) -> None:
        """Entries whose files the disk's bound removed are gone (never restored, never
        counted as refused)."""
        if self.disk is None or not self.disk.evicted:
            return
        gone = set(self.disk.evicted)
        self.disk.evicted.clear()
        for e in [e for e in self.entries.values() if e.header is not None and e.header.path in gone]:
            e.header = None
            if not e.in_ram:
                del self.entries[e.id]

    def _drop(self, e: Entry) -> None:
        if e.header is not None and self.disk is not None:
            self.disk.remove(e.header)
        self.entries.pop(e.id, None)

    def named(self, name: str) -> Entry | None:
        return max((e for e in self.entries.values() if e.name == name), key=lambda e: e.used, default=None)

    def save_named(self, name: str, extra: dict[str, Any]) -> bool:
        """Keep the live conversation as `name` (replacing an older one), with `extra`,
        written to disk at once where there is one; False if there is no disk."""
        if self.disk is None:
            return False
        for e in [e for e in self.entries.values() if e.name == name]:
            self._drop(e)
        target_state, draft_state, draft_tokens = self._capture()
        entry_id = f"{time.time_ns():x}"
        header = self.disk.write(entry_id, list(self.target.tokens), draft_tokens, target_state, draft_state,
                                 name, extra)
        if header is None:
            return False
        self.entries[entry_id] = Entry(entry_id, np.asarray(self.target.tokens, np.int32), draft_tokens,
                                       header.nbytes, header=header, used=next(self._clock), name=name)
        self._count()
        return True

    def load_named(self, name: str) -> dict[str, Any] | None:
        """Restore the conversation saved as `name`; what was kept with it, or None where
        there is none (or its file was refused)."""
        e = self.named(name)
        if e is None or e.header is None:
            return None
        extra = e.header.extra
        return extra if self._restore(e) else None

    def close(self) -> None:
        """At exit: the live conversation and every entry in RAM go to disk."""
        if self.disk is None:
            return
        self.save_live()
        for e in sorted(self.entries.values(), key=lambda e: -e.used):  # the newest first, if it is cut short
            if e.in_ram:
                self._spill(e)
        self._count()

    def _count(self) -> None:
        self._forget_evicted()
        s = self.stats
        ram = [e for e in self.entries.values() if e.in_ram]
        s.ram_entries, s.ram_bytes = len(ram), sum(e.nbytes for e in ram)
        disk = [e for e in self.entries.values() if e.header is not None]
        s.disk_entries, s.disk_bytes = len(disk), sum(e.nbytes for e in disk)
        s.refused = self._refused + (self.disk.refused if self.disk is not None else 0)


@dataclass(frozen=True)
class CacheOptions:
    """serve's --cache-ram, --cache-dir, --cache-disk and --no-prompt-cache-disk."""

    ram_mib: int | None = None  # None: what fits beside the models (default_ram_bytes)
    dir: Path | None = None  # None: the user cache folder's specli/prompt-cache
    disk_mib: int | None = None  # None: default_disk_bytes
    disk: bool = True


DEFAULT_CAP_MIB = 8192  # llama-server's --cache-ram default


def default_dir() -> Path:
    """$SPECLI_PROMPT_CACHE_DIR, else specli/prompt-cache in the user cache folder."""
    if os.environ.get("SPECLI_PROMPT_CACHE_DIR"):
        return Path(os.environ["SPECLI_PROMPT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specli" / "prompt-cache"


def default_ram_bytes() -> int:
    """llama-server's 8 GiB, or half of the memory still available once the models are
    loaded, whichever is less: the rest stays for the KV cache's growth and the system."""
    available = available_memory()
    cap = DEFAULT_CAP_MIB * 2**20
    return cap if available is None else min(cap, available // 2)


def default_disk_bytes(folder: Path) -> int:
    """8 GiB, or a quarter of the free space on the cache's disk, whichever is less."""
    return min(DEFAULT_CAP_MIB * 2**20, shutil.disk_usage(folder).free // 4)


def identity(target: Model, draft: Model | None) -> Identity:
    def params(m: Model, who: str) -> list[tuple[str, str]]:
        flash, kv = resolved_kernels(m.opts)
        return [(f"{who}.n_ctx", str(m.n_ctx)), (f"{who}.kv", kv), (f"{who}.flash_attn", str(flash)),
                (f"{who}.exact", str(m.opts.exact_verify))]

    return Identity(fingerprint(target.path), fingerprint(draft.path) if draft is not None else "", build_id(),
                    tuple(params(target, "target") + (params(draft, "draft") if draft is not None else [])))


def open_prompt_cache(target: Model, draft: Model | None, opts: CacheOptions) -> PromptCache:
    ram = default_ram_bytes() if opts.ram_mib is None else opts.ram_mib * 2**20
    disk = None
    if opts.disk:
        folder = opts.dir or default_dir()
        folder.mkdir(parents=True, exist_ok=True)
        cap = default_disk_bytes(folder) if opts.disk_mib is None else opts.disk_mib * 2**20
        disk = DiskStore(folder, identity(target, draft), cap)
    return PromptCache(target, draft, ram, disk)
