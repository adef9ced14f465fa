"""llama.cpp through llama-cpp-python's low-level API. The only module importing llama_cpp.

One `Model` is one GGUF file with one context and one sequence (seq id 0). It decodes
batches asking logits only for the rows named, hands rows back as zero-copy numpy
views, and rolls its KV cache back to any earlier position.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import ctypes
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from specli.errors import BackendError, ContextError, ModelError
from specli.gguf import validate_gguf

GGUF_MAGIC = b"GGUF"
KV_TYPES = {
    "f32": llama_cpp.GGML_TYPE_F32,
    "f16": llama_cpp.GGML_TYPE_F16,
    "q8_0": llama_cpp.GGML_TYPE_Q8_0,
    "q4_0": llama_cpp.GGML_TYPE_Q4_0,
}
FLASH_ATTN = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}
QUANT_FTYPES = {"f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16}
_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"  # private-use characters around message indices
_MARK_RE = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_CLOSE}")
VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}

# llama.cpp's log lines, kept for error messages; printed only when SPECLI_DEBUG is set.
_LOG_TAIL: collections.deque[str] = collections.deque(maxlen=64)


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    line = text.decode("utf-8", errors="replace")
    _LOG_TAIL.append(line)
    if os.environ.get("SPECLI_DEBUG"):
        os.write(2, text)


_initialised = False


def _init_backend() -> None:
    global _initialised
    if not _initialised:
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _initialised = True


def _last_log_error() -> str:
    for line in reversed(_LOG_TAIL):
        s = line.strip()
        if s and ("error" in s.lower() or "failed" in s.lower()):
            return s
    return ""


def supports_gpu_offload() -> bool:
    _init_backend()
    return bool(llama_cpp.llama_supports_gpu_offload())


def system_info() -> str:
    _init_backend()
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()


def build_id() -> str:
    """Short hash of llama.cpp's version and CPU/GPU features: a calibration measured on
    one build says nothing about another's kernels."""
    import hashlib

    text = f"{llama_cpp.__version__} {system_info()}"
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 16))


@dataclass(frozen=True)
class LoadOptions:
    """How to load one model: offload, threads, context and cache settings."""

    n_gpu_layers: int = 0  # -1 = all layers
    main_gpu: int = 0
    tensor_split: tuple[float, ...] | None = None
    n_threads: int | None = None  # None = all cores
    n_threads_batch: int | None = None
    n_ctx: int = 4096
    n_batch: int = 512
    flash_attn: str = "auto"  # see resolved_kernels
    kv_type: str = "auto"  # see resolved_kernels
    exact_verify: bool = False  # kernels for which verify batches can equal one-token decoding
    repack: bool = True  # llama.cpp's repacked CPU weight layouts (faster batches)


@dataclass(frozen=True)
class VocabInfo:
    """What a draft/target pair check needs."""

    vocab_type: str
    n_vocab: int
    bos: int
    eos: int
    eot: int
    add_bos: bool
    add_eos: bool


def on_cpu(opts: LoadOptions) -> bool:
    return opts.n_gpu_layers == 0 or not supports_gpu_offload()


def resolved_kernels(opts: LoadOptions) -> tuple[str, str]:
    """(flash_attn, kv_type) with `auto` resolved. Flash attention `auto` is llama.cpp's
    own choice (on wherever the backend has it, the CPU included; measured on Q4_K_M and
    F16: plain steps and batches as fast as or faster than without it).

    Exact verification on CPU needs attention that computes a query row the same way
    whether it comes alone or in a batch. Without flash attention, batches of 2 or more
    rows go to llamafile's tinyBLAS and one row to ggml's vec_dot (measured: no batch
    size bit-exact). Flash attention takes one per-row kernel for any batch below 64
    rows, except that a single row over an F16/F32 cache of 512+ tokens takes a split-KV
    path (measured: 0.4 logit off at 900 tokens); a q8_0 cache never does. So `auto`
    gives exact mode on CPU a q8_0 cache."""
    kv = opts.kv_type
    if kv == "auto":
        kv = "q8_0" if opts.exact_verify and on_cpu(opts) else "f16"
    return opts.flash_attn, kv


def check_gguf_header(path: Path) -> None:
    """Refuse files that are missing, empty or not GGUF before llama.cpp sees them."""
    if not path.exists():
        raise ModelError(f"model file not found: {path}", "check the path or run: specli models list")
    if path.is_dir():
        raise ModelError(f"model path is a directory, not a GGUF file: {path}")
    with path.open("rb") as f:
        head = f.read(8)
    if len(head) < 8 or head[:4] != GGUF_MAGIC:
        raise ModelError(
            f"not a GGUF model file: {path}", "specli loads .gguf files (llama.cpp's format)"
        )
    version = int.from_bytes(head[4:8], "little")
    if version not in (2, 3):
        raise ModelError(f"unsupported GGUF version {version} in {path}", "expected version 2 or 3")
    # a bounded reader checks header, metadata and tensor table: damaged files that
    # would crash llama.cpp are refused here with a clear message
    validate_gguf(path)


def _model_params(opts: LoadOptions, vocab_only: bool = False) -> tuple[Any, Any]:
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = opts.n_gpu_layers if opts.n_gpu_layers >= 0 else 999
    params.main_gpu = opts.main_gpu
    params.vocab_only = vocab_only
    params.use_extra_bufts = opts.repack
    keep_alive = None
    if opts.tensor_split:
        n_dev = llama_cpp.llama_max_devices()
        arr = (ctypes.c_float * n_dev)(*opts.tensor_split[:n_dev])
        params.tensor_split = arr
        keep_alive = arr
    return params, keep_alive


def _load_model_ptr(path: Path, opts: LoadOptions, vocab_only: bool = False) -> Any:
    _init_backend()
    check_gguf_header(path)
    params, _keep = _model_params(opts, vocab_only)
    ptr = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
    if not ptr:
        detail = _last_log_error()
        raise ModelError(
            f"llama.cpp could not load {path}" + (f": {detail}" if detail else ""),
            "the file may be damaged or truncated: pull it again (specli models pull NAME)",
        )
    return ptr


def _meta(model_ptr: Any, key: str) -> str | None:
    buf = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_model_meta_val_str(model_ptr, key.encode(), buf, ctypes.sizeof(buf))
    if n < 0:
        return None
    return buf.value.decode("utf-8", errors="replace")


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
        pieces = (self._special_piece(t) if special else self.piece(t) for t in tokens)
        return b"".join(pieces).decode("utf-8", errors="replace")

    def _special_piece(self, token: int) -> bytes:
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
    ptr = _load_model_ptr(path, LoadOptions(), vocab_only=True)
    return Vocab(llama_cpp.llama_model_get_vocab(ptr)), ptr


def free_vocab_handle(handle: Any) -> None:
    llama_cpp.llama_model_free(handle)


class Model:
    """One loaded GGUF with its own context, batch and KV cache (sequence 0)."""

    def __init__(self, path: str | Path, opts: LoadOptions | None = None) -> None:
        self.path = Path(path)
        self.opts = opts or LoadOptions()
        self._model = None
        self._ctx = None
        self._batch = None
        self._model = _load_model_ptr(self.path, self.opts)
        self.vocab = Vocab(llama_cpp.llama_model_get_vocab(self._model))
        self.n_vocab = self.vocab.n_vocab
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(self._model))
        self.architecture = _meta(self._model, "general.architecture") or "unknown"
        self.name = _meta(self._model, "general.name") or self.path.stem
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
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            detail = _last_log_error()
            self.close()
            raise ModelError(
                f"llama.cpp could not create a context of {self.opts.n_ctx} tokens for {self.path.name}"
                + (f": {detail}" if detail else ""),
                "lower --ctx, use a smaller KV cache type, or offload fewer layers (--n-gpu-layers)",
            )
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self.n_batch = int(llama_cpp.llama_n_batch(self._ctx))  # llama.cpp may clamp it
        # Largest batch whose logits equal one-token decoding bit for bit: 1 until
        # measured on this model and build (specli.calibration sets it)
        self.exact_batch = 1
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.tokens: list[int] = []  # what the KV cache holds, position i = tokens[i]
        self.decode_seconds = 0.0  # time spent inside llama_decode
        self._dirty = False  # a decode was interrupted before self.tokens was updated

    # -- lifecycle ---------------------------------------------------------------
    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
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
        if not llama_cpp.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
            raise BackendError(
                f"llama.cpp could not remove cache positions >= {n_keep} "
                f"({self.architecture} may not support partial rollback)"
            )
        del self.tokens[n_keep:]
        self._dirty = False

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self.tokens.clear()

    def cache_pos_max(self) -> int:
        return int(llama_cpp.llama_memory_seq_pos_max(self._mem, 0))

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
        if self._dirty:
            llama_cpp.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)
            self._dirty = False
        rows = list(logit_rows)
        if rows and (rows != sorted(rows) or rows[0] < 0 or rows[-1] >= n):
            raise BackendError(f"logit rows {rows} are not ascending indices into {n} tokens")
        parts: list[np.ndarray] = []
        start = 0
        step = self.n_batch
        while start < n:
            end = min(n, start + step)
            chunk_rows = [r - start for r in rows if start <= r < end]
            self._decode_chunk(tokens[start:end], chunk_rows)
            if chunk_rows:
                view = self._rows_view(chunk_rows)
                # rows of an earlier chunk are overwritten by the next decode: copy them
                parts.append(view if end == n else view.copy())
            start = end
        if not parts:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _decode_chunk(self, tokens: Sequence[int], rows: Sequence[int]) -> None:
        b = self._batch
        assert b is not None
        n = len(tokens)
        pos0 = self.n_past
        want = set(rows)
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = i in want
        b.n_tokens = n
        self._dirty = True
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ctx, b)
        self.decode_seconds += time.perf_counter() - t0
        if rc != 0:
            llama_cpp.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)
            self._dirty = False
            reasons = {1: "no free KV-cache slot (context full)", 2: "aborted", -1: "invalid batch"}
            raise BackendError(f"llama_decode failed: {reasons.get(rc, f'error {rc}')}")
        self.tokens.extend(int(t) for t in tokens)
        self._dirty = False

    def _rows_view(self, rows: Sequence[int]) -> np.ndarray:
        ptrs = [llama_cpp.llama_get_logits_ith(self._ctx, r) for r in rows]
        if any(not p for p in ptrs):
            raise BackendError(f"llama.cpp returned no logits for rows {list(rows)}")
        addr0 = ctypes.cast(ptrs[0], ctypes.c_void_p).value or 0
        row_bytes = self.n_vocab * 4
        contiguous = all(
            (ctypes.cast(p, ctypes.c_void_p).value or 0) == addr0 + i * row_bytes
            for i, p in enumerate(ptrs)
        )
        if contiguous:
            return np.ctypeslib.as_array(ptrs[0], shape=(len(rows), self.n_vocab))
        return np.stack([np.ctypeslib.as_array(p, shape=(self.n_vocab,)) for p in ptrs])

    # -- text ----------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.vocab.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: Iterable[int]) -> str:
        return self.vocab.detokenize(tokens)

    def stream_detokenizer(self) -> StreamDetokenizer:
        return StreamDetokenizer(self.vocab)

    def is_eog(self, token: int) -> bool:
        return self.vocab.is_eog(token)

    def apply_chat_template(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """Render the GGUF's own Jinja chat template, as llama-cpp-python does."""
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
        return fmt(messages=list(messages)).prompt  # type: ignore[arg-type]

    def chat_tokens(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        """Tokens of a rendered chat. The template's own special-token text becomes
        control tokens; the messages' text never does (a user typing "<|im_end|>" gets
        those characters, not an end of turn)."""
        marked = [dict(m, content=f"{_MARK_OPEN}{i}{_MARK_CLOSE}") for i, m in enumerate(messages)]
        text = self.apply_chat_template(marked, add_generation_prompt)
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


def quantize_model(src: Path, dst: Path, ftype: str = "f16", threads: int | None = None) -> None:
    """Requantize a GGUF (e.g. Q4_K_M -> F16) with llama.cpp's own quantizer."""
    _init_backend()
    check_gguf_header(src)
    if ftype not in QUANT_FTYPES:
        raise ModelError(f"unsupported quantization type {ftype!r}", f"one of {sorted(QUANT_FTYPES)}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_FTYPES[ftype]
    params.allow_requantize = True
    params.nthread = threads or default_threads()
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise ModelError(f"llama.cpp could not requantize {src.name} to {ftype} (code {rc})")


def _int_meta(handle: Any, key: str) -> int:
    v = _meta(handle, key)
    try:
        return int(v) if v is not None else 0
    except ValueError:
        return 0


def _kv_bytes_per_token(handle: Any) -> int:
    """K and V cache bytes per context token at F16 (0 when the metadata is incomplete)."""
    arch = _meta(handle, "general.architecture") or ""

    def num(key: str) -> int:
        return _int_meta(handle, f"{arch}.{key}")

    n_layer, n_embd, n_head = num("block_count"), num("embedding_length"), num("attention.head_count")
    n_head_kv = num("attention.head_count_kv") or n_head
    if not (n_layer and n_embd and n_head):
        return 0
    k_len = num("attention.key_length") or n_embd // n_head
    v_len = num("attention.value_length") or n_embd // n_head
    return n_layer * n_head_kv * (k_len + v_len) * 2


def available_memory() -> int | None:
    """MemAvailable in bytes (Linux), else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def read_model_info(path: Path) -> dict[str, Any]:
    """GGUF metadata without loading weights: architecture, vocabulary, template."""
    vocab, handle = read_vocab(path)
    try:
        info = vocab.info()
        tmpl = llama_cpp.llama_model_chat_template(handle, None)
        return {
            "architecture": _meta(handle, "general.architecture") or "unknown",
            "model_name": _meta(handle, "general.name") or path.stem,
            "context_length": _int_meta(handle, f"{_meta(handle, 'general.architecture')}.context_length"),
            "vocab_type": info.vocab_type,
            "n_vocab": info.n_vocab,
            "bos": info.bos,
            "eos": info.eos,
            "add_bos": info.add_bos,
            "has_chat_template": bool(tmpl),
            "kv_bytes_per_token": _kv_bytes_per_token(handle),
        }
    finally:
        free_vocab_handle(handle)


def open_llama_cpp_python_peer(
    path: Path, opts: LoadOptions, num_pred_tokens: int = 10, max_ngram_size: int = 2
) -> Any:
    """llama-cpp-python's own `Llama` with its built-in prompt-lookup decoding
    (`LlamaPromptLookupDecoding`), the peer `specli bench --peer llama-cpp-python`
    compares against. It loads its own copy of the model. Returns a namespace with:

    - `stream(tokens, max_tokens, sampling, keep_cache=False)`: iterator of the token
      ids `Llama.generate` produces from the prompt ids `tokens` (end-of-generation
      token excluded; stops there or after `max_tokens`). Without `keep_cache` the
      KV cache is cleared first, so the prompt is prefilled from scratch.
    - `proposals`: (tokens generated when drafted, drafted ids) of every draft the
      last stream made; each is followed by one target forward pass.
    - `decode_seconds`, `draft_seconds`: time inside llama_decode / the drafter so far.
    - `close()`.
    """
    import types

    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    _init_backend()
    check_gguf_header(path)
    flash, kv = resolved_kernels(opts)
    state = types.SimpleNamespace(proposals=[], decode_seconds=0.0, draft_seconds=0.0, n_out=0)
    holder: dict[str, Any] = {}

    class CountingLookup(LlamaPromptLookupDecoding):
        def __call__(self, input_ids: Any, /, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = super().__call__(input_ids, **kwargs)
            llm = holder["llm"]
            kept = [int(t) for t in out[: max(0, llm.n_ctx() - llm.n_tokens - 1)]]
            state.proposals.append((state.n_out, kept))
            state.draft_seconds += time.perf_counter() - t0
            return out

    try:
        llm = llama_cpp.Llama(
            str(path),
            n_gpu_layers=opts.n_gpu_layers,
            main_gpu=opts.main_gpu,
            tensor_split=list(opts.tensor_split) if opts.tensor_split else None,
            n_ctx=opts.n_ctx,
            n_batch=opts.n_batch,
            n_ubatch=opts.n_batch,
            n_threads=opts.n_threads or default_threads(),
            n_threads_batch=opts.n_threads_batch or opts.n_threads or default_threads(),
            flash_attn=flash != "off",  # a bool there; llama.cpp's `auto` turns it on wherever it can
            type_k=KV_TYPES[kv],
            type_v=KV_TYPES[kv],
            draft_model=CountingLookup(max_ngram_size=max_ngram_size, num_pred_tokens=num_pred_tokens),
            logits_all=True,  # forced by draft_model anyway: every drafted row is sampled
            verbose=False,
        )
    except (ValueError, RuntimeError) as e:
        raise ModelError(f"llama-cpp-python could not load {path}: {e}") from None
    holder["llm"] = llm
    ctx = llm._ctx
    plain_decode = ctx.decode

    def timed_decode(batch: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return plain_decode(batch)
        finally:
            state.decode_seconds += time.perf_counter() - t0

    ctx.decode = timed_decode  # type: ignore[method-assign]
    vocab = llm._model.vocab

    def stream(tokens: Sequence[int], max_tokens: int, sampling: Any, keep_cache: bool = False) -> Any:
        if not keep_cache:
            llm.reset()
        if getattr(sampling, "seed", None) is not None:
            llm.set_seed(int(sampling.seed))
        state.proposals = []
        state.n_out = 0
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
                if llama_cpp.llama_vocab_is_eog(vocab, tok):
                    return
                state.n_out += 1
                yield int(tok)
                if state.n_out >= max_tokens:
                    return
        except RuntimeError as e:
            raise BackendError(f"llama-cpp-python: {e}") from None
        finally:
            gen.close()

    state.stream = stream
    state.close = llm.close
    return state
