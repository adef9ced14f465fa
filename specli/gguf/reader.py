"""Bounded reads over a GGUF file's header region: every length and count is checked
against the file size and the format's caps before it is trusted."""

from __future__ import annotations

import struct
from typing import Any

from specli.gguf.format import (
    GGUF_VALUE_TYPES,
    I64,
    MAX_ARRAY,
    MAX_DEPTH,
    MAX_STRING,
    SMALL_ARRAY,
    T_ARRAY,
    T_STRING,
    TOKENS_KEY,
    U32,
    U64,
    GgufArray,
    tokens_digest,
)


def show(text: str, limit: int = 60) -> str:
    """A name from the file, safe for a one-line message (escaped, shortened)."""
    r = repr(text)[1:-1]
    return r if len(r) <= limit else r[: limit - 3] + "..."


class Damaged(Exception):
    """What is wrong and at which byte; validate_gguf turns it into a ModelError."""

    def __init__(self, what: str, offset: int | None) -> None:
        super().__init__(what)
        self.what = what
        self.offset = offset


class Reader:
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
            raise Damaged(
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
            raise Damaged(f"file ends at byte {len(self.buf)} while {self.size} were expected", end)

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def i64(self, what: str) -> int:
        self.need(8, what)
        (v,) = I64.unpack_from(self.buf, self.pos)
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
            raise Damaged(f"{what} claims {n} bytes (limit {cap})", at)
        if n > self.size - self.pos:
            raise Damaged(
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
        unpack = U64.unpack_from
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
                    raise Damaged(
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


def read_value(r: Reader, vtype: int, key: str, depth: int, type_at: int) -> Any:
    """One metadata value of GGUF type `vtype` at r.pos (the type id was at `type_at`)."""
    spec = GGUF_VALUE_TYPES.get(vtype)
    if spec is None:
        raise Damaged(f"key '{show(key)}' has unknown value type {vtype}", type_at)
    name, fmt, size = spec
    if vtype == T_STRING:
        at = r.pos
        raw = r.string(f"string value of '{show(key)}'")
        try:
            # specli decodes these (names, chat template) strictly; GGUF strings are UTF-8
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Damaged(f"string value of '{show(key)}' is not UTF-8 (byte {at + 8 + e.start})", at) from None
    if vtype == T_ARRAY:
        return read_array(r, key, depth + 1)
    assert fmt is not None
    r.need(size, f"{name} value of '{show(key)}'")
    (v,) = struct.unpack_from(fmt, r.buf, r.pos)
    r.pos += size
    return bool(v) if vtype == 7 else v


def read_array(r: Reader, key: str, depth: int) -> GgufArray:
    at = r.pos
    if depth > MAX_DEPTH:
        raise Damaged(f"key '{show(key)}' nests arrays deeper than {MAX_DEPTH} levels", at)
    etype = r.u32(f"array element type of '{show(key)}'")
    spec = GGUF_VALUE_TYPES.get(etype)
    if spec is None:
        raise Damaged(f"array '{show(key)}' has unknown element type {etype}", at)
    ename, fmt, esize = spec
    count_at = r.pos
    count = r.u64(f"array length of '{show(key)}'")
    remain = r.size - r.pos
    if count > MAX_ARRAY:
        raise Damaged(f"array '{show(key)}' claims {count} elements (limit {MAX_ARRAY})", count_at)
    if count * esize > remain:
        raise Damaged(
            f"array '{show(key)}' of {count} {ename} needs at least {count * esize} bytes "
            f"but only {remain} remain in the file",
            count_at,
        )
    what = f"array '{show(key)}'"
    if etype == T_STRING and key == TOKENS_KEY and depth == 1:
        start = r.pos
        tokens: list[bytes] = []
        r.skip_strings(count, what, tokens)
        check_unique_tokens(r, tokens, start)
        return GgufArray(ename, count, digest=tokens_digest(tokens))
    if etype == T_STRING:
        if count <= SMALL_ARRAY:
            vals = tuple(r.string(f"{what}[{i}]").decode("utf-8", errors="replace") for i in range(count))
            return GgufArray(ename, count, vals)
        r.skip_strings(count, what)
        return GgufArray(ename, count)
    if etype == T_ARRAY:
        subs = tuple(read_array(r, key, depth + 1) for _ in range(count))
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


def check_unique_tokens(r: Reader, tokens: list[bytes], start: int) -> None:
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
            raise Damaged(
                f"vocabulary token {i} ('{show(t.decode('utf-8', 'replace'))}') repeats token {first[t]}", pos
            )
        first[t] = i
        pos += 8 + int(U64.unpack_from(r.buf, pos)[0])
