"""Stored responses (the Responses API's `store: true`): each response under its id, with
the conversation it ended (the messages as the chat template reads them), so that a
request naming it as `previous_response_id` goes on from there. The prompt cache keeps
the conversation's tokens; this keeps its text.

Bounded: at most `capacity` responses, the oldest dropped first; on disk (one JSON file
each, in the prompt cache's folder) when the prompt cache is, so they outlive a restart."""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_CAPACITY = 512
_ID = re.compile(r"resp_[A-Za-z0-9]{1,64}")


@dataclass(frozen=True)
class Stored:
    response: dict[str, Any]  # the response object as GET /v1/responses/{id} answers it
    messages: tuple[dict[str, Any], ...]  # the conversation up to and with this response's output


class ResponseStore:
    def __init__(self, folder: Path | None = None, capacity: int = DEFAULT_CAPACITY) -> None:
        self.folder, self.capacity = folder, capacity
        self._items: OrderedDict[str, Stored] = OrderedDict()
        self._lock = threading.Lock()
        self._n_files = 0  # on disk, as counted at start and kept since
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            self._n_files = sum(1 for _ in folder.glob("resp_*.json"))

    def put(self, rid: str, stored: Stored) -> None:
        with self._lock:
            self._items[rid] = stored
            self._items.move_to_end(rid)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        if self.folder is not None:
            path, tmp = self.folder / f"{rid}.json", self.folder / f".{rid}.tmp"
            self._n_files += not path.exists()
            tmp.write_text(json.dumps({"response": stored.response, "messages": stored.messages}), encoding="utf-8")
            os.replace(tmp, path)
            if self._n_files > self.capacity:  # the folder is read only when it holds too many
                self._trim_disk()

    def get(self, rid: str) -> Stored | None:
        """The stored response, or None (never stored, dropped, deleted, or not an id)."""
        if not _ID.fullmatch(rid):
            return None
        with self._lock:
            if rid in self._items:
                return self._items[rid]
        if self.folder is None:
            return None
        try:
            data = json.loads((self.folder / f"{rid}.json").read_text(encoding="utf-8"))
            return Stored(data["response"], tuple(data["messages"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def delete(self, rid: str) -> bool:
        if not _ID.fullmatch(rid):
            return False
        with self._lock:
            found = self._items.pop(rid, None) is not None
        if self.folder is not None:
            try:
                (self.folder / f"{rid}.json").unlink()
                found, self._n_files = True, self._n_files - 1
            except OSError:
                pass
        return found

    def _trim_disk(self) -> None:
        """Keep `capacity` files: those of the responses held in memory (the newest), then
        the newest of the rest (from before a restart)."""
        assert self.folder is not None
        with self._lock:
            kept = set(self._items)
        files = list(self.folder.glob("resp_*.json"))
        others = sorted((p for p in files if p.stem not in kept), key=_mtime)
        for old in others[:max(0, len(files) - self.capacity)]:
            old.unlink(missing_ok=True)
        self._n_files = sum(1 for _ in self.folder.glob("resp_*.json"))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
