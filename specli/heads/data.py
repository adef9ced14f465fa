"""The rows heads learn from: the target's own hidden states and greedy tokens.

Documents, in this order: the history store's outputs for the target's vocabulary (the
target's own answers: prefilled with features on, exact self-distillation), files the
user names (`--data`, read in windows), then answers the target writes itself to
specli's prompts (heads.prompts), greedily, one token a decode. Every row's label is
the target's argmax there, never the text's next token. Every tenth document is held
out (heads.rows.held_out, as online learning does).

Rows are written to <heads folder>/data/ a document at a time (hidden states in
float16), with a manifest of how many documents are done, so a stopped extraction
resumes where it stopped.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specli.backend import Model
from specli.heads.prompts import prompts
from specli.heads.rows import HELD_OUT_EVERY, Rows, held_out
from specli.history.store import documents

WINDOW = 1024  # tokens of context a text is read in
CHUNK = 256  # tokens a decode
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Doc:
    kind: str  # "history" | "file" | "generated"
    tokens: list[int]  # the text's tokens, or the prompt's (generated)


def docs(model: Model, data_files: Sequence[Path], seed: int = 0, max_doc: int = WINDOW) -> Iterator[Doc]:
    """Every document to learn from, in order (the generated ones never end)."""
    for doc in documents(model.vocab_key()):
        for start in range(0, len(doc), max_doc):
            if len(doc) - start >= 16:
                yield Doc("history", [int(t) for t in doc[start:start + max_doc]])
    for path in data_files:
        toks = model.tokenize(path.read_text(errors="replace"), add_special=False)
        for start in range(0, len(toks), max_doc):
            yield Doc("file", toks[start:start + max_doc])
    for text in prompts(seed):
        yield Doc("generated", model.chat_tokens([{"role": "user", "content": text}]))


def text_rows(model: Model, tokens: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input tokens, hidden states, the target's argmax) at every position of a text
    prefilled from an empty cache with features on."""
    model.reset()
    hidden, top = [], []
    for start in range(0, len(tokens), CHUNK):
        part = tokens[start:start + CHUNK]
        logits = model.decode(part, range(len(part)))
        top.append(logits.argmax(axis=1).astype(np.int32))
        hidden.append(model.hidden().astype(np.float16))
    return np.asarray(tokens, np.int32), np.concatenate(hidden), np.concatenate(top)


def answer_rows(model: Model, prompt: Sequence[int], max_new: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same for the target's own greedy answer to `prompt`: rows from the prompt's last
    token on (its row predicts the answer's first token)."""
    model.reset()
    if len(prompt) > 1:
        model.decode(prompt[:-1])
    toks, hidden, top = [], [], []
    tok = prompt[-1]
    for _ in range(max_new):
        logits = model.decode([tok], [0])
        toks.append(tok)
        hidden.append(model.hidden()[0].astype(np.float16))
        tok = int(logits[0].argmax())
        top.append(tok)
        if model.is_eog(tok) or model.n_past + 1 >= model.n_ctx:
            break
    return np.asarray(toks, np.int32), np.stack(hidden), np.asarray(top, np.int32)


class DataDir:
    """The extracted rows of one training, a file per document."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        try:
            self.manifest = json.loads((folder / MANIFEST).read_text())
        except (OSError, ValueError):
            self.manifest = {"docs": 0, "rows": 0, "by_kind": {}}

    @property
    def n_docs(self) -> int:
        return int(self.manifest["docs"])

    @property
    def n_rows(self) -> int:
        return int(self.manifest["rows"])

    def add(self, kind: str, tokens: np.ndarray, hidden: np.ndarray, top: np.ndarray) -> None:
        i = self.n_docs
        np.savez(self.folder / f"doc-{i:06d}.npz", tokens=tokens, hidden=hidden, top=top)
        m = self.manifest
        m["docs"], m["rows"] = i + 1, self.n_rows + len(top)
        m["by_kind"][kind] = m["by_kind"].get(kind, 0) + len(top)
        tmp = self.folder / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(m))
        os.replace(tmp, self.folder / MANIFEST)

    def load(self) -> tuple[Rows, Rows, list[np.ndarray]]:
        """(training rows, held-out rows, every document's input tokens)."""
        parts: dict[bool, list[Rows]] = {False: [], True: []}
        tokens = []
        for i in range(self.n_docs):
            with np.load(self.folder / f"doc-{i:06d}.npz") as z:
                parts[held_out(i)].append(Rows.document(z["tokens"], z["hidden"], z["top"]))
                tokens.append(z["tokens"])
        return Rows.join(parts[False]), Rows.join(parts[True]), tokens


def rows_before_held_out(model: Model, data_files: Sequence[Path], seed: int, max_new: int) -> int:
    """The most rows the documents before the first held-out one can give (each text's
    tokens; an answer the target writes, up to `max_new`): what a training must ask more
    than. Reads the history store and tokenizes the files; decodes nothing."""
    first = itertools.islice(docs(model, data_files, seed), HELD_OUT_EVERY - 1)
    return sum(max_new if doc.kind == "generated" else len(doc.tokens) for doc in first)


def extract(model: Model, data: DataDir, sources: Iterator[Doc], want_rows: int, max_new: int,
            progress: Callable[[int, str], None]) -> None:
    """Extract documents from `sources` (skipping those already done) until `data` holds
    `want_rows` rows; `progress(rows, kind)` after each document."""
    model.set_features(True)
    try:
        for i, doc in enumerate(sources):
            if data.n_rows >= want_rows:
                break
            if i < data.n_docs:
                continue
            if doc.kind == "generated":
                got = answer_rows(model, doc.tokens, max_new)
            else:
                got = text_rows(model, doc.tokens)
            data.add(doc.kind, *got)
            progress(data.n_rows, doc.kind)
    finally:
        model.set_features(False)


def fit_rows(model: Model, tokens: list[np.ndarray], vocab: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(hidden states, logits on `vocab`) for `n_rows` positions of the documents' tokens,
    decoded again with features on: what the lm_head on the reduced vocabulary is solved from."""
    hidden, logits, n = [], [], 0
    model.set_features(True)
    try:
        for doc in tokens:
            if n >= n_rows:
                break
            model.reset()
            for start in range(0, len(doc), CHUNK):
                part = [int(t) for t in doc[start:start + CHUNK]]
                z = model.decode(part, range(len(part)))
                logits.append(z[:, vocab].copy())
                hidden.append(model.hidden().astype(np.float32))
                n += len(part)
    finally:
        model.set_features(False)
    return np.concatenate(hidden), np.concatenate(logits)
