"""GGUF files into llama.cpp: the check before it sees a file, loading (weights or the
vocabulary only), metadata strings of a loaded file, and requantizing."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import llama_cpp

from specli.backend import bounded, rpc
from specli.backend.lib import init_backend, last_log_error
from specli.backend.system import LoadOptions, default_threads
from specli.errors import ModelError
from specli.gguf import GGUF_MAGIC, SUPPORTED_VERSIONS, GgufSummary, validate_gguf

QUANT_FTYPES = {"f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16}


def check_gguf_header(path: Path) -> GgufSummary:
    """Refuse files that are missing, empty, not GGUF or damaged before llama.cpp sees
    them; returns the validated structure."""
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
    if version not in SUPPORTED_VERSIONS:
        raise ModelError(f"unsupported GGUF version {version} in {path}", "expected version 2 or 3")
    # a bounded reader checks header, metadata and tensor table: damaged files that
    # would crash llama.cpp are refused here with a clear message
    return validate_gguf(path)


def _model_params(opts: LoadOptions, vocab_only: bool = False) -> tuple[Any, list[Any]]:
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = opts.n_gpu_layers if opts.n_gpu_layers >= 0 else 999
    params.main_gpu = opts.main_gpu
    params.vocab_only = vocab_only
    params.use_extra_bufts = opts.repack
    keep_alive: list[Any] = []
    if opts.tensor_split:
        n_dev = llama_cpp.llama_max_devices()
        arr = (ctypes.c_float * n_dev)(*opts.tensor_split[:n_dev])
        params.tensor_split = arr
        keep_alive.append(arr)
    if opts.rpc and not vocab_only:
        # the servers' devices, then this machine's GPUs: llama.cpp's order for --rpc (the
        # output layer, and its vocabulary-wide logits, stay local when a GPU is here). A
        # model without `rpc` gets llama.cpp's default: servers are never registered
        # globally, so a local draft stays local
        devs = rpc.devices(opts.rpc, opts.rpc_timeout) + rpc.local_gpus()
        arr_devs = (ctypes.c_void_p * (len(devs) + 1))(*devs, None)
        params.devices = ctypes.cast(arr_devs, ctypes.c_void_p).value
        keep_alive.append(arr_devs)
    return params, keep_alive


def rpc_load_seconds(path: Path, opts: LoadOptions) -> float:
    """The bound on loading over RPC: the weights sent at 5 MB/s or more (a slower link
    is taken for a dead one), plus one call's bound."""
    return opts.rpc_timeout + path.stat().st_size / 5e6


def load_model_ptr(path: Path, opts: LoadOptions, vocab_only: bool = False) -> Any:
    """llama.cpp's model handle for a file already passed through check_gguf_header;
    free it with llama_model_free."""
    init_backend()
    params, _keep = _model_params(opts, vocab_only)
    path_bytes = str(path).encode("utf-8")
    if opts.rpc and not vocab_only:
        ptr = bounded.call(lambda: llama_cpp.llama_model_load_from_file(path_bytes, params),
                       f"loading {path.name} onto {','.join(opts.rpc)}", rpc_load_seconds(path, opts))
    else:
        ptr = llama_cpp.llama_model_load_from_file(path_bytes, params)
    if not ptr:
        detail = last_log_error()
        raise ModelError(
            f"llama.cpp could not load {path}" + (f": {detail}" if detail else ""),
            "the file may be damaged or truncated: pull it again (specli models pull NAME)",
        )
    return ptr


def meta_str(model_ptr: Any, key: str) -> str | None:
    """A metadata value of a loaded model as text, or None when the key is absent."""
    buf = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_model_meta_val_str(model_ptr, key.encode(), buf, ctypes.sizeof(buf))
    if n < 0:
        return None
    return buf.value.decode("utf-8", errors="replace")


def meta_int(model_ptr: Any, key: str) -> int:
    """A metadata value as an integer (0 when absent or not a number)."""
    v = meta_str(model_ptr, key)
    try:
        return int(v) if v is not None else 0
    except ValueError:
        return 0


def quantize_model(src: Path, dst: Path, ftype: str = "f16", threads: int | None = None) -> None:
    """Requantize a GGUF (e.g. Q4_K_M -> F16) with llama.cpp's own quantizer."""
    init_backend()
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
