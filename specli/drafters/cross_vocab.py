"""A draft model of another vocabulary drafts text: its tokens become bytes, and those
bytes become target tokens (transformers' Universal Assisted Decoding; llama.cpp's
`--spec-replace` is the same idea with a fixed table).

The draft's cache follows the text, not token ids: before each proposal the draft tokens
whose bytes are still a prefix of the target's text are kept, and only the text after
them is tokenized for the draft and decoded, so the context is never read again. The
draft drafts greedily; only the target tokens of its text whose tokenization cannot
change are proposed (the last one could merge with what follows, so it is left out, but
for an end of turn). Under sampling each proposal is a point mass, which rejection
sampling with the residual keeps lossless, as for lookups.

The prompt reaches the draft in its own chat template where the runtime rendered one
(`prompts`); otherwise as the target's text with special tokens mapped by role (BOS,
end of turn) and control tokens spelled out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from specli.engine.grammar import Constraint
from specli.engine.prefill import common_prefix_len
from specli.types import Draft, Drafter, LanguageModel, VocabInfo

EXTRA_DRAFT_STEPS = 1  # a draft token beyond k: the last target token is left out


class TokenText(Protocol):
    """What the drafter reads of a tokenizer (backend.Vocab)."""

    def info(self) -> VocabInfo: ...

    def piece(self, token: int) -> bytes: ...

    def spelled(self, token: int) -> bytes: ...


class TextModel(LanguageModel, Protocol):
    @property
    def vocab(self) -> TokenText: ...

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]: ...


def complete_utf8(data: bytes | bytearray) -> int:
    """Length of the longest prefix of `data` that ends on a whole UTF-8 character."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b < 0x80:
            return n
        if b >= 0xC0:  # a lead byte: whole if its sequence fits
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return n if back >= need else n - back
    return n


def spelled_prefix(text: bytes | bytearray, pieces: Sequence[bytes], n: int = 0, at: int = 0) -> tuple[int, int]:
    """How many of `pieces`, from the n-th (whose bytes start at `at`), go on spelling
    `text` byte for byte, and where the last of them ends: (count, byte offset)."""
    while n < len(pieces) and text[at:at + len(pieces[n])] == pieces[n]:
        at += len(pieces[n])
        n += 1
    return n, at


class TextTokens:
    """One tokenizer's side of the text: bytes to tokens and back, the space some
    SentencePiece vocabularies put before a text's first word undone."""

    def __init__(self, model: TextModel) -> None:
        self.model = model
        self.info = model.vocab.info()
        probe = model.tokenize("a", add_special=False)
        self.space_prefix = b"".join(model.vocab.piece(t) for t in probe) == b" a"

    def tokens(self, data: bytes) -> tuple[list[int], list[bytes]]:
        """Tokens of `data` (no BOS) with the bytes each covers; where the tokenizer adds a
        leading space, the first token's bytes are counted without it."""
        text = data.decode("utf-8", errors="replace")
        if self.space_prefix and text.startswith(" "):
            text = text[1:]  # the tokenizer puts it back
        toks = self.model.tokenize(text, add_special=False, parse_special=False) if text else []
        pieces = [self.model.vocab.piece(t) for t in toks]
        if self.space_prefix and pieces and pieces[0].startswith(b" ") and not data.startswith(b" "):
            pieces[0] = pieces[0][1:]
        return toks, pieces

    def end_of_turn(self) -> int:
        return self.info.eot if self.info.eot >= 0 else self.info.eos


def role_mapped(tokens: Sequence[int], source: TextModel, dest: TextModel) -> list[int]:
    """`tokens` of `source` as `dest` tokens: BOS by `dest`'s own rule, ends of turn as
    `dest`'s, control tokens spelled out (the same spelling becomes `dest`'s control
    token where it has one, as ChatML's `<|im_start|>` in Qwen and SmolLM2)."""
    s_info, d_info = source.vocab.info(), dest.vocab.info()
    d_eot = d_info.eot if d_info.eot >= 0 else d_info.eos
    out: list[int] = [d_info.bos] if d_info.add_bos and d_info.bos >= 0 else []
    chunk = bytearray()

    def flush() -> None:
        if chunk:
            out.extend(dest.tokenize(chunk.decode("utf-8", errors="replace"), add_special=False, parse_special=True))
            chunk.clear()

    for t in tokens:
        if t == s_info.bos:
            continue
        if source.is_eog(t):
            flush()
            if d_eot >= 0:
                out.append(d_eot)
            continue
        chunk += source.vocab.spelled(t)
    flush()
    return out


class CrossVocabDrafter(Drafter):
    name = "draft"

    def __init__(self, model: TextModel, target: TextModel,
                 prompts: Mapping[tuple[int, ...], list[int]] | None = None) -> None:
        """`prompts`: the draft's own rendering of prompts the runtime rendered for the
        target (target tokens -> draft tokens)."""
        self.model = model
        self.target = target
        self.prompts = prompts if prompts is not None else {}
        self.draft_text = TextTokens(model)
        self.target_text = TextTokens(target)
        self.catch_up_seconds = 0.0
        self.step_seconds: list[float] = []
        self._prompt: list[int] = []  # the draft's tokens of the generation's prompt
        self._t_start = 0  # target tokens of that prompt
        self._text = bytearray()  # the target's text since the prompt
        self._n_text = 0  # history tokens read into _text
        self._gen: list[int] = []  # draft tokens after the prompt the cache should hold
        self._gen_bytes: list[bytes] = []  # the bytes of each
        self._held = 0  # bytes of _text the draft's tokens hold at the last proposal
        self._checked = (0, 0)  # draft tokens (and their bytes) known to spell the text's start

    @property
    def decode_seconds(self) -> float:
        return self.model.decode_seconds

    def constrain(self, constraint: Constraint | None, take_forced: bool = True) -> None:
        """Drafts under a grammar are cut by the engine, as a lookup's are."""

    def begin(self, history: Sequence[int]) -> None:
        self._prompt = list(self.prompts.get(tuple(history)) or role_mapped(history, self.target, self.model))
        self._t_start = self._n_text = len(history)
        self._text = bytearray()
        self._gen, self._gen_bytes, self._held, self._checked = [], [], 0, (0, 0)
        self.model.rollback(min(common_prefix_len(self.model.tokens, self._prompt), len(self._prompt)))

    def lag(self, history: Sequence[int]) -> int:
        """Tokens the draft's cache lacks: its prompt's, and the target's text it has not read."""
        behind_prompt = max(0, len(self._prompt) - self.model.n_past)
        return behind_prompt + max(1, len(history) - self._n_text) + (len(self._text) > self._held)

    def _read(self, history: Sequence[int]) -> None:
        """The target's text grows by the tokens emitted since the last call."""
        for t in history[self._n_text:]:
            self._text += self.target.vocab.piece(t)
        self._n_text = len(history)

    def _sync(self) -> list[int]:
        """Keep the draft tokens whose bytes still prefix the text; the rest of the text
        (whole characters) tokenized for the draft. Returns the tokens to decode. Only
        what changed since the last call is looked at: the text only grows."""
        text = self._text
        keep, at = spelled_prefix(text, self._gen_bytes, *self._checked)
        del self._gen[keep:], self._gen_bytes[keep:]
        self._checked = (keep, at)
        end = complete_utf8(text)
        toks, pieces = self.draft_text.tokens(bytes(text[at:end])) if end > at else ([], [])
        self._gen += toks
        self._gen_bytes += pieces
        self._held = at + sum(map(len, pieces))
        m, n_prompt = self.model, len(self._prompt)
        if m.n_past > n_prompt:
            m.rollback(n_prompt + common_prefix_len(m.tokens[n_prompt:], self._gen))
        want = [*self._prompt[m.n_past:], *self._gen[max(0, m.n_past - n_prompt):]]
        if not want and m.n_past > 0:  # the text ends where the cache does: its last row again
            last = m.tokens[-1]
            m.rollback(m.n_past - 1)
            want = [last]
        return want

    def propose(self, history: Sequence[int], k: int) -> Draft:
        self._read(history)
        self.catch_up_seconds = 0.0
        self.step_seconds = []
        pending = self._sync()
        m = self.model
        if k <= 0 or not pending or m.n_past + len(pending) + k + EXTRA_DRAFT_STEPS > m.n_ctx:
            return Draft(source=self.name)
        t0 = m.decode_seconds
        logits = m.decode(pending, [len(pending) - 1])[0]
        self.catch_up_seconds = m.decode_seconds - t0
        drafted, ended = self._draft(logits, k + EXTRA_DRAFT_STEPS)
        tokens = self._target_tokens(drafted, ended, k)
        # auto prices a draft model per token it proposes: the draft steps' time spread over the
        # target tokens they gave (more draft steps than target tokens; all of it where none)
        spent = sum(self.step_seconds)
        self.step_seconds = [spent / len(tokens)] * len(tokens) if tokens else [spent]
        return Draft(tokens, None, self.name)

    def _draft(self, logits: np.ndarray, n: int) -> tuple[bytes, bool]:
        """Up to n greedy draft tokens: their bytes, and whether the draft ended its turn."""
        m = self.model
        out = bytearray()
        for i in range(n):
            tok = int(logits.argmax())
            if m.is_eog(tok):
                return bytes(out), True
            piece = m.vocab.piece(tok)
            out += piece
            if i + 1 == n:  # not decoded, so not in the cache: the next sync reads it from the text if accepted
                break
            self._gen.append(tok)
            self._gen_bytes.append(piece)
            t0 = m.decode_seconds
            logits = m.decode([tok], [0])[0]
            self.step_seconds.append(m.decode_seconds - t0)
        return bytes(out), False

    def _target_tokens(self, drafted: bytes, ended: bool, k: int) -> list[int]:
        """Target tokens of the drafted text after the target's own (the bytes the draft
        held back must begin it), stable ones only."""
        behind = bytes(self._text[self._held:])
        if not drafted.startswith(behind):
            return []
        text = drafted[len(behind):]
        whole = complete_utf8(text)
        toks, pieces = self.target_text.tokens(text[:whole])
        n_same, at = spelled_prefix(text, pieces)  # the target's tokens must spell the text back
        toks = toks[:n_same]
        if ended and at == len(text):
            toks.append(self.target_text.end_of_turn())
        elif toks:
            toks.pop()  # it could merge with what the draft would have written next
        return toks[:k]

    def accept(self, history: Sequence[int], n_accepted: int, verify_seconds: float = 0.0) -> None:
        """Nothing to do now: the next proposal keeps the draft tokens the text still has."""
