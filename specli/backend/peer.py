"""llama-cpp-python's own `Llama` with its built-in prompt-lookup decoding, the peer
`specli bench --peer llama-cpp-python` compares against. It lives in the backend
because it drives llama_cpp directly."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from specli.backend.lib import init_backend
from specli.backend.loader import check_gguf_header
from specli.backend.system import KV_TYPES, LoadOptions, default_threads, resolved_kernels
from specli.errors import BackendError, ModelError
from specli.types import SamplingParams


class _RecordingLookup(LlamaPromptLookupDecoding):
    """Prompt-lookup drafting that reports every draft (and its time) to its peer."""

    def __init__(self, peer: LlamaCppPythonPeer, max_ngram_size: int, num_pred_tokens: int) -> None:
        super().__init__(max_ngram_size=max_ngram_size, num_pred_tokens=num_pred_tokens)
        self._peer = peer

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        t0 = time.perf_counter()
        out = super().__call__(input_ids, **kwargs)
        self._peer.record_draft(out, time.perf_counter() - t0)
        return out


class LlamaCppPythonPeer:
    """One loaded copy of the model in llama-cpp-python, generating with its prompt
    lookup. `proposals` holds (tokens generated when drafted, drafted ids) of every
    draft the last stream made, each followed by one target forward pass;
    `decode_seconds` and `draft_seconds` add up the time inside llama_decode and the
    drafter."""

    def __init__(self, path: Path, opts: LoadOptions, num_pred_tokens: int = 10, max_ngram_size: int = 2) -> None:
        init_backend()
        check_gguf_header(path)
        self.proposals: list[tuple[int, list[int]]] = []
        self.decode_seconds = 0.0
        self.draft_seconds = 0.0
        self._n_out = 0  # tokens the current stream has yielded
        flash, kv = resolved_kernels(opts)
        threads = opts.n_threads or default_threads()
        try:
            self._llm = llama_cpp.Llama(
                str(path),
                n_gpu_layers=opts.n_gpu_layers,
                main_gpu=opts.main_gpu,
                tensor_split=list(opts.tensor_split) if opts.tensor_split else None,
                n_ctx=opts.n_ctx,
                n_batch=opts.n_batch,
                n_ubatch=opts.n_batch,
                n_threads=threads,
                n_threads_batch=opts.n_threads_batch or threads,
                flash_attn=flash != "off",  # a bool there; llama.cpp's `auto` turns it on wherever it can
                type_k=KV_TYPES[kv],
                type_v=KV_TYPES[kv],
                draft_model=_RecordingLookup(self, max_ngram_size, num_pred_tokens),
                logits_all=True,  # forced by draft_model anyway: every drafted row is sampled
                verbose=False,
            )
        except (ValueError, RuntimeError) as e:
            raise ModelError(f"llama-cpp-python could not load {path}: {e}") from None
        # `Llama` has no hook around llama_decode: its context's decode is wrapped to time it
        self._plain_decode = self._llm._ctx.decode
        self._llm._ctx.decode = self._timed_decode  # type: ignore[method-assign]
        self._vocab = self._llm._model.vocab

    def _timed_decode(self, batch: Any) -> None:
        t0 = time.perf_counter()
        try:
            self._plain_decode(batch)
        finally:
            self.decode_seconds += time.perf_counter() - t0

    def record_draft(self, drafted: npt.NDArray[np.intc], seconds: float) -> None:
        """A draft as the target will see it: cut to the room left in the context."""
        room = max(0, self._llm.n_ctx() - self._llm.n_tokens - 1)
        self.proposals.append((self._n_out, [int(t) for t in drafted[:room]]))
        self.draft_seconds += seconds

    def stream(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams,
               keep_cache: bool = False) -> Iterator[int]:
        """The token ids `Llama.generate` produces from the prompt ids `tokens`
        (end-of-generation token excluded; stops there or after `max_tokens`). Without
        `keep_cache` the KV cache is cleared first, so the prompt is prefilled from scratch."""
        llm = self._llm
        if not keep_cache:
            llm.reset()
        if sampling.seed is not None:
            llm.set_seed(int(sampling.seed))
        self.proposals = []
        self._n_out = 0
        gen = llm.generate(
            list(tokens),
            temp=float(sampling.temperature),
            top_k=int(sampling.top_k),
            top_p=float(sampling.top_p),
            min_p=float(sampling.min_p),
            repeat_penalty=1.0,
        )
        try:
            for tok in gen:
                if llama_cpp.llama_vocab_is_eog(self._vocab, tok):
                    return
                self._n_out += 1
                yield int(tok)
                if self._n_out >= max_tokens:
                    return
        except RuntimeError as e:
            raise BackendError(f"llama-cpp-python: {e}") from None
        finally:
            gen.close()

    def close(self) -> None:
        self._llm.close()


def open_llama_cpp_python_peer(
    path: Path, opts: LoadOptions, num_pred_tokens: int = 10, max_ngram_size: int = 2
) -> LlamaCppPythonPeer:
    """llama-cpp-python's `Llama` with prompt-lookup decoding, loaded from `path`."""
    return LlamaCppPythonPeer(path, opts, num_pred_tokens, max_ngram_size)
