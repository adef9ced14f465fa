"""Small shared types: sampling settings, drafts, verdicts and step events."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

if TYPE_CHECKING:  # the engine's grammar, handed to drafters
    from specli.engine.grammar import Constraint

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
class FimTokens:
    """A model's fill-in-the-middle tokens (None where its GGUF has none): prefix, suffix
    and middle markers, and the repository and file separators of repo-level prompts."""

    pre: int | None
    suf: int | None
    mid: int | None
    rep: int | None = None
    sep: int | None = None

    @property
    def missing(self) -> list[str]:
        """The markers a fill-in-the-middle prompt needs that this model lacks."""
        return [name for name, t in (("prefix", self.pre), ("suffix", self.suf), ("middle", self.mid)) if t is None]


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
    # tokens the step is expected to emit with the first k of `tokens`, k = 0..len: where set,
    # a batch shared with other slots may verify only a head of the draft (runtime.rounds)
    gains: np.ndarray | None = None
    # tokens per plain step the step would make with the batch to itself (auto's own
    # choice): what its tokens are worth in a shared batch, where rows cost everyone
    rate: float = 1.0

    @classmethod
    def of_forced(cls, tokens: Sequence[int]) -> Draft:
        """Tokens a grammar forces, drafted by no model (the `grammar` drafter)."""
        return cls(list(tokens), None, "grammar", None, tuple(range(len(tokens))))

    def head(self, n: int) -> Draft:
        """The first n tokens (a drafter offered more than it was asked for)."""
        qs = self.q_draft
        return Draft(self.tokens[:n], qs[:n] if qs else None, self.source, None, self._forced_before(n))

    def cut(self, n: int) -> Draft:
        """The first n tokens, where a grammar forbids token n: its q is kept as `q_after`."""
        qs = self.q_draft
        return Draft(self.tokens[:n], qs[:n] if qs else None, self.source, qs[n] if qs else None,
                     self._forced_before(n))

    def with_forced_before(self, forced: Sequence[int]) -> Draft:
        """`forced` tokens a grammar forces (certain: one-hot q), then this draft."""
        n = len(forced)
        qs = [*[None] * n, *self.q_draft] if self.q_draft else None
        return Draft([*forced, *self.tokens], qs, self.source if self.tokens else "grammar", self.q_after,
                     (*range(n), *(n + i for i in self.forced_at)))

    def with_forced_after(self, forced: Sequence[int]) -> Draft:
        """This draft, then `forced` tokens a grammar forces after it (one-hot q)."""
        qs = self.q_draft
        n = len(self.tokens)
        return Draft([*self.tokens, *forced], [*qs, *[None] * len(forced)] if qs else None, self.source, None,
                     (*self.forced_at, *range(n, n + len(forced))))

    def _forced_before(self, n: int) -> tuple[int, ...]:
        return tuple(i for i in self.forced_at if i < n)


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


class BatchPrices(Protocol):
    """What the engine asks of a drafter's cost model (auto's) to size a forced run."""

    @property
    def step(self) -> float: ...

    def batch_ratios(self, n_max: int) -> np.ndarray: ...


class Drafter:
    """Every call the engine makes of a drafter. A drafter proposes continuations of
    `history`: every token emitted so far (prompt and generated), whose last token the
    target has not decoded yet. The engine passes the same growing list each call, so a
    drafter may index it incrementally. `propose` is the one call a drafter must write;
    every other hook does nothing unless a drafter needs it."""

    name: str = "drafter"

    @property
    def decode_seconds(self) -> float:
        """Seconds this drafter has spent inside llama.cpp so far (0 without a model)."""
        return 0.0

    @property
    def control_seconds(self) -> float:
        """Seconds spent choosing and learning (auto's controller): host work of its own."""
        return 0.0

    @property
    def costs(self) -> BatchPrices | None:
        """A cost model that prices batches (auto's), or None: forced runs are then drafted whole."""
        return None

    def begin(self, history: Sequence[int]) -> None:
        """A new generation starts from `history` (caches may keep a common prefix)."""

    def propose(self, history: Sequence[int], k: int) -> Draft:
        """Up to k tokens that may follow `history`."""
        raise NotImplementedError

    def accept(self, history: Sequence[int], n_accepted: int, verify_seconds: float = 0.0) -> None:
        """After verification, which took the target `verify_seconds`: `history` now
        ends with the accepted draft prefix and the target's next token."""

    def end(self, history: Sequence[int]) -> None:
        """The generation that `begin` started is over; `history` is all it emitted."""

    def budget(self, max_new: int) -> None:
        """The generation emits at most `max_new` tokens (its max_tokens): told before it begins."""

    def constrain(self, constraint: Constraint | None, take_forced: bool = True) -> None:
        """The generation's grammar (None when it ends), for a drafter with a model of its
        own to draft under; `take_forced`: it may draft the tokens the grammar forces."""

    def prefixed(self, n_forced: int) -> None:
        """The next proposal follows `n_forced` tokens a grammar forces, in its batch (the
        history it is given ends with them)."""

    def extend(self, n_forced: int) -> None:
        """The engine added `n_forced` tokens a grammar forces after the last proposal, in
        the same batch: `n_accepted` then counts them."""

    def cut(self, n_kept: int) -> None:
        """The engine kept only the first `n_kept` tokens of the last proposal (a grammar
        forbade the next)."""
