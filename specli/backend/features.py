"""A loaded model's hidden states beside its logits, for the learned drafters that read
the target's features, Medusa heads and the EAGLE-style feature drafter (specli.heads,
specli.drafters.heads; a mixin of backend.Model, which holds `_model`, `_ctx`, `_batch`
and `_lock`).

With `llama_set_embeddings` on and pooling none (a generative model's), one llama_decode
gives both the logits and, for every row, the final norm's output (the lm_head's input).
llama.cpp then makes every row of the batch an output: Model.decode picks the rows asked
for out of them (Model._read_rows). The logits of a step and of a verify batch are the
same bit for bit as with features off; a long prefill's differ by float noise (the
lm_head over hundreds of rows takes another kernel path), so the prompt's last token is
decoded alone where exact logits matter (tests/test_features.py, benchmarks.features_cost).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp
import numpy as np

from specli.errors import BackendError

_get_embeddings = llama_cpp.llama_cpp._lib["llama_get_embeddings"]  # every output row's hidden state
_get_embeddings.argtypes = [ctypes.c_void_p]
_get_embeddings.restype = ctypes.c_void_p


class ModelFeatures:
    _ctx: Any
    _batch: Any
    _lock: threading.RLock
    _model: Any
    n_vocab: int
    n_seq: int
    features: bool = False  # hidden states beside the logits (set_features)
    _emb_on: bool = False  # llama.cpp's embeddings flag as last set
    _resting: frozenset[int] = frozenset()  # sequences whose drafters read no hidden state now
    _held: bool = False  # a reader of every row (online training): features never rest
    _hidden_rows: dict[int, tuple[int, np.ndarray]]  # seq -> (first position, its last decode's rows)
    _rows_view: Callable[[int], np.ndarray]  # Model's: the last decode's first n output rows

    @property
    def n_embd(self) -> int:
        """The width of a hidden state."""
        return int(llama_cpp.llama_model_n_embd(self._model))

    def set_features(self, on: bool) -> None:
        """Hidden states beside the logits from each decode that asks for logits rows
        (`hidden`, `hidden_at`): the final norm's output, the lm_head's input, for every
        row. llama.cpp then makes every row of such a batch an output, so a decode that
        asks for no rows (a prefill's) runs without them, and they are on only where a
        drafter reads them (the module docstring says which logits stay the same)."""
        self.features = on
        self._hidden_rows = {}
        if not on:
            self._embed_for(False)

    def rest_features(self, rest: bool, seq: int = 0) -> None:
        """Sequence `seq`'s learned drafters cannot pay at this machine's costs for now
        (auto weighs them again now and then): while every sequence rests, decodes run
        without hidden states, as with features off (about 2.5 % of a Q4_K_M step on the
        2-core CPU, and greedy argmax back on the device), and hidden_at has none."""
        self._resting = self._resting | {seq} if rest else self._resting - {seq}

    def hold_features(self) -> None:
        """Something reads every row's hidden state (serve --heads-learn): no rest."""
        self._held = True

    @property
    def features_now(self) -> bool:
        """Whether the next decode that asks rows computes hidden states."""
        return self.features and (self._held or len(self._resting) < self.n_seq)

    def _embed_for(self, rows_asked: bool) -> None:
        """llama.cpp's embeddings flag for the next decode: on with features where it asks rows."""
        on = self.features_now and rows_asked
        if on != self._emb_on:
            with self._lock:
                llama_cpp.llama_set_embeddings(self._ctx, on)
            self._emb_on = on

    def _note_hidden(self, seq: int, pos0: int, start: int, n: int) -> None:
        """Keep `seq`'s rows of the decode just run (batch rows start .. start + n, at
        positions pos0 ..), where they were computed; a decode without them leaves none
        (the rows kept from before may be of other tokens at the same positions)."""
        if self._emb_on:
            self._hidden_rows[seq] = (pos0, self.hidden()[start:start + n].copy())
        elif self.features:
            self._hidden_rows.pop(seq, None)

    def hidden_at(self, pos: int, seq: int = 0) -> np.ndarray | None:
        """The hidden state at position `pos` of sequence `seq`, from the last decode of that
        sequence that computed it (None where that decode did not: features off, a prefill,
        or an older decode)."""
        got = self._hidden_rows.get(seq) if self.features else None
        if got is None or not got[0] <= pos < got[0] + len(got[1]):
            return None
        return got[1][pos - got[0]]

    def hidden(self) -> np.ndarray:
        """The last decode's hidden states, one row per token of its batch in batch order
        ((n, n_embd) float32, a view valid until the next decode); features must be on."""
        if not self._emb_on:
            raise BackendError("hidden states are read only with features on (set_features), after a decode "
                               "that asked for logits rows")
        assert self._batch is not None
        addr = _get_embeddings(self._ctx)
        if not addr:
            raise BackendError("llama.cpp returned no hidden states")
        ptr = ctypes.cast(addr, ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(ptr, shape=(int(self._batch.n_tokens), self.n_embd))

    def _read_rows(self, rows: Sequence[int], n: int) -> np.ndarray:
        """The last decode's logits for `rows` of its `n` tokens: with features on every
        row is an output, and the rows are picked out of all n."""
        if not self._emb_on:
            return self._rows_view(len(rows))
        view = self._rows_view(n)
        if isinstance(rows, range):
            return view[rows.start:rows.stop]
        return view[list(rows)]

    def _parts_rows(self, parts: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
        """Each part's (n_tokens, rows) of a batch of several sequences' parts: llama.cpp
        keeps one batch's outputs in batch order (with features on, every row's)."""
        out: list[np.ndarray] = []
        if self._emb_on:
            view, at = self._rows_view(sum(n for n, _ in parts)), 0
            for n, rows in parts:
                out.append(view[[at + r for r in rows]])
                at += n
            return out
        n_rows = sum(len(r) for _, r in parts)
        view = self._rows_view(n_rows) if n_rows else np.empty((0, self.n_vocab), dtype=np.float32)
        at = 0
        for _, rows in parts:
            out.append(view[at:at + len(rows)])
            at += len(rows)
        return out

    def _note_parts(self, parts: Sequence[tuple[int, int]], seq_tokens: Sequence[list[int]]) -> None:
        """Keep each (seq, n_tokens) part's hidden rows of the batch just run, before the
        sequences' token lists grow by them."""
        start = 0
        for seq, n in parts:
            self._note_hidden(seq, len(seq_tokens[seq]), start, n)
            start += n
