"""A model's tokenizer: tokenize, token pieces, special tokens, streaming detokenization."""

from __future__ import annotations

import codecs
import ctypes
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import llama_cpp

from specli.backend.loader import check_gguf_header, load_model_ptr
from specli.backend.system import LoadOptions
from specli.errors import BackendError
from specli.gguf.format import tokens_digest
from specli.types import FimTokens, VocabInfo

VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}


class Vocab:
    """Tokenizer of one model: tokenize, pieces, special tokens, token texts."""

    def __init__(self, vocab_ptr: Any) -> None:
        self._ptr = vocab_ptr
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab_ptr))
        self._pieces: list[bytes | None] = [None] * self.n_vocab

    def info(self) -> VocabInfo:
        p = self._ptr
        return VocabInfo(
            vocab_type=VOCAB_TYPES.get(int(llama_cpp.llama_vocab_type(p)), "unknown"),
            n_vocab=self.n_vocab,
            bos=int(llama_cpp.llama_vocab_bos(p)),
            eos=int(llama_cpp.llama_vocab_eos(p)),
            eot=int(llama_cpp.llama_vocab_eot(p)),
            add_bos=bool(llama_cpp.llama_vocab_get_add_bos(p)),
            add_eos=bool(llama_cpp.llama_vocab_get_add_eos(p)),
        )

    def fim(self) -> FimTokens:
        """The GGUF's fill-in-the-middle tokens (llama.cpp's LLAMA_TOKEN_NULL: None)."""
        def token(fn: Any) -> int | None:
            t = int(fn(self._ptr))
            return t if t >= 0 else None

        return FimTokens(token(llama_cpp.llama_vocab_fim_pre), token(llama_cpp.llama_vocab_fim_suf),
                         token(llama_cpp.llama_vocab_fim_mid), token(llama_cpp.llama_vocab_fim_rep),
                         token(llama_cpp.llama_vocab_fim_sep))

    def key(self) -> str:
        """A hash of every token's text: equal for models that share token ids, and to
        the key the GGUF check takes from the file's token list."""
        return f"{self.n_vocab}-{tokens_digest([self.token_text(i) for i in range(self.n_vocab)])}"

    def token_text(self, token: int) -> bytes:
        return bytes(llama_cpp.llama_vocab_get_text(self._ptr, token) or b"")

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._ptr, token))

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self._ptr, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(
                self._ptr, data, len(data), buf, n_max, add_special, parse_special
            )
            if n < 0:
                raise BackendError(f"tokenization failed ({n})")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """Bytes of one token as generated text (control tokens render as nothing)."""
        cached = self._pieces[token] if 0 <= token < self.n_vocab else None
        if cached is not None:
            return cached
        if not 0 <= token < self.n_vocab:
            raise BackendError(f"token id {token} outside the vocabulary (0..{self.n_vocab - 1})")
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._ptr, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._ptr, token, buf, -n, 0, False)
        out = buf.raw[:n]
        self._pieces[token] = out
        return out

    def detokenize(self, tokens: Iterable[int], special: bool = False) -> str:
        """Text of `tokens`; `special` spells control tokens out (`<|im_start|>`)."""
        pieces = (self.spelled(t) if special else self.piece(t) for t in tokens)
        return b"".join(pieces).decode("utf-8", errors="replace")

    def grammar_pieces(self) -> list[bytes]:
        """Every token's bytes as a grammar engine reads them: control tokens spelled out
        behind a 0xff byte, so that no grammar over text can produce them (llguidance's
        convention, as in its llama.cpp adapter)."""
        control, user = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL, llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        out = []
        for t in range(self.n_vocab):
            attr = int(llama_cpp.llama_vocab_get_attr(self._ptr, t))
            text = self.spelled(t) if attr & (control | user) else b""
            special = attr & control or (attr & user and text.startswith(b"<") and text.endswith(b">"))
            out.append(b"\xff" + text if special else self.piece(t))
        return out

    def eog_tokens(self) -> list[int]:
        return [t for t in range(self.n_vocab) if self.is_eog(t)]

    def tokenize_bytes(self, data: bytes) -> list[int]:
        """Token ids of raw text (no BOS, special-token text left as text)."""
        return self.tokenize(data.decode("utf-8", errors="replace"), add_special=False, parse_special=False)

    def spelled(self, token: int) -> bytes:
        """A token's bytes with control tokens spelled out (`<|im_start|>`; llama-server's pieces)."""
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(self._ptr, token, buf, 256, 0, True)
        return buf.raw[: max(n, 0)]


class StreamDetokenizer:
    """Turns a token stream into text deltas, never splitting a UTF-8 character."""

    def __init__(self, vocab: Vocab) -> None:
        self._vocab = vocab
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, tokens: Iterable[int]) -> str:
        return self._decoder.decode(b"".join(self._vocab.piece(t) for t in tokens))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


def read_vocab(path: Path) -> tuple[Vocab, Any]:
    """Load only the tokenizer of a GGUF (cheap: no weights). Returns (vocab, handle);
    keep the handle alive while using the vocab, free it with free_vocab_handle."""
    check_gguf_header(path)
    ptr = load_model_ptr(path, LoadOptions(), vocab_only=True)
    return Vocab(llama_cpp.llama_model_get_vocab(ptr)), ptr


def free_vocab_handle(handle: Any) -> None:
    llama_cpp.llama_model_free(handle)
