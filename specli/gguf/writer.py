"""Writing GGUF files: metadata and F32/F16 tensors, streamed to disk (layout in
specli.gguf.format). Used to make random-weight models with real shapes for the GPU
check (scripts/gpu_check.py), where no real weights can be downloaded."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from specli.gguf.format import DEFAULT_ALIGNMENT, GGUF_MAGIC, T_ARRAY, T_STRING

T_U32, T_I32, T_F32, T_BOOL = 4, 5, 6, 7
GGML_F32, GGML_F16 = 0, 1
Value = str | int | float | bool | Sequence[str] | Sequence[int] | Sequence[float]


@dataclass(frozen=True)
class Tensor:
    """A tensor to write: its name, shape (ggml order: fastest-varying dimension first),
    type, and its values: `pool` repeated as far as the tensor goes (random weights need
    no more), with the last `zero_tail` values zero."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int  # GGML_F32 or GGML_F16
    pool: np.ndarray
    zero_tail: int = 0

    @property
    def n_values(self) -> int:
        return int(np.prod(self.shape))

    @property
    def n_bytes(self) -> int:
        return self.n_values * (4 if self.ggml_type == GGML_F32 else 2)


def _string(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def _scalar(v: str | int | float | bool) -> tuple[int, bytes]:
    if isinstance(v, bool):
        return T_BOOL, struct.pack("<?", v)
    if isinstance(v, str):
        return T_STRING, _string(v)
    if isinstance(v, int):
        return (T_U32, struct.pack("<I", v)) if v >= 0 else (T_I32, struct.pack("<i", v))
    return T_F32, struct.pack("<f", v)


def _value(v: Value) -> tuple[int, bytes]:
    if isinstance(v, (str, int, float, bool)):
        return _scalar(v)
    items = list(v)
    if items and isinstance(items[0], str):
        return T_ARRAY, struct.pack("<IQ", T_STRING, len(items)) + b"".join(_string(s) for s in items)  # type: ignore[arg-type]
    if items and isinstance(items[0], float):
        return T_ARRAY, struct.pack("<IQ", T_F32, len(items)) + np.asarray(items, "<f4").tobytes()
    return T_ARRAY, struct.pack("<IQ", T_I32, len(items)) + np.asarray(items, "<i4").tobytes()


def write_gguf(path: Path, metadata: dict[str, Value], tensors: Sequence[Tensor]) -> int:
    """Write a GGUF v3 file; returns its size in bytes. Tensor data is made and written one
    tensor at a time (a 7B F16 model never sits in memory whole)."""
    out = bytearray(GGUF_MAGIC + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, v in metadata.items():
        vtype, payload = _value(v)
        out += _string(key) + struct.pack("<I", vtype) + payload
    offset = 0
    for t in tensors:
        out += _string(t.name) + struct.pack("<I", len(t.shape))
        out += b"".join(struct.pack("<q", d) for d in t.shape) + struct.pack("<IQ", t.ggml_type, offset)
        offset += _aligned(t.n_bytes)
    out += b"\0" * (_aligned(len(out)) - len(out))
    with open(path, "wb") as f:
        f.write(out)
        for t in tensors:
            _write_tensor(f, t)
    return len(out) + offset


def _aligned(n: int) -> int:
    return (n + DEFAULT_ALIGNMENT - 1) // DEFAULT_ALIGNMENT * DEFAULT_ALIGNMENT


def _write_tensor(f: BinaryIO, t: Tensor) -> None:
    pool = np.ascontiguousarray(t.pool, dtype="<f4" if t.ggml_type == GGML_F32 else "<f2")
    left, tail = t.n_values, min(t.zero_tail, t.n_values)
    while left > tail:
        chunk = pool[: min(pool.size, left - tail)]
        f.write(chunk.tobytes())
        left -= chunk.size
    f.write(np.zeros(tail, dtype=pool.dtype).tobytes())
    f.write(b"\0" * (_aligned(t.n_bytes) - t.n_bytes))
