"""Fill-in-the-middle: the prompt from the model's own FIM tokens, built as llama-server's
`/infill` builds it, and the stops an editor needs (a line indented less than the
cursor's, a time budget, the completion running into the code after the cursor).

The prompt (Qwen2.5-Coder's repo-level pattern, where the model has the separators):

    [FIM_REP]myproject\\n [FIM_SEP]filename0\\n extra chunk 0 ... [FIM_SEP]filename\\n
    [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]

with the prefix cut from its start to 3/4 of FIM_BATCH tokens, the suffix from its end to
the rest of a quarter, and the extra chunks' tail to what the context leaves."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specli.errors import UsageError
from specli.types import FimTokens

FIM_BATCH = 2048  # llama-server's default --batch-size, which sizes its FIM prompt
PROJECT, CURRENT_FILE = "myproject\n", "filename\n"  # llama-server's placeholders
EDITOR_STOPS = ("indent", "time", "suffix")  # a completion's finish reasons from EditorText
SNIPPET = "\n\n--- snippet ---\n\n"  # between extra chunks, for models without a file separator

Tokenize = Callable[[str], list[int]]  # text -> tokens, no BOS, special-token text left as text


@dataclass(frozen=True)
class FimFields:
    """What a fill-in-the-middle request gives: the code before and after the cursor,
    other files' text as (filename, text), and text the completion starts with."""

    prefix: str
    suffix: str
    extra: tuple[tuple[str, str], ...] = ()
    prompt: str = ""


def check_fim(fim: FimTokens, model_name: str) -> None:
    if fim.missing:
        raise UsageError(f"{model_name} cannot fill in the middle: its GGUF has no {', '.join(fim.missing)} token",
                         "use a fill-in-the-middle model (Qwen2.5-Coder, StarCoder2, CodeLlama, DeepSeek-Coder)")


def fim_prompt(tokenize: Tokenize, fim: FimTokens, f: FimFields, n_ctx: int, *, bos: int | None = None,
               n_predict: int = -1, prompt_tokens: Sequence[int] = (), spm: bool = False) -> list[int]:
    """The prompt's tokens, as llama-server's format_prompt_infill builds them
    (`prompt_tokens`: the `prompt` field's tokens, special tokens parsed; `bos` where
    the model adds one)."""
    assert fim.pre is not None and fim.suf is not None and fim.mid is not None
    extra: list[int] = []
    if fim.rep is not None:
        extra += [fim.rep, *tokenize(PROJECT)]
    for filename, text in f.extra:
        extra += [fim.sep, *tokenize(filename + "\n")] if fim.sep is not None else tokenize(SNIPPET)
        extra += tokenize(text)
    if fim.sep is not None:
        extra += [fim.sep, *tokenize(CURRENT_FILE)]
    prefix, suffix = tokenize(f.prefix), tokenize(f.suffix)
    n_prefix = min(len(prefix), 3 * (FIM_BATCH // 4))
    n_suffix = min(len(suffix), max(0, FIM_BATCH // 4 - (2 + len(prompt_tokens))))
    n_extra = min(max(0, n_ctx - FIM_BATCH - 2 * n_predict), len(extra))
    before = [fim.pre, *prefix[len(prefix) - n_prefix:], *prompt_tokens]
    after = [fim.suf, *suffix[:n_suffix]]
    first, second = (after, before) if spm else (before, after)
    head = [bos] if bos is not None else []
    return [*extra[len(extra) - n_extra:], *head, *first, *second, fim.mid]


class FimModel(Protocol):
    """What a fill-in-the-middle prompt needs of a model (backend.Model, SeqModel)."""

    vocab: Any
    n_ctx: int
    path: Path

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]: ...


def model_fim_prompt(model: FimModel, f: FimFields, n_predict: int = -1) -> list[int]:
    """`f` as `model`'s prompt (UsageError when it has no FIM tokens)."""
    fim = model.vocab.fim()
    check_fim(fim, model.path.name)
    info = model.vocab.info()
    return fim_prompt(lambda text: model.tokenize(text, add_special=False), fim, f, model.n_ctx,
                      bos=info.bos if info.add_bos else None, n_predict=n_predict,
                      prompt_tokens=model.tokenize(f.prompt, add_special=False, parse_special=True))


def first_code_line(suffix: str) -> str | None:
    """The suffix's first line with code (stripped), or None: a completion that writes it
    has run into the code after the cursor."""
    for line in suffix.splitlines():
        if line.strip():
            return line.strip()
    return None


@dataclass(frozen=True)
class EditorStops:
    """An editor's stops: `n_indent` (a new line indented less than that many columns,
    cut before it), `t_max_ms` (at a new line once the time is spent), and
    `suffix_line` (a line equal to the suffix's first line of code, cut before it)."""

    n_indent: int = 0
    t_max_ms: int = 0
    suffix_line: str | None = None

    @property
    def any(self) -> bool:
        return bool(self.n_indent or self.t_max_ms or self.suffix_line)

    def check(self, text: str, start: int = 0) -> tuple[int, str] | None:
        """(where to cut `text`, why: indent / suffix) once a line stops it; None while
        it goes on. As llama-server: a line indented less than n_indent (an empty line
        too) is cut after its indentation. `start`: where the first line not yet judged
        begins (lines before it went on)."""
        while True:
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            line = text[start:end]
            # a line is judged once anything but its indentation shows, its end included (so
            # an empty line ends it, as in llama-server); the cursor's own line never is
            if start > 0 and (line.lstrip(" \t") or end < len(text)):
                if self.n_indent and _indent(line) < self.n_indent:
                    return start + _indent(line), "indent"
                if self.suffix_line is not None and end < len(text) and line.strip() == self.suffix_line:
                    return start, "suffix"
            if end == len(text):
                return None
            start = end + 1


class EditorText:
    """A completion's text under an editor's stops, piece by piece: what may be sent now
    (a line that may still be cut is held back), and why it stopped. As llama-server,
    past t_max_ms it stops at the piece that writes a new line."""

    def __init__(self, stops: EditorStops, t_start: float) -> None:
        self.stops, self.t_start = stops, t_start
        self.text, self.sent = "", 0
        self.judged = 0  # where the line being written begins: the lines before it went on
        self.stopped: str | None = None  # indent, time or suffix
        self._hold = stops.n_indent > 0 or stops.suffix_line is not None

    def push(self, piece: str, now: float | None = None) -> str:
        """Take `piece`; the text that may be sent now (nothing once stopped)."""
        if self.stopped:
            return ""
        self.text += piece
        cut = self.stops.check(self.text, self.judged)  # each whole line is judged once
        self.judged = self.text.rfind("\n") + 1
        if cut is not None:
            self.text, self.stopped = self.text[:max(cut[0], self.sent)], cut[1]
        elif self.stops.t_max_ms and "\n" in piece and \
                ((now or time.perf_counter()) - self.t_start) * 1000 > self.stops.t_max_ms:
            self.stopped = "time"
        newline = self.text.rfind("\n")  # the cursor's line (no newline yet) is never cut: sent at once
        ready = len(self.text) if self.stopped or not self._hold or newline < 0 else newline + 1
        out, self.sent = self.text[self.sent:max(ready, self.sent)], max(ready, self.sent)
        return out

    def flush(self) -> str:
        """What was held back, at the end."""
        out, self.sent = self.text[self.sent:], len(self.text)
        return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))
