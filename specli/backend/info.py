"""What a model file says before its weights load, read once per file, and the memory
there is to load it into."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from specli.backend.loader import check_gguf_header, load_model_ptr, meta_int, meta_str
from specli.backend.system import LoadOptions
from specli.backend.vocab import Vocab, free_vocab_handle
from specli.gguf import GgufSummary


@dataclass(frozen=True)
class ModelInfo:
    """GGUF metadata without weights: architecture, vocabulary, template, cache size."""

    architecture: str
    model_name: str
    context_length: int  # 0 when the file does not say
    vocab_type: str
    n_vocab: int
    bos: int
    eos: int
    add_bos: bool
    has_chat_template: bool
    kv_bytes_per_token: int  # K and V at F16; 0 when the metadata is incomplete


class ModelFile:
    """One GGUF file checked and read once, before any weights load: its validated
    structure, its tokenizer (llama.cpp's vocabulary-only load) and its metadata, for
    the pair check, context fitting and then `Model(file, ...)`, which skips the check.
    `vocab` is valid until close()."""

    def __init__(self, path: Path, gguf: GgufSummary, vocab: Vocab, info: ModelInfo, handle: Any) -> None:
        self.path = path
        self.gguf = gguf
        self.vocab = vocab
        self.info = info
        self._handle = handle

    def close(self) -> None:
        if self._handle is not None:
            free_vocab_handle(self._handle)
            self._handle = None

    def __enter__(self) -> ModelFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_model_file(path: Path, gguf: GgufSummary | None = None) -> ModelFile:
    """Validate a GGUF (unless `gguf`, its validated structure, is given) and load its
    tokenizer and metadata (no weights)."""
    path = Path(path)
    gguf = gguf if gguf is not None else check_gguf_header(path)
    handle = load_model_ptr(path, LoadOptions(), vocab_only=True)
    try:
        vocab = Vocab(llama_cpp.llama_model_get_vocab(handle))
        info = _model_info(path, vocab, handle)
    except BaseException:
        free_vocab_handle(handle)
        raise
    return ModelFile(path, gguf, vocab, info, handle)


def read_model_info(path: Path) -> dict[str, Any]:
    """GGUF metadata without loading weights: architecture, vocabulary, template."""
    with read_model_file(path) as f:
        return asdict(f.info)


def _model_info(path: Path, vocab: Vocab, handle: Any) -> ModelInfo:
    v = vocab.info()
    arch = meta_str(handle, "general.architecture")
    return ModelInfo(
        architecture=arch or "unknown",
        model_name=meta_str(handle, "general.name") or path.stem,
        context_length=meta_int(handle, f"{arch}.context_length"),
        vocab_type=v.vocab_type,
        n_vocab=v.n_vocab,
        bos=v.bos,
        eos=v.eos,
        add_bos=v.add_bos,
        has_chat_template=bool(llama_cpp.llama_model_chat_template(handle, None)),
        kv_bytes_per_token=_kv_bytes_per_token(handle, arch or ""),
    )


def _kv_bytes_per_token(handle: Any, arch: str) -> int:
    """K and V cache bytes per context token at F16 (0 when the metadata is incomplete)."""

    def num(key: str) -> int:
        return meta_int(handle, f"{arch}.{key}")

    n_layer, n_embd, n_head = num("block_count"), num("embedding_length"), num("attention.head_count")
    n_head_kv = num("attention.head_count_kv") or n_head
    if not (n_layer and n_embd and n_head):
        return 0
    k_len = num("attention.key_length") or n_embd // n_head
    v_len = num("attention.value_length") or n_embd // n_head
    return n_layer * n_head_kv * (k_len + v_len) * 2


def rolls_back(model_ptr: Any) -> bool:
    """Whether rejected draft tokens can be dropped from a loaded model's memory: not from
    a recurrent state (Mamba, RWKV) or a hybrid one, so those are never drafted for."""
    return not (llama_cpp.llama_model_is_recurrent(model_ptr) or llama_cpp.llama_model_is_hybrid(model_ptr))


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
