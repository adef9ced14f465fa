"""Prompt tokens from a conversation: through the model's chat template, or as raw text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from specli.errors import UsageError

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": text}


class PromptModel(Protocol):
    """What prompt building needs of a model (specli.backend.Model)."""

    chat_template: str | None

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]: ...

    def chat_tokens(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]: ...


def messages(history: Sequence[Message], user: str, system: str | None) -> list[Message]:
    """The system prompt (if any), the earlier turns, then the user's new message."""
    msgs = [{"role": "system", "content": system}] if system else []
    return [*msgs, *history, {"role": "user", "content": user}]


def prompt_tokens(
    model: PromptModel,
    user: str,
    history: Sequence[Message] = (),
    *,
    system: str | None = None,
    raw: bool = False,
) -> list[int]:
    """The tokens the model reads before replying to `user` after `history` (user and
    assistant messages, alternating). Through the chat template when the model has one
    and `raw` is off. Otherwise plain text: each earlier user text followed by its reply,
    turns separated by a blank line, no system prompt; with `raw` special tokens written
    in the text are parsed as such."""
    if not user.strip():
        raise UsageError("the prompt is empty", "pass some text, or - to read it from stdin")
    if raw or not model.chat_template:
        turns = [history[i]["content"] + history[i + 1]["content"] for i in range(0, len(history) - 1, 2)]
        return model.tokenize("\n\n".join([*turns, user]), add_special=True, parse_special=raw)
    return model.chat_tokens(messages(history, user, system))
