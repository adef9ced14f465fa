"""One loaded model: its context, batched decoding with chosen logits rows, KV-cache
rollback, and its tokenizer and chat template.

One `Model` is one GGUF file with one context and one sequence (seq id 0). It decodes
batches asking logits only for the rows named, hands rows back as zero-copy numpy
views, and rolls its KV cache back to any earlier position.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import llama_cpp
import numpy as np

from specli.backend import bounded
from specli.backend.info import ModelFile
from specli.backend.lib import last_log_error
from specli.backend.loader import check_gguf_header, load_model_ptr, meta_str
from specli.backend.system import (
    FLASH_ATTN,
    KV_TYPES,
    LoadOptions,
    default_threads,
    device_argmax,
    resolved_kernels,
)
from specli.backend.vocab import StreamDetokenizer, Vocab
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
_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"  # private-use characters around message indices
_MARK_RE = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_CLOSE}")


StateBuffer = bytearray | mmap.mmap  # a sequence's saved state


def state_buffer(size: int) -> StateBuffer:
    """A writable buffer for a saved state. Past 1 MiB an anonymous mapping of its own, so
    that its memory goes back to the system when it is freed: glibc raises its mmap
    threshold to the size of the largest block freed, and then serves states of tens of
    MiB from a heap that keeps the pages (RSS grew 150 MiB past the cache's cap)."""
    return mmap.mmap(-1, size) if size >= 2**20 else bytearray(size)


class Model:
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
        tmpl = llama_cpp.llama_model_chat_template(self._model, None)
        self.chat_template: str | None = tmpl.decode("utf-8") if tmpl else None

        cparams = llama_cpp.llama_context_default_params()
        threads = self.opts.n_threads or default_threads()
        cparams.n_ctx = self.opts.n_ctx
        cparams.n_batch = self.opts.n_batch
        cparams.n_ubatch = self.opts.n_batch
        cparams.n_seq_max = 1
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
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self.n_batch = int(llama_cpp.llama_n_batch(self._ctx))  # llama.cpp may clamp it
        # Largest batch whose logits equal one-token decoding bit for bit: 1 until
        # measured on this model and build (specli.runtime.calibration sets it)
        self.exact_batch = 1
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        b = self._batch
        # numpy views of the batch's arrays: a step fills them in a few slice writes
        # (ctypes item writes and a set per token cost 39 us of a 330 us plain step)
        self._b_token = np.ctypeslib.as_array(b.token, shape=(self.n_batch,))
        self._b_pos = np.ctypeslib.as_array(b.pos, shape=(self.n_batch,))
        self._b_logits = np.ctypeslib.as_array(b.logits, shape=(self.n_batch,))
        np.ctypeslib.as_array(b.n_seq_id, shape=(self.n_batch,))[:] = 1
        for i in range(self.n_batch):
            b.seq_id[i][0] = 0
        self._outputs: dict[tuple[int, int], np.ndarray] = {}  # (address, rows) -> view of the outputs
        self._sampler = self._greedy_in_graph()
        self.device_argmax = self._sampler is not None
        self.tokens: list[int] = []  # what the KV cache holds, position i = tokens[i]
        self.decode_seconds = 0.0  # time spent inside llama_decode
        self._dirty = False  # a decode was interrupted before self.tokens was updated

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
        if self._sampler is None or n > self.n_batch:
            rows = self.decode(tokens, range(n))
            return lambda i: int(rows[i].argmax())
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
    def n_past(self) -> int:
        return len(self.tokens)

    def rollback(self, n_keep: int) -> None:
        """Drop every cached position >= n_keep."""
        if not 0 <= n_keep <= self.n_past:
            raise BackendError(
                f"cannot roll back to position {n_keep}: the cache holds {self.n_past} tokens"
            )
        if n_keep == self.n_past and not self._dirty:
            return
        if self.lost:  # a call is still parked inside llama.cpp on this context: leave it be
            del self.tokens[n_keep:]
            return
        if not llama_cpp.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
            raise BackendError(
                f"llama.cpp could not remove cache positions >= {n_keep} "
                f"({self.architecture} may not support partial rollback)"
            )
        del self.tokens[n_keep:]
        self._dirty = False

    def reset(self) -> None:
        self._llama(lambda: llama_cpp.llama_memory_clear(self._mem, True), "clearing the cache")
        self.tokens.clear()
        self._dirty = False

    def cache_pos_max(self) -> int:
        return int(llama_cpp.llama_memory_seq_pos_max(self._mem, 0))

    # -- sequence state (the prompt cache) -----------------------------------------
    def save_state(self) -> StateBuffer:
        """The cache's sequence as llama.cpp serialises it, for `load_state` later."""
        if self._dirty:
            self.rollback(self.n_past)
        size = int(self._llama(lambda: llama_cpp.llama_state_seq_get_size(self._ctx, 0), "sizing its state"))
        buf = state_buffer(size)
        dst = (ctypes.c_uint8 * size).from_buffer(buf)
        got = int(self._llama(lambda: llama_cpp.llama_state_seq_get_data(self._ctx, dst, size, 0), "saving its state"))
        if got == 0:
            raise BackendError(f"llama.cpp could not save the cache of {self.path.name}")
        if got == size:
            return buf
        out = state_buffer(got)
        out[:] = buf[:got]
        return out

    def load_state(self, data: StateBuffer, tokens: Sequence[int]) -> bool:
        """Replace the cache by a state `save_state` gave when it held `tokens`; False (the
        cache left empty) where llama.cpp refuses it or it holds another number of tokens."""
        self.reset()
        src = (ctypes.c_uint8 * len(data)).from_buffer(data)
        got = int(self._llama(lambda: llama_cpp.llama_state_seq_set_data(self._ctx, src, len(data), 0),
                              "loading a state"))
        if got == 0 or self.cache_pos_max() != len(tokens) - 1:
            self.reset()
            return False
        self.tokens = [int(t) for t in tokens]
        return True

    # -- decoding ----------------------------------------------------------------
    def decode(self, tokens: Sequence[int], logit_rows: Sequence[int] = ()) -> np.ndarray:
        """Append `tokens` to the cache; return logits for the batch rows named in
        `logit_rows` (indices into `tokens`, ascending) as a (len(logit_rows), n_vocab)
        float32 view. The view is only valid until the next decode on this model.
        Batches above n_batch are split; exact verification chunks are the engine's."""
        n = len(tokens)
        if n == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        if self.n_past + n > self.n_ctx:
            raise ContextError(
                f"context full: {self.n_past} + {n} tokens exceed the {self.n_ctx}-token context",
                "raise --ctx or shorten the prompt",
            )
        if self.lost:
            raise RpcError(f"{self.path.name}: its RPC server was lost", "start it again and reload (/reset in chat)")
        if self._dirty:
            llama_cpp.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)
            self._dirty = False
        rows = logit_rows if isinstance(logit_rows, range) and logit_rows.step == 1 else list(logit_rows)
        if rows and (rows[0] < 0 or rows[-1] >= n or (isinstance(rows, list) and rows != sorted(rows))):
            raise BackendError(f"logit rows {list(rows)} are not ascending indices into {n} tokens")
        if n <= self.n_batch:  # the usual case: one llama_decode, the rows read in place
            self._decode_chunk(tokens, rows)
            return self._rows_view(len(rows)) if rows else np.empty((0, self.n_vocab), dtype=np.float32)
        parts: list[np.ndarray] = []
        for start in range(0, n, self.n_batch):
            end = min(n, start + self.n_batch)
            chunk_rows = [r - start for r in rows if start <= r < end]
            self._decode_chunk(tokens[start:end], chunk_rows)
            if chunk_rows:
                view = self._rows_view(len(chunk_rows))
                # rows of an earlier chunk are overwritten by the next decode: copy them
                parts.append(view if end == n else view.copy())
        if not parts:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _decode_chunk(self, tokens: Sequence[int], rows: Sequence[int]) -> None:
        """One llama_decode of `tokens` (at most n_batch), logits for `rows` (ascending)."""
        n = len(tokens)
        pos0 = self.n_past
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
        b = self._batch
        assert b is not None
        b.n_tokens = n
        self._dirty = True
        t0 = time.perf_counter()
        rc = self._llama(lambda: self._decode_synced(b), f"decoding {n} tokens") if self.remote else \
            llama_cpp.llama_decode(self._ctx, b)
        self.decode_seconds += time.perf_counter() - t0
        if rc != 0:
            llama_cpp.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)
            self._dirty = False
            reasons = {1: "no free KV-cache slot (context full)", 2: "aborted", -1: "invalid batch"}
            raise BackendError(f"llama_decode failed: {reasons.get(rc, f'error {rc}')}")
        self.tokens.extend(map(int, tokens))
        self._dirty = False

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

    # -- text ----------------------------------------------------------------------
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
        return fmt(messages=list(messages), tools=list(tools) or None).prompt  # type: ignore[arg-type]

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
