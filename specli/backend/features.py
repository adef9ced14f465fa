"""A loaded model's hidden states beside its logits, for drafters that read the target's
features (a mixin of backend.Model, which holds `_model`, `_ctx`, `_batch` and `_lock`).

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
    features: bool = False  # hidden states beside the logits (set_features)
    _rows_view: Callable[[int], np.ndarray]  # Model's: the last decode's first n output rows

    @property
    def n_embd(self) -> int:
        """The width of a hidden state."""
        return int(llama_cpp.llama_model_n_embd(self._model))

    def set_features(self, on: bool) -> None:
        """Hidden states beside the logits from each decode (`hidden`): the final norm's
        output, the lm_head's input, for every row. llama.cpp then makes every row of a
        batch an output (a prefill computes a logits row per token), so it is on only
        where a drafter reads them (the module docstring says which logits stay the same)."""
        if on != self.features:
            with self._lock:
                llama_cpp.llama_set_embeddings(self._ctx, on)
            self.features = on

    def hidden(self) -> np.ndarray:
        """The last decode's hidden states, one row per token of its batch in batch order
        ((n, n_embd) float32, a view valid until the next decode); features must be on."""
        if not self.features:
            raise BackendError("hidden states are read only with features on (set_features)")
        assert self._batch is not None
        addr = _get_embeddings(self._ctx)
        if not addr:
            raise BackendError("llama.cpp returned no hidden states")
        ptr = ctypes.cast(addr, ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(ptr, shape=(int(self._batch.n_tokens), self.n_embd))

    def _read_rows(self, rows: Sequence[int], n: int) -> np.ndarray:
        """The last decode's logits for `rows` of its `n` tokens: with features on every
        row is an output, and the rows are picked out of all n."""
        if not self.features:
            return self._rows_view(len(rows))
        view = self._rows_view(n)
        if isinstance(rows, range):
            return view[rows.start:rows.stop]
        return view[list(rows)]

    def _parts_rows(self, parts: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
        """With features on, each part's (n_tokens, rows) picked out of the whole batch's outputs."""
        view, at, out = self._rows_view(sum(n for n, _ in parts)), 0, []
        for n, rows in parts:
            out.append(view[[at + r for r in rows]])
            at += n
        return out
