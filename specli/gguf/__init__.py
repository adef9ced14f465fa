"""GGUF files, checked before llama.cpp sees them: the format's tables (format), bounded
reads (reader), metadata cross-checks (checks), `validate_gguf` (validate), writing one
(writer) and what identifies a file cheaply (identity: `fingerprint`)."""

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
from specli.gguf.identity import fingerprint
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
    "fingerprint",
    "validate_gguf",
]
