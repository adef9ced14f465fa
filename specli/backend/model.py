"""One loaded model: one GGUF file with one context and `n_seq` sequences over one unified
KV cache (a server's slots; 1 elsewhere). It decodes batches asking logits only for the
rows named, several sequences' parts in one batch where asked (`decode_parts`), hands
rows back as zero-copy numpy views, and rolls each sequence back to any earlier position;
methods without a `seq` argument work on sequence 0. Its text side: backend.model_text;
its hidden states: backend.features."""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import llama_cpp
import numpy as np

from specli.backend import bounded, decoder
from specli.backend.features import ModelFeatures
from specli.backend.info import ModelFile, rolls_back
from specli.backend.lib import last_log_error
from specli.backend.loader import check_gguf_header, load_model_ptr, meta_str
from specli.backend.model_text import ModelText
from specli.backend.state import StateBuffer, state_buffer
from specli.backend.system import (
    FLASH_ATTN,
    KV_TYPES,
    LoadOptions,
    default_threads,
    device_argmax,
    resolved_kernels,
)
from specli.backend.vocab import Vocab
from specli.errors import BackendError, ContextError, ModelError, RpcError
from specli.gguf.format import TOKENS_KEY, GgufArray

T = TypeVar("T")
# llama_get_logits answering a plain address (llama_cpp's own answers a ctypes pointer,
# 3 casts a step); a separate function object, so llama_cpp's is left as it is
_get_logits = llama_cpp.llama_cpp._lib["llama_get_logits"]
_get_logits.argtypes = [ctypes.c_void_p]
_get_logits.restype = ctypes.c_void_p
_sampled_logits = llama_cpp.llama_cpp._lib["llama_get_sampled_logits_ith"]  # index -n: the first of n rows
_sampled_logits.argtypes = [ctypes.c_void_p, ctypes.c_int32]
_sampled_logits.restype = ctypes.c_void_p
_sampled_token = llama_cpp.llama_cpp._lib["llama_get_sampled_token_ith"]
_sampled_token.argtypes = [ctypes.c_void_p, ctypes.c_int32]
_sampled_token.restype = ctypes.c_int32


class Model(ModelText, ModelFeatures):
    """One loaded GGUF with its own context, batch and KV cache (sequence 0)."""

    def __init__(self, source: str | Path | ModelFile, opts: LoadOptions | None = None) -> None:
        """Load `source`: a path (checked first), or a ModelFile (checked when it was read)."""
        self.path = source.path if isinstance(source, ModelFile) else Path(source)
        self.opts = opts or LoadOptions()
        self._model = None
        self._ctx = None
        self._batch = None
        self._sampler: Any = None
        self.remote = bool(self.opts.rpc)  # layers on RPC servers: calls are bounded (rpc.call)
        self.lost = False  # a server was lost: the model is dropped, never freed
        gguf = source.gguf if isinstance(source, ModelFile) else check_gguf_header(self.path)
        tokens = gguf.metadata.get(TOKENS_KEY)
        # equal for models that share token ids; read with the file's check, no extra pass
        self._vocab_key: str | None = (
            f"{tokens.length}-{tokens.digest}" if isinstance(tokens, GgufArray) and tokens.digest else None
        )
        self._model = load_model_ptr(self.path, self.opts)
        self.vocab = Vocab(llama_cpp.llama_model_get_vocab(self._model))
        self.n_vocab = self.vocab.n_vocab
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(self._model))
        self.architecture = meta_str(self._model, "general.architecture") or "unknown"
        self.name = meta_str(self._model, "general.name") or self.path.stem
        self.n_params = int(llama_cpp.llama_model_n_params(self._model))
        self.size_bytes = int(llama_cpp.llama_model_size(self._model))
        self.rolls_back = rolls_back(self._model)
        tmpl = llama_cpp.llama_model_chat_template(self._model, None)
        self.chat_template: str | None = tmpl.decode("utf-8") if tmpl else None

        cparams = llama_cpp.llama_context_default_params()
        threads = self.opts.n_threads or default_threads()
        self.n_seq = max(1, self.opts.n_seq)
        # each sequence may fill n_ctx, in one cache shared as llama-server's unified KV is
        cparams.n_ctx = self.opts.n_ctx * self.n_seq
        cparams.n_batch = self.opts.n_batch
        cparams.n_ubatch = self.opts.n_batch
        cparams.n_seq_max = self.n_seq
        cparams.kv_unified = self.n_seq > 1
        cparams.n_threads = threads
        cparams.n_threads_batch = self.opts.n_threads_batch or threads
        flash, kv = resolved_kernels(self.opts)
        cparams.flash_attn_type = FLASH_ATTN[flash]
        cparams.type_k = KV_TYPES[kv]
        cparams.type_v = KV_TYPES[kv]
        cparams.no_perf = True
        # backend sampling (below) caps a sequence's output rows at this (llama.cpp's default: 1)
        cparams.n_outputs_max_per_seq = self.opts.n_batch
        self._ctx = self._llama(lambda: llama_cpp.llama_init_from_model(self._model, cparams), "creating a context")
        if not self._ctx:
            detail = last_log_error()
            self.close()
            raise ModelError(
                f"llama.cpp could not create a context of {self.opts.n_ctx} tokens for {self.path.name}"
                + (f": {detail}" if detail else ""),
                "lower --ctx, use a smaller KV cache type, or offload fewer layers (--n-gpu-layers)",
            )
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx)) // self.n_seq  # per sequence
        self.n_batch = int(llama_cpp.llama_n_batch(self._ctx))  # llama.cpp may clamp it
        # largest batch whose logits equal one-token decoding bit for bit (runtime.measure.calibration measures it)
        self.exact_batch = 1
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._lock = threading.RLock()  # one llama.cpp call on this context at a time (a server's slots)
        b = self._batch
        # numpy views of the batch's arrays: a step fills them in a few slice writes
        # (ctypes item writes and a set per token cost 39 us of a 330 us plain step)
        self._b_token = np.ctypeslib.as_array(b.token, shape=(self.n_batch,))
        self._b_pos = np.ctypeslib.as_array(b.pos, shape=(self.n_batch,))
        self._b_logits = np.ctypeslib.as_array(b.logits, shape=(self.n_batch,))
        np.ctypeslib.as_array(b.n_seq_id, shape=(self.n_batch,))[:] = 1
        for i in range(self.n_batch):
            b.seq_id[i][0] = 0
        self._b_seq = np.zeros(self.n_batch, dtype=np.int32)  # what b.seq_id holds (written where it changes)
        self._outputs: dict[tuple[int, int], np.ndarray] = {}  # (address, rows) -> view of the outputs
        # in-graph argmax is set per sequence and reads rows from the end: one sequence only
        self._sampler = self._greedy_in_graph() if self.n_seq == 1 else None
        self.device_argmax = self._sampler is not None
        # what each sequence's KV cache holds: position i of sequence s = _seq_tokens[s][i]
        self._seq_tokens: list[list[int]] = [[] for _ in range(self.n_seq)]
        self.decode_seconds = 0.0  # time spent inside llama_decode
        self._dirty = [False] * self.n_seq  # a decode was interrupted before its tokens were updated

    # -- lifecycle ---------------------------------------------------------------
    def _llama(self, fn: Callable[[], T], what: str, timeout: float | None = None) -> T:
        """A llama.cpp call on this model: bounded in a worker thread when its layers are
        on RPC servers (a lost server raises RpcError instead of aborting the process)."""
        if not self.remote:
            return fn()
        try:
            return bounded.call(fn, f"{self.path.name} on {','.join(self.opts.rpc)}: {what}",
                                timeout or self.opts.rpc_timeout)
        except BaseException:
            if bounded.lost() is not None:  # also after Ctrl-C left a call running
                self.lost = True
            raise

    def close(self) -> None:
        if self.remote and not self.lost:  # freeing talks to the servers: bounded too
            with contextlib.suppress(RpcError):
                self._llama(self._free, "freeing", timeout=min(10.0, self.opts.rpc_timeout))
        if self.lost:  # freeing would send to a lost server and wait for ever: dropped
            self._batch = self._ctx = self._model = None
            return
        self._free()

    def _greedy_in_graph(self) -> Any:
        """A greedy sampler in the context's graph (llama.cpp's backend sampling): every
        output row's argmax is computed by llama.cpp as the row is made, so greedy
        verification reads one token a row instead of a vocabulary-sized row gone cold
        in the CPU's caches by the time Python reads it (53 of 120 us a plain step with
        Qwen2.5's 151,936 tokens). The rows themselves stay readable (the sampler's copy
        of them). Where it is used: backend.system.device_argmax."""
        if not device_argmax(self.opts):
            return None
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        if not llama_cpp.llama_set_sampler(self._ctx, 0, chain):
            llama_cpp.llama_sampler_free(chain)
            return None
        return chain

    def decode_argmax(self, tokens: Sequence[int]) -> Callable[[int], int]:
        """Append `tokens` to the cache like `decode` with every row asked; return row i's
        argmax (lowest index on ties, as numpy's), computed in llama.cpp's graph where
        `device_argmax` (the rows are not read), else from the rows."""
        n = len(tokens)
        if self._sampler is None or n > self.n_batch or self.features_now:  # features: read the rows
            rows = self.decode(tokens, range(n))
            return lambda i: int(rows[i].argmax())
        self._check_part(0, n, range(n))
        self._decode_chunk(tokens, range(n))
        ctx, base = self._ctx, -n
        return lambda i: _sampled_token(ctx, base + i)

    def _free(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._sampler is not None:  # after its context
            llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- KV cache ----------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        """What sequence 0's cache holds."""
        return self._seq_tokens[0]

    @tokens.setter
    def tokens(self, value: list[int]) -> None:
        self._seq_tokens[0] = value

    def seq_tokens(self, seq: int) -> list[int]:
        return self._seq_tokens[seq]

    @property
    def n_past(self) -> int:
        return len(self._seq_tokens[0])

    def rollback(self, n_keep: int, seq: int = 0) -> None:
        """Drop every cached position >= n_keep of sequence `seq`."""
        tokens = self._seq_tokens[seq]
        if not 0 <= n_keep <= len(tokens):
            raise BackendError(
                f"cannot roll back to position {n_keep}: the cache holds {len(tokens)} tokens"
            )
        if n_keep == len(tokens) and not self._dirty[seq]:
            return
        if self.lost:  # a call is still parked inside llama.cpp on this context: leave it be
            del tokens[n_keep:]
            return
        with self._lock:  # the token list changes with the cells (slots share cells: share_cells)
            if ok := llama_cpp.llama_memory_seq_rm(self._mem, seq, n_keep, -1):
                del tokens[n_keep:]
        if not ok:
            raise BackendError(f"llama.cpp could not remove cache positions >= {n_keep} "
                               f"({self.architecture} may not support partial rollback)")
        self._dirty[seq] = False

    def reset(self, seq: int | None = None) -> None:
        """Empty sequence `seq`'s cache (every sequence's: None)."""
        with self._lock:
            if seq is None or self.n_seq == 1:
                self._llama(lambda: llama_cpp.llama_memory_clear(self._mem, True), "clearing the cache")
            else:
                llama_cpp.llama_memory_seq_rm(self._mem, seq, -1, -1)
            for s in range(self.n_seq) if seq is None else (seq,):
                self._seq_tokens[s].clear()
                self._dirty[s] = False

    def cache_pos_max(self, seq: int = 0) -> int:
        with self._lock:
            return int(llama_cpp.llama_memory_seq_pos_max(self._mem, seq))

    # -- sequence state (the prompt cache) -----------------------------------------
    def save_state(self, seq: int = 0) -> StateBuffer:
        """Sequence `seq`'s cache as llama.cpp serialises it, for `load_state` later."""
        if self._dirty[seq]:
            self.rollback(len(self._seq_tokens[seq]), seq)
        with self._lock:
            size = int(self._llama(lambda: llama_cpp.llama_state_seq_get_size(self._ctx, seq), "sizing its state"))
            buf = state_buffer(size)
            dst = (ctypes.c_uint8 * size).from_buffer(buf)
            got = int(self._llama(lambda: llama_cpp.llama_state_seq_get_data(self._ctx, dst, size, seq),
                                  "saving its state"))
        if got == 0:
            raise BackendError(f"llama.cpp could not save the cache of {self.path.name}")
        if got == size:
            return buf
        out = state_buffer(got)
        out[:] = buf[:got]
        return out

    def load_state(self, data: StateBuffer, tokens: Sequence[int], seq: int = 0) -> bool:
        """Replace sequence `seq`'s cache by a state `save_state` gave when it held `tokens`
        (of any sequence); False (the cache left empty) where llama.cpp refuses it or it
        holds another number of tokens."""
        self.reset(seq)
        src = (ctypes.c_uint8 * len(data)).from_buffer(data)
        with self._lock:
            got = int(self._llama(lambda: llama_cpp.llama_state_seq_set_data(self._ctx, src, len(data), seq),
                                  "loading a state"))
        if got == 0 or self.cache_pos_max(seq) != len(tokens) - 1:
            self.reset(seq)
            return False
        self._seq_tokens[seq] = [int(t) for t in tokens]
        return True

    # -- decoding ----------------------------------------------------------------
    def decode(self, tokens: Sequence[int], logit_rows: Sequence[int] = (), seq: int = 0) -> np.ndarray:
        """Append `tokens` to sequence `seq`'s cache; return logits for the batch rows named
        in `logit_rows` (indices into `tokens`, ascending) as a (len(logit_rows), n_vocab)
        float32 view. The view is only valid until the next decode on this model.
        Batches above n_batch are split; exact verification chunks are the engine's."""
        n = len(tokens)
        if n == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        rows = logit_rows if isinstance(logit_rows, range) and logit_rows.step == 1 else list(logit_rows)
        self._check_part(seq, n, rows)
        if n <= self.n_batch:  # the usual case: one llama_decode, the rows read in place
            self._decode_chunk(tokens, rows, seq)
            return self._read_rows(rows, n) if rows else np.empty((0, self.n_vocab), dtype=np.float32)
        parts: list[np.ndarray] = []
        for start in range(0, n, self.n_batch):
            end = min(n, start + self.n_batch)
            chunk_rows = [r - start for r in rows if start <= r < end]
            self._decode_chunk(tokens[start:end], chunk_rows, seq)
            if chunk_rows:
                view = self._read_rows(chunk_rows, end - start)
                # rows of an earlier chunk are overwritten by the next decode: copy them
                parts.append(view if end == n else view.copy())
        if not parts:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def decode_parts(self, parts: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> list[np.ndarray]:
        """Several sequences' (seq, tokens, logit_rows) in one llama_decode (at most n_batch
        tokens in all): each part's rows as in `decode`, views valid until the next decode."""
        parts = [(seq, tokens, list(rows)) for seq, tokens, rows in parts]
        for seq, tokens, rows in parts:
            self._check_part(seq, len(tokens), rows)
        n = sum(len(t) for _, t, _ in parts)
        if n > self.n_batch:
            raise BackendError(f"a batch of {n} tokens is more than this context's {self.n_batch}")
        if len(parts) == 1:  # the single-sequence path, without rewriting the batch's sequence ids
            seq, tokens, rows = parts[0]
            return [self.decode(tokens, rows, seq)]
        seqs = [seq for seq, _, _ in parts]
        start = 0
        for seq, tokens, rows in parts:
            m = len(tokens)
            pos0 = len(self._seq_tokens[seq])
            self._b_token[start:start + m] = tokens
            self._b_pos[start:start + m] = np.arange(pos0, pos0 + m, dtype=np.int32)
            self._b_logits[start:start + m] = 0
            self._b_logits[[start + r for r in rows]] = 1
            self._set_seq(start, m, seq)
            start += m
        self._embed_for(any(rows for _, _, rows in parts))
        self._run_batch(n, seqs)
        self._note_parts([(seq, len(tokens)) for seq, tokens, _ in parts], self._seq_tokens)
        for seq, tokens, _ in parts:
            self._seq_tokens[seq].extend(map(int, tokens))
        return self._parts_rows([(len(tokens), rows) for _, tokens, rows in parts])

    def _check_part(self, seq: int, n: int, rows: Sequence[int]) -> None:
        n_past = len(self._seq_tokens[seq])
        if n_past + n > self.n_ctx:
            raise ContextError(
                f"context full: {n_past} + {n} tokens exceed the {self.n_ctx}-token context",
                "raise --ctx or shorten the prompt",
            )
        if self.lost:
            raise RpcError(f"{self.path.name}: its RPC server was lost", "start it again and reload (/reset in chat)")
        if self._dirty[seq]:
            with self._lock:
                llama_cpp.llama_memory_seq_rm(self._mem, seq, n_past, -1)
            self._dirty[seq] = False
        if rows and (rows[0] < 0 or rows[-1] >= n or (isinstance(rows, list) and rows != sorted(rows))):
            raise BackendError(f"logit rows {list(rows)} are not ascending indices into {n} tokens")

    def _set_seq(self, start: int, n: int, seq: int) -> None:
        """Batch rows [start, start + n) belong to `seq` (ctypes writes only where it changes)."""
        b = self._batch
        assert b is not None
        for i in np.flatnonzero(self._b_seq[start:start + n] != seq):
            b.seq_id[start + int(i)][0] = seq
        self._b_seq[start:start + n] = seq

    def _decode_chunk(self, tokens: Sequence[int], rows: Sequence[int], seq: int = 0) -> None:
        """One llama_decode of `tokens` (at most n_batch) on `seq`, logits for `rows` (ascending)."""
        n = len(tokens)
        pos0 = len(self._seq_tokens[seq])
        if n == 1:
            self._b_token[0] = tokens[0]
            self._b_pos[0] = pos0
            self._b_logits[0] = 1 if rows else 0
        else:
            self._b_token[:n] = tokens
            self._b_pos[:n] = np.arange(pos0, pos0 + n, dtype=np.int32)
            self._b_logits[:n] = 0
            if isinstance(rows, range):
                self._b_logits[rows.start:rows.stop] = 1
            else:
                self._b_logits[list(rows)] = 1
        if self.n_seq > 1:
            self._set_seq(0, n, seq)
        self._embed_for(bool(rows))
        self._run_batch(n, (seq,))
        self._note_hidden(seq, pos0, 0, n)
        self._seq_tokens[seq].extend(map(int, tokens))

    def _run_batch(self, n: int, seqs: Sequence[int]) -> None:
        """llama_decode of the batch's first n tokens; on failure the sequences' caches
        are cut back to what they held."""
        b = self._batch
        assert b is not None
        b.n_tokens = n
        for seq in seqs:
            self._dirty[seq] = True
        t0 = time.perf_counter()
        with self._lock:
            rc = self._llama(lambda: self._decode_synced(b), f"decoding {n} tokens") if self.remote else \
                decoder.run(lambda: int(llama_cpp.llama_decode(self._ctx, b)))
            self.decode_seconds += time.perf_counter() - t0
            if rc != 0:
                for seq in seqs:
                    llama_cpp.llama_memory_seq_rm(self._mem, seq, len(self._seq_tokens[seq]), -1)
                    self._dirty[seq] = False
                reasons = {1: "no free KV-cache slot (context full)", 2: "aborted", -1: "invalid batch"}
                raise BackendError(f"llama_decode failed: {reasons.get(rc, f'error {rc}')}")
        for seq in seqs:
            self._dirty[seq] = False

    def _decode_synced(self, b: Any) -> int:
        """Decode and wait for the result: the logits are on this machine when it returns."""
        rc = int(llama_cpp.llama_decode(self._ctx, b))
        if rc == 0:
            llama_cpp.llama_synchronize(self._ctx)
        return rc

    def _rows_view(self, n_rows: int) -> np.ndarray:
        """The last decode's `n_rows` logits rows, in batch order, read in place: llama.cpp
        keeps the outputs of one batch contiguous. Views are kept per (address, rows),
        the address asked each time (the buffer moves when a larger batch needs more)."""
        addr = _sampled_logits(self._ctx, -n_rows) if self._sampler is not None else _get_logits(self._ctx)
        if not addr:
            raise BackendError(f"llama.cpp returned no logits for {n_rows} rows")
        view = self._outputs.get((addr, n_rows))
        if view is None:
            if len(self._outputs) > 256:
                self._outputs.clear()
            ptr = ctypes.cast(addr, ctypes.POINTER(ctypes.c_float))
            view = self._outputs[(addr, n_rows)] = np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab))
        return view
