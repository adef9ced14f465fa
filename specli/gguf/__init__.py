"""GGUF files, checked before llama.cpp sees them: the format's tables (format), bounded
reads (reader), metadata cross-checks (checks) and `validate_gguf` (validate)."""

from specli.gguf.format import (
    GGML_TYPES,
    GGUF_MAGIC,
    GGUF_VALUE_TYPES,
    SUPPORTED_VERSIONS,
    GgmlType,
    GgufArray,
    GgufSummary,
    TensorInfo,
)
from specli.gguf.validate import validate_gguf

__all__ = [
    "GGML_TYPES",
    "GGUF_MAGIC",
    "GGUF_VALUE_TYPES",
    "SUPPORTED_VERSIONS",
    "GgmlType",
    "GgufArray",
    "GgufSummary",
    "TensorInfo",
    "validate_gguf",
]
