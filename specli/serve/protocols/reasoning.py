"""A reasoning model's answer split into its thinking and its text: an answer that opens
with <think> is thinking up to </think>. For the protocols that return thinking apart
(Anthropic's thinking blocks, the Responses API's reasoning items)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from specli.serve.outcome import Delta, Outcome
from specli.serve.tools import ToolCall

OPEN_THINK, CLOSE_THINK = "<think>", "</think>"


def split_reasoning(text: str) -> tuple[str, str]:
    """(thinking, text) of an answer that opens with <think>; ("", text) otherwise."""
    head = text.lstrip()
    if not head.startswith(OPEN_THINK):
        return "", text
    inner, closed, rest = head[len(OPEN_THINK):].partition(CLOSE_THINK)
    return inner.strip(), rest.lstrip() if closed else ""


class ReasoningStream:
    """Streamed text split into ("thinking" | "text", piece): an answer opening with
    <think> is thinking up to </think>; text that may still be such a tag is held back."""

    def __init__(self, on: bool) -> None:
        self.state = "start" if on else "text"
        self.held = ""

    def push(self, delta: str) -> list[tuple[str, str]]:
        self.held += delta
        out: list[tuple[str, str]] = []
        if self.state == "start":
            head = self.held.lstrip()
            if OPEN_THINK.startswith(head):
                return out  # may still open
            if not head.startswith(OPEN_THINK):
                self.state = "text"
            else:
                self.state, self.held = "thinking", head[len(OPEN_THINK):].lstrip("\n")
        if self.state == "thinking":
            inner, closed, rest = self.held.partition(CLOSE_THINK)
            if not closed:
                keep = _partial_tail(self.held, CLOSE_THINK)
                piece, self.held = self.held[:len(self.held) - keep], self.held[len(self.held) - keep:]
                return [("thinking", piece)] if piece else []
            out.append(("thinking", inner.rstrip("\n")))
            self.state, self.held = "after", rest
        if self.state == "after":  # the blank lines between the reasoning and the answer
            self.held = self.held.lstrip()
            if self.held:
                self.state = "text"
        if self.state == "text" and self.held:
            out.append(("text", self.held))
            self.held = ""
        return [p for p in out if p[1]]

    def flush(self) -> list[tuple[str, str]]:
        kind = "thinking" if self.state == "thinking" else "text"
        held, self.held = self.held, ""
        return [(kind, held)] if held else []


def _partial_tail(text: str, tag: str) -> int:
    """Length of the longest end of `text` that begins `tag`."""
    return next((n for n in range(min(len(tag) - 1, len(text)), 0, -1) if text.endswith(tag[:n])), 0)


class ContentSink(Protocol):
    """A protocol's stream of content blocks (Messages' blocks, Responses' output items)."""

    def text(self, kind: str, piece: str) -> Iterable[bytes]: ...

    def tool_call(self, call: ToolCall) -> Iterable[bytes]: ...


def content_frames(item: Delta | Outcome, reasoning: ReasoningStream, sink: ContentSink) -> Iterator[bytes]:
    """A job's push as `sink`'s frames: its text split into thinking and text, then its
    finished tool calls (the final Outcome: what the reasoning split still held)."""
    for kind, piece in reasoning.push(item.text) if isinstance(item, Delta) else reasoning.flush():
        yield from sink.text(kind, piece)
    if isinstance(item, Delta):
        for _, call in item.calls:
            yield from sink.tool_call(call)
