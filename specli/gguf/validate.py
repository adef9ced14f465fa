"""A bounded GGUF reader that never trusts the file.

`validate_gguf(path)` walks the header, every metadata key/value and the tensor info
table of a GGUF file, checking every length, count, type id, shape and offset against
the file size and sane caps before llama.cpp ever sees the file. It reads only the
header region (buffered, growing as needed), never the tensor data, and refuses any
damage with a one-line `ModelError` naming what is wrong and at which byte offset.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from specli.errors import ModelError
from specli.gguf.checks import check_hparams, check_ranges, check_tokenizer
from specli.gguf.format import (
    DEFAULT_ALIGNMENT,
    GGML_MAX_DIMS,
    GGML_MAX_NAME,
    GGML_TYPES,
    GGUF_MAGIC,
    HEADER,
    HINT,
    INT64_MAX,
    MAX_KEY,
    MAX_KV,
    MAX_TENSORS,
    MIN_KV_BYTES,
    MIN_TENSOR_BYTES,
    SUPPORTED_VERSIONS,
    GgufSummary,
    TensorInfo,
)
from specli.gguf.reader import Damaged, Reader, read_value, show


def _read_key(r: Reader, i: int) -> str:
    at = r.pos
    raw = r.string(f"key of metadata entry {i}", MAX_KEY)
    if not raw:
        raise Damaged(f"metadata entry {i} has an empty key", at)
    if not all(0x20 <= b < 0x7F for b in raw):
        raise Damaged(
            f"key of metadata entry {i} is not printable ASCII ('{show(raw.decode('latin-1'))}')", at
        )
    return raw.decode("ascii")


def _parse(r: Reader) -> GgufSummary:
    if r.size == 0:
        raise Damaged("the file is empty", None)
    r.need(min(r.size, HEADER.size), "header")
    magic = r.buf[:4]
    if magic != GGUF_MAGIC[: len(magic)]:
        raise Damaged(f"it does not start with the GGUF magic (found {magic!r}): not a GGUF file?", None)
    if r.size < HEADER.size:
        raise Damaged(f"the file is {r.size} bytes, shorter than a GGUF header ({HEADER.size})", None)
    r.pos = 4
    version = r.u32("version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 24) in SUPPORTED_VERSIONS:
            raise Damaged(f"big-endian GGUF (version {version >> 24}) is not supported", 4)
        raise Damaged(f"unsupported GGUF version {version} (specli reads versions 2 and 3)", 4)
    n_tensors = r.u64("tensor count")
    if n_tensors > MAX_TENSORS or n_tensors * MIN_TENSOR_BYTES > r.size - r.pos:
        raise Damaged(f"tensor count {n_tensors} is impossible for a {r.size}-byte file", 8)
    n_kv = r.u64("metadata count")
    if n_kv > MAX_KV or n_kv * MIN_KV_BYTES > r.size - r.pos:
        raise Damaged(f"metadata count {n_kv} is impossible for a {r.size}-byte file", 16)

    metadata: dict[str, Any] = {}
    key_at: dict[str, tuple[int, int]] = {}  # key -> (offset of its type id, type id)
    for i in range(n_kv):
        at = r.pos
        key = _read_key(r, i)
        if key in metadata:
            raise Damaged(f"duplicate metadata key '{show(key)}' (entry {i})", at)
        type_at = r.pos
        vtype = r.u32(f"value type of '{show(key)}'")
        metadata[key] = read_value(r, vtype, key, 0, type_at)
        key_at[key] = (type_at, vtype)

    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        a = metadata["general.alignment"]
        at, vtype = key_at["general.alignment"]
        if vtype != 4:
            raise Damaged("general.alignment must be a u32", at)
        if a == 0 or a & (a - 1):
            raise Damaged(f"general.alignment {a} is not a power of two", at)
        alignment = a

    check_tokenizer(metadata, key_at)
    arch = metadata.get("general.architecture")
    architecture = arch if isinstance(arch, str) else None
    if architecture:
        check_hparams(metadata, key_at, architecture)

    tensors: list[tuple[TensorInfo, int]] = []
    names: set[str] = set()
    for i in range(n_tensors):
        tensors.append(_read_tensor_info(r, i, names))

    table_end = r.pos
    data_offset = table_end + (-table_end % alignment) if n_tensors else table_end
    if data_offset > r.size:
        raise Damaged(
            f"data section would start at byte {data_offset}, past the end of the {r.size}-byte file",
            table_end,
        )

    check_ranges(tensors, alignment, data_offset, r.size)
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


def _read_tensor_info(r: Reader, i: int, names: set[str]) -> tuple[TensorInfo, int]:
    at = r.pos
    raw = r.string(f"name of tensor {i}", GGML_MAX_NAME - 1)
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Damaged(f"name of tensor {i} is not UTF-8 ('{show(raw.decode('latin-1'))}')", at) from None
    if not name.isprintable():
        raise Damaged(f"name of tensor {i} has control characters ('{show(name)}')", at)
    if name in names:
        raise Damaged(f"duplicate tensor name '{show(name)}' (tensor {i})", at)
    names.add(name)
    label = f"tensor '{show(name)}'"

    dims_at = r.pos
    n_dims = r.u32(f"dimension count of {label}")
    if n_dims > GGML_MAX_DIMS:
        raise Damaged(f"{label} has {n_dims} dimensions (at most {GGML_MAX_DIMS})", dims_at)
    shape: list[int] = []
    n_elements = 1
    for j in range(n_dims):
        d_at = r.pos
        d = r.i64(f"dimension {j} of {label}")
        if d < 0:
            raise Damaged(f"{label} dimension {j} is negative ({d})", d_at)
        n_elements *= d
        if n_elements > INT64_MAX:
            raise Damaged(f"{label} has more than 2^63 elements (shape overflows)", d_at)
        shape.append(d)

    type_at = r.pos
    type_id = r.u32(f"type of {label}")
    gt = GGML_TYPES.get(type_id)
    if gt is None:
        raise Damaged(f"{label} has unknown ggml type id {type_id}", type_at)
    row = shape[0] if shape else 1
    if row % gt.block_size:
        raise Damaged(
            f"{label} rows of {row} elements are not a multiple of the {gt.name} block size {gt.block_size}",
            dims_at,
        )
    nbytes = n_elements // gt.block_size * gt.type_size

    off_at = r.pos
    offset = r.u64(f"data offset of {label}")
    return TensorInfo(name, tuple(shape), gt.name, offset, nbytes), off_at



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
            r = Reader(f, size)
            try:
                return _parse(r)
            except Damaged as e:
                where = "" if e.offset is None else f" at byte {e.offset}"
                raise ModelError(f"damaged GGUF file {path}: {e.what}{where}", HINT) from None
    except OSError as e:
        raise ModelError(f"cannot read model file {path}: {e.strerror or e}", HINT) from None
