"""One sequence of a model that holds several (a server's slot): the `LanguageModel` the
engine and the drafters use for it. Its decodes go through a `Batcher`, which puts them
in one llama_decode with the other slots' (specli.runtime.rounds); long ones are cut in
chunks so that a new prompt's prefill shares the steps of the running slots."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import llama_cpp
import numpy as np

from specli.backend.model import Model, StateBuffer
from specli.backend.vocab import StreamDetokenizer
from specli.errors import BackendError


def share_cells(model: Model, src: int, dst: int, start: int, end: int) -> None:
    """Sequence `dst`, whose first `start` tokens are `src`'s, takes `src`'s cache cells
    [start, end) as its own in place of whatever it held past `start`. Nothing is
    copied: a unified cache's cells may belong to several sequences (llama.cpp's
    parallel example shares a system prompt so), and each keeps them until it drops them."""
    src_tokens, dst_tokens = model.seq_tokens(src), model.seq_tokens(dst)
    with model._lock:  # noqa: SLF001 - the backend's own context, between its decodes
        if not 0 <= start <= end <= len(src_tokens) or dst_tokens[:start] != src_tokens[:start]:
            raise BackendError(f"sequence {dst} cannot share positions {start}-{end} of sequence {src}")
        llama_cpp.llama_memory_seq_rm(model._mem, dst, start, -1)  # noqa: SLF001
        llama_cpp.llama_memory_seq_cp(model._mem, src, dst, start, end)  # noqa: SLF001
        del dst_tokens[start:]
        dst_tokens.extend(src_tokens[start:end])
        model._dirty[dst] = False  # noqa: SLF001


def take_prefix(model: Model, dst: int, tokens: Sequence[int], whole: bool = False) -> int:
    """Sequence `dst` takes from another sequence's cache the longest prefix of `tokens`
    it holds, where that is longer than what `dst` holds (share_cells; with `whole`, only
    a sequence holding all of them). Returns the tokens `dst` gained."""
    want = list(tokens)
    with model._lock:  # noqa: SLF001 - no other slot drops cells while they are looked for
        own = common_prefix(model.seq_tokens(dst), want)
        src, n_best = -1, own
        for seq in range(model.n_seq):
            n = common_prefix(model.seq_tokens(seq), want) if seq != dst else 0
            if n > n_best:
                src, n_best = seq, n
        if src < 0 or (whole and n_best < len(want)):
            return 0
        share_cells(model, src, dst, own, n_best)
        return n_best - own


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if len(diff) else n


class Batcher(Protocol):
    def others(self, seq: int) -> bool:
        """Whether slots other than `seq` hand in parts to these rounds now."""
        ...

    def decode(self, seq: SeqModel, tokens: Sequence[int], rows: Sequence[int],
               gains: np.ndarray | None = None, rate: float = 1.0) -> np.ndarray:
        """`tokens` appended to `seq`, decoded with the other slots' parts of this round;
        its rows, or with `gains` (the expected tokens a draft of each length 0..n-1
        emits) perhaps only the first few (a round may give it fewer draft rows); `rate`:
        the tokens per plain step the slot would make alone."""
        ...


class SeqModel:
    """Sequence `seq` of `model`. `decode_seconds` counts this sequence's share of the
    rounds it was in (the round's time by its share of the rows)."""

    batch_shared = False  # its last round held other slots' rows: its time was not its own (set there)

    def __init__(self, model: Model, seq: int, batcher: Batcher | None = None, chunk: int = 0) -> None:
        self.model, self.seq, self.batcher = model, seq, batcher
        self.chunk = max(1, min(chunk or model.n_batch, model.n_batch))
        self.n_vocab, self.n_ctx = model.n_vocab, model.n_ctx
        self.device_argmax = False
        self.decode_seconds = 0.0

    def __getattr__(self, name: str) -> Any:  # the model's tokenizer, name, path, template ...
        return getattr(self.model, name)

    @property
    def exact_batch(self) -> int:
        return self.model.exact_batch

    @property
    def tokens(self) -> list[int]:
        return self.model.seq_tokens(self.seq)

    @property
    def n_past(self) -> int:
        return len(self.model.seq_tokens(self.seq))

    def others_busy(self) -> bool:
        return self.batcher is not None and self.batcher.others(self.seq)

    def decode(self, tokens: Sequence[int], logit_rows: Sequence[int] = ()) -> np.ndarray:
        """As `Model.decode`, in rounds of at most `chunk` tokens while other slots are
        busy (n_batch alone)."""
        rows = list(logit_rows)
        n = len(tokens)
        if n == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        chunk = self.chunk if self.others_busy() else self.model.n_batch
        if n <= chunk:
            return self._decode(tokens, rows)
        parts: list[np.ndarray] = []
        for start in range(0, n, chunk):
            end = min(n, start + chunk)
            got = self._decode(tokens[start:end], [r - start for r in rows if start <= r < end])
            if len(got):
                parts.append(got.copy())  # the next round overwrites it
        if not parts:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return np.concatenate(parts)

    def decode_offer(self, tokens: Sequence[int], gains: np.ndarray, rate: float = 1.0) -> np.ndarray:
        """[last, *draft] with every row asked, where the round may keep only a head of
        the draft: `gains[k]` is the tokens the step is expected to emit with k of it,
        `rate` the tokens per plain step it would make alone."""
        if self.batcher is None or len(tokens) > self.chunk:
            return self.decode(tokens, range(len(tokens)))
        return self.batcher.decode(self, tokens, list(range(len(tokens))), gains, rate)

    def _decode(self, tokens: Sequence[int], rows: list[int]) -> np.ndarray:
        if self.batcher is None:
            t0 = self.model.decode_seconds
            out = self.model.decode(tokens, rows, self.seq)
            self.decode_seconds += self.model.decode_seconds - t0
            return out
        return self.batcher.decode(self, tokens, rows)

    def decode_argmax(self, tokens: Sequence[int]) -> Callable[[int], int]:
        rows = self.decode(tokens, range(len(tokens)))
        return lambda i: int(rows[i].argmax())

    def hidden_at(self, pos: int) -> np.ndarray | None:
        """This slot's hidden state at `pos` (Model.hidden_at)."""
        return self.model.hidden_at(pos, self.seq)

    def rest_features(self, rest: bool) -> None:
        self.model.rest_features(rest, self.seq)

    def rollback(self, n_keep: int) -> None:
        self.model.rollback(n_keep, self.seq)

    def reset(self) -> None:
        self.model.reset(self.seq)

    def save_state(self) -> StateBuffer:
        return self.model.save_state(self.seq)

    def load_state(self, data: StateBuffer, tokens: Sequence[int]) -> bool:
        return self.model.load_state(data, tokens, self.seq)

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def stream_detokenizer(self) -> StreamDetokenizer:
        return self.model.stream_detokenizer()
