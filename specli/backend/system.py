"""What this llama.cpp build supports, and the options (with their kernel tables) a
model is loaded with."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import llama_cpp

from specli.backend.lib import init_backend
from specli.backend.rpc import has_local_gpu

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

def supports_gpu_offload() -> bool:
    """A GPU on this machine. (llama.cpp's llama_supports_gpu_offload also says yes
    for any build with the RPC backend.)"""
    return has_local_gpu()


def system_info() -> str:
    init_backend()
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()


def build_id() -> str:
    """Short hash of llama.cpp's version and CPU/GPU features: a calibration measured on
    one build says nothing about another's kernels."""
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
    n_seq: int = 1  # sequences in one unified KV cache, n_ctx each (a server's slots)
    flash_attn: str = "auto"  # see resolved_kernels
    kv_type: str = "auto"  # see resolved_kernels
    exact_verify: bool = False  # kernels for which verify batches can equal one-token decoding
    repack: bool = True  # llama.cpp's repacked CPU weight layouts (faster batches)
    rpc: tuple[str, ...] = ()  # RPC servers (host:port) that offloaded layers go to
    rpc_timeout: float = 120.0  # longest wait for one llama.cpp call that talks to them


def device_argmax(opts: LoadOptions) -> bool:
    """Whether greedy argmax runs in llama.cpp's graph (Model.decode_argmax): $SPECLI_DEVICE_ARGMAX
    on/off, else on where the layers are on a GPU. Off on CPU: there its graph makes steps
    dearer than the host work it saves."""
    wanted = os.environ.get("SPECLI_DEVICE_ARGMAX", "auto").lower()
    if wanted in ("on", "off"):
        return wanted == "on" and not opts.rpc
    return not opts.rpc and not on_cpu(opts)


def on_cpu(opts: LoadOptions) -> bool:
    """Whether the model's layers run on this machine's CPU."""
    return opts.n_gpu_layers == 0 or not (opts.rpc or supports_gpu_offload())


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
