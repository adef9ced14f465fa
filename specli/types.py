"""Small shared types: sampling settings, drafts, verdicts and step events."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

# why a generation ended: an end-of-generation token or stop string, max_tokens, a full
# context window; the callers add a user's Ctrl-C, SIGTERM and an error mid-generation
FinishReason = Literal["stop", "length", "context", "interrupted", "terminated", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """Sampler settings applied identically to target and draft distributions."""

    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    min_p: float = 0.0  # 0.0 = off
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class VocabInfo:
    """A tokenizer's type, size and special tokens: what a draft/target pair check needs."""

    vocab_type: str
    n_vocab: int
    bos: int
    eos: int
    eot: int
    add_bos: bool
    add_eos: bool


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one draft: keep draft[:n_accepted], then next_token."""

    n_accepted: int
    next_token: int


@dataclass
class Draft:
    """Tokens proposed by a drafter; q_draft[i] is the distribution tokens[i] was drawn
    from (dense float64 over the vocabulary; None: that token was certain, a one-hot q),
    or None for a deterministic drafter."""

    tokens: list[int] = field(default_factory=list)
    q_draft: list[np.ndarray | None] | None = None
    source: str = ""
    # q of a drafted token a grammar removed right after `tokens`: the last row then draws
    # from residual(p, q_after), the rejection verification would have made (p is 0 there)
    q_after: np.ndarray | None = None
    forced_at: tuple[int, ...] = ()  # positions in `tokens` a grammar forced (the "grammar" drafter's, in metrics)


class LanguageModel(Protocol):
    """What the engine and drafters need of a loaded model (specli.backend.Model)."""

    n_vocab: int
    n_ctx: int
    tokens: list[int]
    decode_seconds: float
    exact_batch: int  # largest batch bit-identical to one-token decoding (measured)
    device_argmax: bool  # greedy argmax computed in llama.cpp's graph (decode_argmax)

    @property
    def n_past(self) -> int: ...

    def decode(self, tokens: Sequence[int], logit_rows: Sequence[int] = ()) -> np.ndarray: ...

    def decode_argmax(self, tokens: Sequence[int]) -> Callable[[int], int]:
        """`decode` with every row asked, returning row i's argmax instead of the rows
        (computed by llama.cpp where `device_argmax`)."""
        ...

    def rollback(self, n_keep: int) -> None: ...

    def is_eog(self, token: int) -> bool: ...

    def stream_detokenizer(self) -> TextStream: ...


class TextStream(Protocol):
    def push(self, tokens: Sequence[int]) -> str: ...

    def flush(self) -> str: ...


class Drafter(Protocol):
    """Proposes continuations of `history`: every token emitted so far (prompt and
    generated), whose last token the target has not decoded yet. The engine passes
    the same growing list each call, so a drafter may index it incrementally."""

    name: str

    @property
    def decode_seconds(self) -> float:
        """Seconds this drafter has spent inside llama.cpp so far (0 without a model)."""
        ...

    def begin(self, history: Sequence[int]) -> None:
        """A new generation starts from `history` (caches may keep a common prefix)."""
        ...

    def propose(self, history: Sequence[int], k: int) -> Draft: ...

    def accept(self, history: Sequence[int], n_accepted: int, verify_seconds: float) -> None:
        """After verification, which took the target `verify_seconds`: `history` now
        ends with the accepted draft prefix and the target's next token."""
        ...

    def end(self, history: Sequence[int]) -> None:
        """The generation that `begin` started is over; `history` is all it emitted."""
        ...
