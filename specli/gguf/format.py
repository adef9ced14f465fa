"""The GGUF format as the validator knows it: sizes, caps, ggml's tensor types, the
metadata value types, and the records a validated file is summarised in.

Layout (all little-endian), GGUF v2/v3:

    magic "GGUF" | u32 version | u64 tensor_count | u64 metadata_kv_count
    metadata_kv_count x (string key | u32 value_type | value)
    tensor_count x (string name | u32 n_dims | n_dims x i64 ne | u32 ggml_type | u64 offset)
    padding to `general.alignment` (default 32) | tensor data

where a string is a u64 byte length followed by the bytes, and an array value is
u32 element_type | u64 count | count x element.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64  # tensor names are stored in a char[64] (including the NUL)
LLAMA_MAX_LAYERS = 512
LLAMA_MAX_EXPERTS = 1024

# Caps on what a sane file holds; a damaged length or count is caught here even when
# the file happens to be large enough to "contain" it.
MAX_STRING = 64 * 1024 * 1024
MAX_KEY = 65535  # GGUF spec: keys are ASCII, at most 65535 bytes
MAX_ARRAY = 2**31
MAX_DEPTH = 4  # nesting of arrays inside arrays
MAX_KV = 1_000_000
MAX_TENSORS = 1_000_000
INT64_MAX = 2**63 - 1

# Arrays up to this many elements keep their values in the summary; longer ones
# (token lists, merges, scores) only their length.
SMALL_ARRAY = 64

TOKENS_KEY = "tokenizer.ggml.tokens"


def tokens_digest(tokens: list[bytes]) -> str:
    """A hash of a vocabulary's token texts in id order: equal for models that share
    token ids (keys the history store)."""
    return hashlib.blake2b(b"\0".join(tokens), digest_size=8).hexdigest()
# Special token ids that llama.cpp asserts on (when it adds them) if they were dropped
# for lying outside the vocabulary.
SPECIAL_ID_KEYS = ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.seperator_token_id")

HINT = "pull it again (specli models pull NAME) or re-download the file"


@dataclass(frozen=True)
class GgmlType:
    name: str
    block_size: int  # elements per block
    type_size: int  # bytes per block


# ggml's `enum ggml_type` (ggml.h), with ggml_blck_size / ggml_type_size of each type.
# Ids 4, 5 (Q4_2, Q4_3), 31-33 (Q4_0_4_4 ...) and 36-38 (IQ4_NL_4_4 ...) were removed
# from GGUF files and are refused like any unknown id.
GGML_TYPES: dict[int, GgmlType] = {
    0: GgmlType("F32", 1, 4),
    1: GgmlType("F16", 1, 2),
    2: GgmlType("Q4_0", 32, 18),
    3: GgmlType("Q4_1", 32, 20),
    6: GgmlType("Q5_0", 32, 22),
    7: GgmlType("Q5_1", 32, 24),
    8: GgmlType("Q8_0", 32, 34),
    9: GgmlType("Q8_1", 32, 36),
    10: GgmlType("Q2_K", 256, 84),
    11: GgmlType("Q3_K", 256, 110),
    12: GgmlType("Q4_K", 256, 144),
    13: GgmlType("Q5_K", 256, 176),
    14: GgmlType("Q6_K", 256, 210),
    15: GgmlType("Q8_K", 256, 292),
    16: GgmlType("IQ2_XXS", 256, 66),
    17: GgmlType("IQ2_XS", 256, 74),
    18: GgmlType("IQ3_XXS", 256, 98),
    19: GgmlType("IQ1_S", 256, 50),
    20: GgmlType("IQ4_NL", 32, 18),
    21: GgmlType("IQ3_S", 256, 110),
    22: GgmlType("IQ2_S", 256, 82),
    23: GgmlType("IQ4_XS", 256, 136),
    24: GgmlType("I8", 1, 1),
    25: GgmlType("I16", 1, 2),
    26: GgmlType("I32", 1, 4),
    27: GgmlType("I64", 1, 8),
    28: GgmlType("F64", 1, 8),
    29: GgmlType("IQ1_M", 256, 56),
    30: GgmlType("BF16", 1, 2),
    34: GgmlType("TQ1_0", 256, 54),
    35: GgmlType("TQ2_0", 256, 66),
    39: GgmlType("MXFP4", 32, 17),
    40: GgmlType("NVFP4", 64, 36),
    41: GgmlType("Q1_0", 128, 18),
    42: GgmlType("Q2_0", 64, 18),
}

# GGUF metadata value types: id -> (name, struct format or None, size in bytes)
T_STRING = 8
T_ARRAY = 9
GGUF_VALUE_TYPES: dict[int, tuple[str, str | None, int]] = {
    0: ("u8", "<B", 1),
    1: ("i8", "<b", 1),
    2: ("u16", "<H", 2),
    3: ("i16", "<h", 2),
    4: ("u32", "<I", 4),
    5: ("i32", "<i", 4),
    6: ("f32", "<f", 4),
    7: ("bool", "<B", 1),
    T_STRING: ("string", None, 8),  # size: the u64 length prefix (at least)
    T_ARRAY: ("array", None, 12),  # size: u32 type + u64 count (at least)
    10: ("u64", "<Q", 8),
    11: ("i64", "<q", 8),
    12: ("f64", "<d", 8),
}

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
I64 = struct.Struct("<q")
HEADER = struct.Struct("<4sIQQ")

MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, 1-byte key, type, smallest value
MIN_TENSOR_BYTES = 8 + 1 + 4 + 4 + 8  # name length, 1-byte name, n_dims, type, offset


@dataclass(frozen=True)
class GgufArray:
    """A metadata array: its element type and length; `values` only for short ones."""

    elem_type: str
    length: int
    values: tuple[Any, ...] | None = None
    digest: str | None = None  # the vocabulary's tokens only: a hash of their texts


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ne[0] (row length) first, as GGUF stores it
    ggml_type: str
    offset: int  # from the start of the data section
    nbytes: int


@dataclass(frozen=True)
class GgufSummary:
    version: int
    n_tensors: int
    n_kv: int
    architecture: str | None
    alignment: int
    data_offset: int  # absolute file offset of the data section
    file_size: int
    metadata: dict[str, Any] = field(repr=False)  # scalars; GgufArray for arrays
    tensors: tuple[TensorInfo, ...] = field(repr=False, default=())

    @property
    def data_size(self) -> int:
        """Bytes from the data section start to the end of the last tensor."""
        return max((t.offset + t.nbytes for t in self.tensors), default=0)
