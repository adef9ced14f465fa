"""llama.cpp through llama-cpp-python's low-level API: the only package importing llama_cpp.

system: the library itself (log, init, build, load options and kernels); loader: files
into llama.cpp (check, load, metadata, requantize); vocab: tokenizers; info: a model
file's metadata, read once before its weights; model: a loaded model (decode, rollback,
chat template); peer: llama-cpp-python's own generator, the bench's peer; rpc: RPC
servers as devices, and serving one; bounded: calls to them that survive a lost server;
decoder: one thread for every decode of a process that decodes from several.
"""

from specli.backend.bounded import reconnect as reconnect_rpc
from specli.backend.decoder import start as start_decode_thread
from specli.backend.info import ModelFile, ModelInfo, available_memory, read_model_file, read_model_info
from specli.backend.loader import check_gguf_header, quantize_model
from specli.backend.model import Model, StateBuffer, state_buffer
from specli.backend.peer import LlamaCppPythonPeer, open_llama_cpp_python_peer
from specli.backend.rpc import probe_all as probe_rpc
from specli.backend.system import (
    FLASH_ATTN,
    KV_TYPES,
    LoadOptions,
    build_id,
    default_threads,
    on_cpu,
    resolved_kernels,
    supports_gpu_offload,
    system_info,
)
from specli.backend.vocab import StreamDetokenizer, Vocab, VocabInfo, free_vocab_handle, read_vocab

__all__ = [
    "FLASH_ATTN",
    "KV_TYPES",
    "LlamaCppPythonPeer",
    "LoadOptions",
    "Model",
    "ModelFile",
    "ModelInfo",
    "StateBuffer",
    "StreamDetokenizer",
    "start_decode_thread",
    "Vocab",
    "VocabInfo",
    "available_memory",
    "build_id",
    "check_gguf_header",
    "default_threads",
    "free_vocab_handle",
    "on_cpu",
    "open_llama_cpp_python_peer",
    "quantize_model",
    "read_model_file",
    "read_model_info",
    "probe_rpc",
    "read_vocab",
    "reconnect_rpc",
    "resolved_kernels",
    "state_buffer",
    "supports_gpu_offload",
    "system_info",
]
