"""A loaded model's text side: tokenizing, detokenizing, its chat template (a mixin of
backend.Model, which holds `vocab`, `chat_template` and `_vocab_key`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import jinja2

from specli.backend.vocab import StreamDetokenizer, Vocab
from specli.errors import ModelError, TemplateError

_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"  # private-use characters around message indices
_MARK_RE = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_CLOSE}")


class ModelText:
    vocab: Vocab
    chat_template: str | None
    _vocab_key: str | None
    path: Any

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.vocab.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: Iterable[int]) -> str:
        return self.vocab.detokenize(tokens)

    def vocab_key(self) -> str:
        """Equal for models that share token ids (keys the history store): a hash of the
        tokens' texts, read with the file's check, else asked of llama.cpp (0.26 s)."""
        if self._vocab_key is None:
            self._vocab_key = self.vocab.key()
        return self._vocab_key

    def stream_detokenizer(self) -> StreamDetokenizer:
        return StreamDetokenizer(self.vocab)

    def is_eog(self, token: int) -> bool:
        return self.vocab.is_eog(token)

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True,
                            tools: Sequence[dict[str, Any]] = ()) -> str:
        """Render the GGUF's own Jinja chat template, as llama-cpp-python does (with
        `tools`, OpenAI-style function tools, where the template reads them)."""
        if not self.chat_template:
            raise ModelError(
                f"{self.path.name} has no chat template", "use --raw to send the prompt as plain text"
            )
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        info = self.vocab.info()
        bos = self.vocab.token_text(info.bos).decode("utf-8", "replace") if info.bos >= 0 else ""
        eos = self.vocab.token_text(info.eos).decode("utf-8", "replace") if info.eos >= 0 else ""
        fmt = Jinja2ChatFormatter(self.chat_template, eos_token=eos, bos_token=bos,
                                  add_generation_prompt=add_generation_prompt)
        try:
            return fmt(messages=list(messages), tools=list(tools) or None).prompt  # type: ignore[arg-type]
        except jinja2.TemplateError as e:
            raise TemplateError(f"the model's chat template refused these messages: {e}",
                                "send the roles in the order the model's template expects") from None

    def chat_tokens(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True,
                    tools: Sequence[dict[str, Any]] = ()) -> list[int]:
        """Tokens of a rendered chat. The template's own special-token text becomes
        control tokens; the messages' text never does (a user typing "<|im_end|>" gets
        those characters, not an end of turn)."""
        marked = [dict(m, content=f"{_MARK_OPEN}{i}{_MARK_CLOSE}") if m.get("content") else m
                  for i, m in enumerate(messages)]
        text = self.apply_chat_template(marked, add_generation_prompt, tools)
        info = self.vocab.info()
        bos_text = self.vocab.token_text(info.bos).decode("utf-8", "replace") if info.bos >= 0 else ""
        add_bos = info.add_bos and not (bos_text and text.startswith(bos_text))
        toks: list[int] = [info.bos] if add_bos else []
        for i, part in enumerate(_MARK_RE.split(text)):
            if not part:
                continue
            if i % 2:  # a message's content
                toks += self.vocab.tokenize(messages[int(part)]["content"], add_special=False, parse_special=False)
            else:
                toks += self.vocab.tokenize(part, add_special=False, parse_special=True)
        return toks
