"""A bounded GGUF reader that never trusts the file.

`validate_gguf(path)` walks the header, every metadata key/value and the tensor info
table of a GGUF file, checking every length, count, type id, shape and offset against
the file size and sane caps before llama.cpp ever sees the file. It reads only the
header region (buffered, growing as needed), never the tensor data, and refuses any
damage with a one-line `ModelError` naming what is wrong and at which byte offset.

Layout (all little-endian), GGUF v2/v3:

    magic "GGUF" | u32 version | u64 tensor_count | u64 metadata_kv_count
    metadata_kv_count x (string key | u32 value_type | value)
    tensor_count x (string name | u32 n_dims | n_dims x i64 ne | u32 ggml_type | u64 offset)
    padding to `general.alignment` (default 32) | tensor data

where a string is a u64 byte length followed by the bytes, and an array value is
u32 element_type | u64 count | count x element.
"""

from __future__ import annotations

import math
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specli.errors import ModelError

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

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_HEADER = struct.Struct("<4sIQQ")

MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, 1-byte key, type, smallest value
MIN_TENSOR_BYTES = 8 + 1 + 4 + 4 + 8  # name length, 1-byte name, n_dims, type, offset


@dataclass(frozen=True)
class GgufArray:
    """A metadata array: its element type and length; `values` only for short ones."""

    elem_type: str
    length: int
    values: tuple[Any, ...] | None = None


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


def _show(text: str, limit: int = 60) -> str:
    """A name from the file, safe for a one-line message (escaped, shortened)."""
    r = repr(text)[1:-1]
    return r if len(r) <= limit else r[: limit - 3] + "..."


class _Damaged(Exception):
    def __init__(self, what: str, offset: int | None) -> None:
        super().__init__(what)
        self.what = what
        self.offset = offset


class _Reader:
    """Sequential little-endian reads over the file's first bytes, loaded on demand
    (in growing chunks) and never past the end of the file."""

    FIRST_CHUNK = 4 * 1024 * 1024

    def __init__(self, f: Any, file_size: int) -> None:
        self._f = f
        self.size = file_size
        self.buf = b""
        self.pos = 0

    def need(self, n: int, what: str) -> None:
        """Make bytes [pos, pos + n) available, or report the file truncated."""
        end = self.pos + n
        if n < 0 or end > self.size:
            raise _Damaged(
                f"{what} needs {n} bytes but only {self.size - self.pos} remain (truncated file?)",
                self.pos,
            )
        if end > len(self.buf):
            self._load(end)

    def _load(self, end: int) -> None:
        want = min(self.size, max(end, 2 * len(self.buf), self.FIRST_CHUNK))
        self._f.seek(len(self.buf))
        chunk = self._f.read(want - len(self.buf))
        self.buf += chunk
        if len(self.buf) < end:  # the file shrank under us
            raise _Damaged(f"file ends at byte {len(self.buf)} while {self.size} were expected", end)

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def i64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _I64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def raw(self, n: int, what: str) -> bytes:
        self.need(n, what)
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def string_len(self, what: str, cap: int = MAX_STRING) -> int:
        at = self.pos
        n = self.u64(f"length of {what}")
        if n > cap:
            raise _Damaged(f"{what} claims {n} bytes (limit {cap})", at)
        if n > self.size - self.pos:
            raise _Damaged(
                f"{what} claims {n} bytes but only {self.size - self.pos} remain in the file", at
            )
        return n

    def string(self, what: str, cap: int = MAX_STRING) -> bytes:
        return self.raw(self.string_len(what, cap), what)

    def skip_strings(self, count: int, what: str, keep: list[bytes] | None = None) -> None:
        """Skip `count` strings (an array's elements) checking every length, appending
        them to `keep` if given. Vocabularies hold 100k+ strings: the loops below keep
        everything in locals and only leave the fast path to load more of the file."""
        buf, blen, pos = self.buf, len(self.buf), self.pos
        unpack = _U64.unpack_from
        append = keep.append if keep is not None else None
        for i in range(count):
            if pos + 8 > blen:
                self.pos = pos
                self.need(8, f"length of {what}[{i}]")
                buf, blen = self.buf, len(self.buf)
            (n,) = unpack(buf, pos)
            end = pos + 8 + n
            if end > blen or n > MAX_STRING:
                if n > MAX_STRING or end > self.size:
                    raise _Damaged(
                        f"{what}[{i}] claims {n} bytes but only {self.size - pos - 8} remain in the file"
                        if n <= MAX_STRING else f"{what}[{i}] claims {n} bytes (limit {MAX_STRING})",
                        pos,
                    )
                self.pos = pos
                self.need(8 + n, f"{what}[{i}]")
                buf, blen = self.buf, len(self.buf)
            if append is not None:
                append(buf[pos + 8 : end])
            pos = end
        self.pos = pos


def _read_value(r: _Reader, vtype: int, key: str, depth: int, type_at: int) -> Any:
    """One metadata value of GGUF type `vtype` at r.pos (the type id was at `type_at`)."""
    spec = GGUF_VALUE_TYPES.get(vtype)
    if spec is None:
        raise _Damaged(f"key '{_show(key)}' has unknown value type {vtype}", type_at)
    name, fmt, size = spec
    if vtype == T_STRING:
        at = r.pos
        raw = r.string(f"string value of '{_show(key)}'")
        try:
            # specli decodes these (names, chat template) strictly; GGUF strings are UTF-8
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Damaged(f"string value of '{_show(key)}' is not UTF-8 (byte {at + 8 + e.start})", at) from None
    if vtype == T_ARRAY:
        return _read_array(r, key, depth + 1)
    assert fmt is not None
    r.need(size, f"{name} value of '{_show(key)}'")
    (v,) = struct.unpack_from(fmt, r.buf, r.pos)
    r.pos += size
    return bool(v) if vtype == 7 else v


def _read_array(r: _Reader, key: str, depth: int) -> GgufArray:
    at = r.pos
    if depth > MAX_DEPTH:
        raise _Damaged(f"key '{_show(key)}' nests arrays deeper than {MAX_DEPTH} levels", at)
    etype = r.u32(f"array element type of '{_show(key)}'")
    spec = GGUF_VALUE_TYPES.get(etype)
    if spec is None:
        raise _Damaged(f"array '{_show(key)}' has unknown element type {etype}", at)
    ename, fmt, esize = spec
    count_at = r.pos
    count = r.u64(f"array length of '{_show(key)}'")
    remain = r.size - r.pos
    if count > MAX_ARRAY:
        raise _Damaged(f"array '{_show(key)}' claims {count} elements (limit {MAX_ARRAY})", count_at)
    if count * esize > remain:
        raise _Damaged(
            f"array '{_show(key)}' of {count} {ename} needs at least {count * esize} bytes "
            f"but only {remain} remain in the file",
            count_at,
        )
    what = f"array '{_show(key)}'"
    if etype == T_STRING and key == TOKENS_KEY and depth == 1:
        start = r.pos
        tokens: list[bytes] = []
        r.skip_strings(count, what, tokens)
        _check_unique_tokens(r, tokens, start)
        return GgufArray(ename, count)
    if etype == T_STRING:
        if count <= SMALL_ARRAY:
            vals = tuple(r.string(f"{what}[{i}]").decode("utf-8", errors="replace") for i in range(count))
            return GgufArray(ename, count, vals)
        r.skip_strings(count, what)
        return GgufArray(ename, count)
    if etype == T_ARRAY:
        subs = tuple(_read_array(r, key, depth + 1) for _ in range(count))
        return GgufArray(ename, count, subs if count <= SMALL_ARRAY else None)
    assert fmt is not None
    if count <= SMALL_ARRAY:
        r.need(count * esize, what)
        nums: tuple[Any, ...] = struct.unpack_from(f"<{count}{fmt[1]}", r.buf, r.pos)
        r.pos += count * esize
        if etype == 7:
            nums = tuple(bool(v) for v in nums)
        return GgufArray(ename, count, nums)
    r.skip(count * esize, what)  # bulk: the payload itself needs no per-element check
    return GgufArray(ename, count)


def _check_unique_tokens(r: _Reader, tokens: list[bytes], start: int) -> None:
    """llama.cpp maps token text -> id and aborts the process (GGML_ASSERT) when two
    tokens share a text, which one flipped bit in a vocabulary can cause. It renames
    empty tokens to "[EMPTY_<id>]" first, and so does this check."""
    if b"" in tokens:
        for i, t in enumerate(tokens):
            if not t:
                tokens[i] = b"[EMPTY_%d]" % i
    if len(set(tokens)) == len(tokens):
        return
    first: dict[bytes, int] = {}
    pos = start
    for i, t in enumerate(tokens):
        if t in first:
            raise _Damaged(
                f"vocabulary token {i} ('{_show(t.decode('utf-8', 'replace'))}') repeats token {first[t]}", pos
            )
        first[t] = i
        pos += 8 + int(_U64.unpack_from(r.buf, pos)[0])


def _check_tokenizer(metadata: dict[str, Any], key_at: dict[str, tuple[int, int]]) -> None:
    """Cross-checks of the tokenizer arrays and special token ids (a damaged id makes
    llama.cpp abort on an assertion when it tokenizes)."""
    tokens = metadata.get(TOKENS_KEY)
    if tokens is None:
        return  # llama.cpp refuses a vocabulary-less model cleanly
    if not isinstance(tokens, GgufArray) or tokens.elem_type != "string":
        raise _Damaged(f"{TOKENS_KEY} must be an array of strings", key_at[TOKENS_KEY][0])
    n = tokens.length
    for key, elem_types in (("tokenizer.ggml.scores", ("f32", "i32")), ("tokenizer.ggml.token_type", ("i32",))):
        arr = metadata.get(key)
        if arr is None:
            continue
        if not isinstance(arr, GgufArray) or arr.elem_type not in elem_types:
            raise _Damaged(f"{key} must be an array of {' or '.join(elem_types)}", key_at[key][0])
        if arr.length != n:
            raise _Damaged(f"{key} has {arr.length} entries for {n} vocabulary tokens", key_at[key][0])
    for key in SPECIAL_ID_KEYS:
        v = metadata.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Damaged(f"{key} must be an integer token id", key_at[key][0])
        if not 0 <= v < n:
            raise _Damaged(f"{key} {v} is outside the {n}-token vocabulary", key_at[key][0])


def _check_hparams(metadata: dict[str, Any], key_at: dict[str, tuple[int, int]], arch: str) -> None:
    """Hyperparameters llama.cpp checks with GGML_ASSERT, which aborts the process on a
    damaged value instead of refusing the file."""

    def bad(key: str, what: str) -> _Damaged:
        return _Damaged(f"{key} {what}", key_at[key][0])

    def count(suffix: str) -> tuple[str, int | None]:
        key = f"{arch}.{suffix}"
        v = metadata.get(key)
        if isinstance(v, GgufArray):  # per-layer values: the largest matters
            nums = [x for x in v.values or () if isinstance(x, int) and not isinstance(x, bool)]
            return key, max(nums, default=None)
        return key, v if isinstance(v, int) and not isinstance(v, bool) else None

    for key, v in metadata.items():
        if key.startswith(f"{arch}.") and isinstance(v, float):
            if not math.isfinite(v):
                raise bad(key, f"is {v}")
            if key.endswith("epsilon") and v < 0:
                raise bad(key, f"is negative ({v})")
    key, n_layer = count("block_count")
    if n_layer is not None and not 1 <= n_layer <= LLAMA_MAX_LAYERS:
        raise bad(key, f"{n_layer} is outside 1..{LLAMA_MAX_LAYERS}")
    key, nextn = count("nextn_predict_layers")
    if nextn is not None and n_layer is not None and nextn > n_layer:
        raise bad(key, f"{nextn} exceeds the {n_layer} layers")
    key_e, n_expert = count("expert_count")
    key_u, n_used = count("expert_used_count")
    key_g, n_groups = count("expert_group_count")
    if n_expert is not None and n_expert > LLAMA_MAX_EXPERTS:
        raise bad(key_e, f"{n_expert} exceeds {LLAMA_MAX_EXPERTS}")
    if n_used is not None and n_used > (n_expert or 0):
        raise bad(key_u, f"{n_used} exceeds the expert count {n_expert or 0}")
    if n_groups is not None and n_groups > 0 and n_groups >= (n_expert or 0):
        raise bad(key_g, f"{n_groups} is not below the expert count {n_expert or 0}")


def _read_key(r: _Reader, i: int) -> str:
    at = r.pos
    raw = r.string(f"key of metadata entry {i}", MAX_KEY)
    if not raw:
        raise _Damaged(f"metadata entry {i} has an empty key", at)
    if not all(0x20 <= b < 0x7F for b in raw):
        raise _Damaged(
            f"key of metadata entry {i} is not printable ASCII ('{_show(raw.decode('latin-1'))}')", at
        )
    return raw.decode("ascii")


def _parse(r: _Reader) -> GgufSummary:
    if r.size == 0:
        raise _Damaged("the file is empty", None)
    r.need(min(r.size, _HEADER.size), "header")
    magic = r.buf[:4]
    if magic != GGUF_MAGIC[: len(magic)]:
        raise _Damaged(f"it does not start with the GGUF magic (found {magic!r}): not a GGUF file?", None)
    if r.size < _HEADER.size:
        raise _Damaged(f"the file is {r.size} bytes, shorter than a GGUF header ({_HEADER.size})", None)
    r.pos = 4
    version = r.u32("version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 24) in SUPPORTED_VERSIONS:
            raise _Damaged(f"big-endian GGUF (version {version >> 24}) is not supported", 4)
        raise _Damaged(f"unsupported GGUF version {version} (specli reads versions 2 and 3)", 4)
    n_tensors = r.u64("tensor count")
    if n_tensors > MAX_TENSORS or n_tensors * MIN_TENSOR_BYTES > r.size - r.pos:
        raise _Damaged(f"tensor count {n_tensors} is impossible for a {r.size}-byte file", 8)
    n_kv = r.u64("metadata count")
    if n_kv > MAX_KV or n_kv * MIN_KV_BYTES > r.size - r.pos:
        raise _Damaged(f"metadata count {n_kv} is impossible for a {r.size}-byte file", 16)

    metadata: dict[str, Any] = {}
    key_at: dict[str, tuple[int, int]] = {}  # key -> (offset of its type id, type id)
    for i in range(n_kv):
        at = r.pos
        key = _read_key(r, i)
        if key in metadata:
            raise _Damaged(f"duplicate metadata key '{_show(key)}' (entry {i})", at)
        type_at = r.pos
        vtype = r.u32(f"value type of '{_show(key)}'")
        metadata[key] = _read_value(r, vtype, key, 0, type_at)
        key_at[key] = (type_at, vtype)

    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        a = metadata["general.alignment"]
        at, vtype = key_at["general.alignment"]
        if vtype != 4:
            raise _Damaged("general.alignment must be a u32", at)
        if a == 0 or a & (a - 1):
            raise _Damaged(f"general.alignment {a} is not a power of two", at)
        alignment = a

    _check_tokenizer(metadata, key_at)
    arch = metadata.get("general.architecture")
    architecture = arch if isinstance(arch, str) else None
    if architecture:
        _check_hparams(metadata, key_at, architecture)

    tensors: list[tuple[TensorInfo, int]] = []
    names: set[str] = set()
    for i in range(n_tensors):
        tensors.append(_read_tensor_info(r, i, names))

    table_end = r.pos
    data_offset = table_end + (-table_end % alignment) if n_tensors else table_end
    if data_offset > r.size:
        raise _Damaged(
            f"data section would start at byte {data_offset}, past the end of the {r.size}-byte file",
            table_end,
        )

    _check_ranges(tensors, alignment, data_offset, r.size)
    return GgufSummary(
        version=version,
        n_tensors=n_tensors,
        n_kv=n_kv,
        architecture=architecture,
        alignment=alignment,
        data_offset=data_offset,
        file_size=r.size,
        metadata=metadata,
        tensors=tuple(t for t, _ in tensors),
    )


def _read_tensor_info(r: _Reader, i: int, names: set[str]) -> tuple[TensorInfo, int]:
    at = r.pos
    raw = r.string(f"name of tensor {i}", GGML_MAX_NAME - 1)
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Damaged(f"name of tensor {i} is not UTF-8 ('{_show(raw.decode('latin-1'))}')", at) from None
    if not name.isprintable():
        raise _Damaged(f"name of tensor {i} has control characters ('{_show(name)}')", at)
    if name in names:
        raise _Damaged(f"duplicate tensor name '{_show(name)}' (tensor {i})", at)
    names.add(name)
    label = f"tensor '{_show(name)}'"

    dims_at = r.pos
    n_dims = r.u32(f"dimension count of {label}")
    if n_dims > GGML_MAX_DIMS:
        raise _Damaged(f"{label} has {n_dims} dimensions (at most {GGML_MAX_DIMS})", dims_at)
    shape: list[int] = []
    n_elements = 1
    for j in range(n_dims):
        d_at = r.pos
        d = r.i64(f"dimension {j} of {label}")
        if d < 0:
            raise _Damaged(f"{label} dimension {j} is negative ({d})", d_at)
        n_elements *= d
        if n_elements > INT64_MAX:
            raise _Damaged(f"{label} has more than 2^63 elements (shape overflows)", d_at)
        shape.append(d)

    type_at = r.pos
    type_id = r.u32(f"type of {label}")
    gt = GGML_TYPES.get(type_id)
    if gt is None:
        raise _Damaged(f"{label} has unknown ggml type id {type_id}", type_at)
    row = shape[0] if shape else 1
    if row % gt.block_size:
        raise _Damaged(
            f"{label} rows of {row} elements are not a multiple of the {gt.name} block size {gt.block_size}",
            dims_at,
        )
    nbytes = n_elements // gt.block_size * gt.type_size

    off_at = r.pos
    offset = r.u64(f"data offset of {label}")
    return TensorInfo(name, tuple(shape), gt.name, offset, nbytes), off_at


def _check_ranges(tensors: list[tuple[TensorInfo, int]], alignment: int, data_offset: int, size: int) -> None:
    data_size = size - data_offset
    for t, at in tensors:
        if t.offset % alignment:
            raise _Damaged(
                f"tensor '{_show(t.name)}' offset {t.offset} is not a multiple of the alignment {alignment}", at
            )
        if t.offset > data_size or t.nbytes > data_size - t.offset:
            raise _Damaged(
                f"tensor '{_show(t.name)}' data [{t.offset}, {t.offset + t.nbytes}) lies outside the "
                f"{data_size}-byte data section (file truncated?)",
                at,
            )
    spans = sorted((t.offset, t.offset + t.nbytes, t.name, at) for t, at in tensors if t.nbytes)
    for (_, end_a, name_a, _), (start_b, _, name_b, at_b) in zip(spans, spans[1:]):
        if start_b < end_a:
            raise _Damaged(
                f"tensor '{_show(name_b)}' data starts at {start_b}, inside tensor '{_show(name_a)}' "
                f"(which ends at {end_a})",
                at_b,
            )


def validate_gguf(path: Path) -> GgufSummary:
    """Check a GGUF file's structure without reading its tensor data.

    Returns a summary; raises ModelError (one line, with the byte offset of the damage)
    for anything a well-formed GGUF v2/v3 file cannot contain."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ModelError(f"model file not found: {path}", "check the path or run: specli models list") from None
    except OSError as e:
        raise ModelError(f"cannot read model file {path}: {e.strerror or e}", HINT) from None
    if stat.S_ISDIR(st.st_mode):
        raise ModelError(f"model path is a directory, not a GGUF file: {path}")
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"model path is not a regular file: {path}")
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            r = _Reader(f, size)
            try:
                return _parse(r)
            except _Damaged as e:
                where = "" if e.offset is None else f" at byte {e.offset}"
                raise ModelError(f"damaged GGUF file {path}: {e.what}{where}", HINT) from None
    except OSError as e:
        raise ModelError(f"cannot read model file {path}: {e.strerror or e}", HINT) from None
