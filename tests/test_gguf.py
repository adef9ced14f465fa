"""specli.gguf: the bounded GGUF validator, on the real models and on damaged copies.

The fuzz pass damages the SmolLM2 file (truncations, bit flips and overwrites aimed at
every kind of field of the header, the metadata and the tensor table). Each damaged
copy is the (small) damaged header region written into a sparse file of the right
size, so no case writes the 98 MB of weights. The validator must refuse a case with a
one-line ModelError or accept it; nothing else. The accepted cases are then loaded by
the real llama.cpp in a subprocess, which must exit cleanly (0, or a specli error),
never on a signal.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import GEMMA, QWEN_DRAFT, SMOL, model_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specli.errors import ModelError
from specli.gguf import GGML_TYPES, GgufArray, validate_gguf

REAL = {SMOL: "llama", GEMMA: "gemma3", QWEN_DRAFT: "qwen2"}


# -- the real models ---------------------------------------------------------------
@pytest.mark.parametrize("name", list(REAL))
def test_real_models_validate(name: str) -> None:
    path = model_file(name)
    s = validate_gguf(path)
    assert s.version in (2, 3)
    assert s.architecture == REAL[name]
    assert s.n_tensors > 0 and len(s.tensors) == s.n_tensors
    assert s.n_kv == len(s.metadata) > 0
    assert s.alignment == 32
    assert 24 < s.data_offset < s.file_size == path.stat().st_size
    assert s.data_offset % s.alignment == 0
    assert s.data_offset + s.data_size <= s.file_size
    tokens = s.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GgufArray) and tokens.elem_type == "string" and tokens.length > 1000
    assert tokens.values is None  # big arrays keep only their length
    assert s.metadata["general.architecture"] == REAL[name]
    assert all(t.nbytes > 0 and t.ggml_type in {g.name for g in GGML_TYPES.values()} for t in s.tensors)


TYPE_SIZES_SCRIPT = textwrap.dedent(
    """
    import ctypes, json, sys
    from pathlib import Path
    import llama_cpp
    libdir = Path(llama_cpp.__file__).parent / "lib"
    libs = sorted(libdir.glob("libggml-base.*")) + sorted(libdir.glob("libggml.*"))
    if not libs:
        sys.exit(77)
    lib = ctypes.CDLL(str(libs[0]))
    lib.ggml_type_size.restype = ctypes.c_size_t
    lib.ggml_type_size.argtypes = [ctypes.c_int]
    lib.ggml_blck_size.restype = ctypes.c_int64
    lib.ggml_blck_size.argtypes = [ctypes.c_int]
    ids = json.loads(sys.argv[1])
    print(json.dumps({i: [lib.ggml_blck_size(i), lib.ggml_type_size(i)] for i in ids}))
    """
)


def test_ggml_type_table_matches_the_loaded_ggml() -> None:
    """The block / type sizes in specli.gguf are the ones the installed ggml uses
    (asked in a child: an id this ggml does not know would read past its table)."""
    import json

    ids = sorted(GGML_TYPES)
    proc = subprocess.run([sys.executable, "-c", TYPE_SIZES_SCRIPT, json.dumps(ids)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode == 77:
        pytest.skip("no libggml shipped with llama_cpp")
    assert proc.returncode == 0, proc.stderr[-2000:]
    sizes = json.loads(proc.stdout)
    for type_id, t in GGML_TYPES.items():
        assert sizes[str(type_id)] == [t.block_size, t.type_size], t.name


# -- not GGUF at all -----------------------------------------------------------------
def _refused(path: Path) -> ModelError:
    with pytest.raises(ModelError) as ei:
        validate_gguf(path)
    err = ei.value
    assert "\n" not in err.one_line()
    assert str(path) in err.message
    return err


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.gguf"
    p.write_bytes(b"")
    assert "empty" in _refused(p).message


def test_random_bytes(tmp_path: Path) -> None:
    p = tmp_path / "random.gguf"
    p.write_bytes(random.Random(7).randbytes(100_000))
    assert "not a GGUF file" in _refused(p).message


def test_text_file(tmp_path: Path) -> None:
    p = tmp_path / "model.gguf"
    p.write_text("this is not a model\n" * 100)
    assert "not a GGUF file" in _refused(p).message


def test_short_files(tmp_path: Path) -> None:
    p = tmp_path / "short.gguf"
    p.write_bytes(b"hi")
    assert "not a GGUF file" in _refused(p).message
    p.write_bytes(b"GGUF\x03\0")
    assert "shorter than a GGUF header" in _refused(p).message


def test_directory_and_missing(tmp_path: Path) -> None:
    assert "directory" in _refused(tmp_path).message
    assert "not found" in _refused(tmp_path / "nope.gguf").message


# -- synthetic files -------------------------------------------------------------------
def _s(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    return _s(key.encode()) + struct.pack("<I", vtype) + payload


def _tensor(name: str, dims: list[int], type_id: int, offset: int) -> bytes:
    return (_s(name.encode()) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<q", d) for d in dims)
            + struct.pack("<I", type_id) + struct.pack("<Q", offset))


def _gguf(kvs: list[bytes], tensors: list[bytes], data: int, version: int = 3, align: int = 32) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(tensors)
    pad = -len(head) % align if tensors else 0
    return head + b"\0" * (pad + data)


ARCH = _kv("general.architecture", 8, _s(b"llama"))


def _tokens(*words: bytes) -> bytes:
    return _kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, len(words)) + b"".join(_s(w) for w in words))


def _u32(key: str, v: int) -> bytes:
    return _kv(key, 4, struct.pack("<I", v))


def _f32(key: str, v: float) -> bytes:
    return _kv(key, 6, struct.pack("<f", v))


def test_synthetic_valid_tokenizer_and_hparams(tmp_path: Path) -> None:
    kvs = [ARCH, _tokens(b"", b"", b"x"), _u32("tokenizer.ggml.bos_token_id", 2), _u32("llama.block_count", 512),
           _f32("llama.attention.layer_norm_rms_epsilon", 1e-6), _u32("llama.expert_count", 8),
           _u32("llama.expert_used_count", 2)]
    p = tmp_path / "ok.gguf"
    p.write_bytes(_gguf(kvs, [], 0))
    s = validate_gguf(p)  # two empty tokens are distinct ([EMPTY_0], [EMPTY_1]) for llama.cpp
    assert s.metadata["tokenizer.ggml.tokens"].length == 3 and s.n_tensors == 0


def test_synthetic_valid_with_nested_arrays(tmp_path: Path) -> None:
    nested = struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 4, 2) + struct.pack("<II", 1, 2) + struct.pack("<IQ", 8, 1) + _s(b"x")
    kvs = [ARCH, _kv("a.nested", 9, nested), _kv("a.f", 6, struct.pack("<f", 0.5)), _kv("a.b", 7, b"\x01")]
    tensors = [_tensor("w", [64, 2], 0, 0), _tensor("q", [32], 2, 512)]
    p = tmp_path / "ok.gguf"
    p.write_bytes(_gguf(kvs, tensors, 512 + 32))
    s = validate_gguf(p)
    assert s.architecture == "llama" and s.n_tensors == 2 and s.metadata["a.b"] is True
    arr = s.metadata["a.nested"]
    assert arr.length == 2 and arr.values is not None and arr.values[0].values == (1, 2)
    assert [t.nbytes for t in s.tensors] == [512, 18]


@pytest.mark.parametrize(
    "kvs, tensors, data, needle",
    [
        ([ARCH, ARCH], [], 0, "duplicate metadata key"),
        ([_kv("", 4, b"\0" * 4)], [], 0, "empty key"),
        ([_kv("a\nb", 4, b"\0" * 4)], [], 0, "printable ASCII"),
        ([_kv("a.x", 13, b"\0" * 8)], [], 0, "unknown value type 13"),
        ([_kv("a.x", 9, struct.pack("<IQ", 99, 0))], [], 0, "unknown element type 99"),
        ([_kv("a.x", 9, struct.pack("<IQ", 4, 2**31 + 1))], [], 0, "limit"),
        ([_kv("a.x", 9, struct.pack("<IQ", 4, 10**6))], [], 0, "remain"),
        ([_kv("a.x", 9, struct.pack("<IQ", 9, 1) * 6 + struct.pack("<IQ", 4, 0))], [], 64, "deeper"),
        ([_kv("a.x", 8, struct.pack("<Q", 2**40))], [], 0, "limit"),
        ([_kv("a.x", 8, _s(b"\xff\xfe"))], [], 0, "UTF-8"),
        ([_kv("general.alignment", 5, struct.pack("<i", 32))], [], 0, "must be a u32"),
        ([_kv("general.alignment", 4, struct.pack("<I", 48))], [], 0, "power of two"),
        ([_tokens(b"a", b"b", b"a")], [], 0, "vocabulary token 2 ('a') repeats token 0"),
        ([_tokens(b"", b"[EMPTY_0]")], [], 0, "repeats token 0"),
        ([_tokens(b"a", b"b"), _u32("tokenizer.ggml.bos_token_id", 2)], [], 0, "outside the 2-token vocabulary"),
        ([_tokens(b"a", b"b"), _kv("tokenizer.ggml.scores", 9, struct.pack("<IQf", 6, 1, 0.0))], [], 0,
         "1 entries for 2 vocabulary tokens"),
        ([_tokens(b"a"), _kv("tokenizer.ggml.token_type", 9, struct.pack("<IQf", 6, 1, 0.0))], [], 0,
         "must be an array of i32"),
        ([ARCH, _u32("llama.block_count", 0)], [], 0, "outside 1..512"),
        ([ARCH, _u32("llama.block_count", 513)], [], 0, "outside 1..512"),
        ([ARCH, _f32("llama.attention.layer_norm_rms_epsilon", float("nan"))], [], 0, "is nan"),
        ([ARCH, _f32("llama.attention.layer_norm_rms_epsilon", -1e-5)], [], 0, "negative"),
        ([ARCH, _f32("llama.rope.freq_base", float("inf"))], [], 0, "is inf"),
        ([ARCH, _u32("llama.expert_count", 2000)], [], 0, "exceeds 1024"),
        ([ARCH, _u32("llama.expert_count", 8), _u32("llama.expert_used_count", 9)], [], 0, "exceeds the expert count 8"),
        ([ARCH, _u32("llama.expert_used_count", 2)], [], 0, "exceeds the expert count 0"),
        ([ARCH, _u32("llama.block_count", 4), _u32("llama.nextn_predict_layers", 5)], [], 0, "exceeds the 4 layers"),
        ([ARCH], [_tensor("w", [64, 2, 1, 1, 1], 0, 0)], 512, "dimensions"),
        ([ARCH], [_tensor("w", [64, -2], 0, 0)], 512, "negative"),
        ([ARCH], [_tensor("w", [2**62, 4], 0, 0)], 512, "overflows"),
        ([ARCH], [_tensor("w", [64], 4, 0)], 512, "unknown ggml type id 4"),
        ([ARCH], [_tensor("w", [64], 99, 0)], 512, "unknown ggml type id 99"),
        ([ARCH], [_tensor("w", [48], 2, 0)], 512, "not a multiple of the Q4_0 block size"),
        ([ARCH], [_tensor("w", [64], 0, 16)], 512, "alignment"),
        ([ARCH], [_tensor("w", [64], 0, 512)], 512, "outside"),
        ([ARCH], [_tensor("w", [64], 0, 0), _tensor("v", [64], 0, 64)], 512, "inside tensor 'w'"),
        ([ARCH], [_tensor("w", [64], 0, 0), _tensor("w", [64], 0, 256)], 512, "duplicate tensor name"),
        ([ARCH], [_tensor("x" * 64, [64], 0, 0)], 512, "limit 63"),
        ([ARCH], [_tensor("a\0b", [64], 0, 0)], 512, "control characters"),
    ],
)
def test_synthetic_damage(tmp_path: Path, kvs: list[bytes], tensors: list[bytes], data: int, needle: str) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(_gguf(kvs, tensors, data))
    err = _refused(p)
    assert needle in err.message, err.message
    assert "at byte" in err.message


@pytest.mark.parametrize(
    "head, needle",
    [
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1"),
        (b"GGUF" + struct.pack("<IQQ", 4, 0, 0), "version 4"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
        (b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0), "tensor count"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 2**40), "metadata count"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1), "impossible"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _s(b"a.b") + struct.pack("<I", 4), "truncated"),
        (b"GGU", "shorter than a GGUF header"),
    ],
)
def test_synthetic_header_damage(tmp_path: Path, head: bytes, needle: str) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(head)
    assert needle in _refused(p).message


SYNTH = _gguf(
    [ARCH, _tokens(b"a", b"b", b"cd", b""), _u32("tokenizer.ggml.bos_token_id", 1), _u32("llama.block_count", 2),
     _f32("llama.attention.layer_norm_rms_epsilon", 1e-5), _kv("general.alignment", 4, struct.pack("<I", 32)),
     _kv("a.nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 5, 2) + struct.pack("<ii", -1, 7))],
    [_tensor("w", [64, 2], 0, 0), _tensor("q", [32], 2, 512)],
    512 + 32,
)


def test_synthetic_base_file_is_valid(tmp_path: Path) -> None:
    p = tmp_path / "synth.gguf"
    p.write_bytes(SYNTH)
    s = validate_gguf(p)
    assert (s.n_kv, s.n_tensors, s.metadata["llama.block_count"]) == (7, 2, 2)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    patches=st.lists(st.tuples(st.integers(0, len(SYNTH) - 1), st.integers(0, 255)), max_size=4),
    cut=st.one_of(st.none(), st.integers(0, len(SYNTH))),
)
def test_mutated_synthetic_file_only_model_errors(tmp_path: Path, patches: list[tuple[int, int]], cut: int | None) -> None:
    data = bytearray(SYNTH)
    for at, byte in patches:
        data[at] = byte
    p = tmp_path / "mutant.gguf"
    p.write_bytes(bytes(data[:cut]))
    try:
        s = validate_gguf(p)
    except ModelError as e:
        assert "\n" not in e.one_line()
        return
    assert s.data_offset <= s.file_size and s.data_offset + s.data_size <= s.file_size


# -- fuzzing a real file ---------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    region: str  # header | metadata | tensors
    kind: str
    offset: int
    size: int


@dataclass(frozen=True)
class Layout:
    fields: list[Field]
    tensors_start: int  # first byte of the tensor info table
    table_end: int
    data_offset: int


def layout(buf: bytes) -> Layout:
    """Where every field of a (good) GGUF header lies; independent of specli.gguf."""
    fields = [Field("header", "magic", 0, 4), Field("header", "version", 4, 4),
              Field("header", "n_tensors", 8, 8), Field("header", "n_kv", 16, 8)]
    _, _, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string(region: str, kind: str) -> None:
        nonlocal pos
        (n,) = struct.unpack_from("<Q", buf, pos)
        fields.append(Field(region, f"{kind}_len", pos, 8))
        if n:
            fields.append(Field(region, kind, pos + 8, n))
        pos += 8 + n

    for _ in range(n_kv):
        (key_len,) = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8 : pos + 8 + key_len]
        string("metadata", "key")
        (vt,) = struct.unpack_from("<I", buf, pos)
        fields.append(Field("metadata", "type_tag", pos, 4))
        pos += 4
        if vt == 9:
            (et, count) = struct.unpack_from("<IQ", buf, pos)
            fields.append(Field("metadata", "array_type", pos, 4))
            fields.append(Field("metadata", "array_count", pos + 4, 8))
            pos += 12
            if et == 8:
                for i in range(count):
                    if i < 8 or i % 997 == 0:
                        string("metadata", "token" if key == b"tokenizer.ggml.tokens" else "array_string")
                    else:
                        (n,) = struct.unpack_from("<Q", buf, pos)
                        pos += 8 + n
            else:
                fields.append(Field("metadata", "array_data", pos, count * sizes[et]))
                pos += count * sizes[et]
        elif vt == 8:
            string("metadata", "string_value")
        else:
            fields.append(Field("metadata", "value", pos, sizes[vt]))
            pos += sizes[vt]
    tensors_start = pos
    for _ in range(n_tensors):
        string("tensors", "name")
        (nd,) = struct.unpack_from("<I", buf, pos)
        fields.append(Field("tensors", "n_dims", pos, 4))
        pos += 4
        for _ in range(nd):
            fields.append(Field("tensors", "dim", pos, 8))
            pos += 8
        fields.append(Field("tensors", "ggml_type", pos, 4))
        fields.append(Field("tensors", "offset", pos + 4, 8))
        pos += 12
    return Layout(fields, tensors_start, pos, pos + (-pos % 32))


@dataclass(frozen=True)
class Case:
    label: str
    size: int  # of the damaged file
    patches: tuple[tuple[int, bytes], ...] = ()


INTERESTING = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 0x7F, 0xFF, 0x100, 0xFFFF, 2**31 - 1, 2**31, 2**32 - 1,
               2**63 - 1, 2**63, 2**64 - 1]


def fuzz_cases(buf: bytes, lay: Layout, file_size: int, seed: int = 1234) -> list[Case]:
    rng = random.Random(seed)
    cases: list[Case] = []
    mid_meta = (24 + lay.tensors_start) // 2
    mid_table = (lay.tensors_start + lay.table_end) // 2
    cuts = [0, 3, 4, 8, 16, 24, 25, mid_meta, lay.tensors_start, mid_table, lay.table_end,
            lay.data_offset - 1, lay.data_offset, lay.data_offset + 1, file_size // 2, file_size - 1]
    cases += [Case(f"truncate@{c}", c) for c in cuts]

    by_region: dict[str, list[Field]] = {}
    for f in lay.fields:
        by_region.setdefault(f.region, []).append(f)
    # structural fields (lengths, tags, counts, dims, types, offsets) get most of the hits
    structural = {"magic", "version", "n_tensors", "n_kv", "key_len", "type_tag", "array_type", "array_count",
                  "array_string_len", "token_len", "string_value_len", "name_len", "n_dims", "dim", "ggml_type", "offset"}
    for region, n_flip, n_over in (("header", 12, 8), ("metadata", 40, 24), ("tensors", 40, 24)):
        fields = by_region[region]
        hot = [f for f in fields if f.kind in structural] or fields
        for i in range(n_flip):
            f = rng.choice(hot if i % 4 else fields)
            at = f.offset + rng.randrange(f.size)
            bit = rng.randrange(8)
            cases.append(Case(f"flip {region}.{f.kind}@{at}.{bit}", file_size,
                              ((at, bytes([buf[at] ^ (1 << bit)])),)))
        for _ in range(n_over):
            f = rng.choice(hot)
            v = rng.choice(INTERESTING)
            if rng.random() < 0.3 and f.size <= 8:  # near the real value
                v = int.from_bytes(buf[f.offset : f.offset + f.size], "little") + rng.choice([-1, 1, 2, 32])
            raw = (v % 2 ** (8 * min(f.size, 8))).to_bytes(min(f.size, 8), "little")
            cases.append(Case(f"set {region}.{f.kind}@{f.offset}={v}", file_size, ((f.offset, raw),)))
    for _ in range(16):  # random bytes anywhere in the header region
        at = rng.randrange(lay.data_offset)
        cases.append(Case(f"byte@{at}", file_size, ((at, bytes([rng.randrange(256)])),)))
    # hyperparameters and token ids (llama.cpp asserts on some damaged values)
    values = [f for f in lay.fields if f.kind == "value"]
    for _ in range(16):
        f = rng.choice(values)
        raw = rng.choice([b"\0", b"\xff", b"\x01", b"\x80"]) * f.size
        cases.append(Case(f"set metadata.value@{f.offset}={raw.hex()}", file_size, ((f.offset, raw),)))
    # one vocabulary token overwritten with the text of another of the same length
    words = [f for f in lay.fields if f.kind == "token" and f.size >= 3]
    for _ in range(4):
        a = rng.choice(words)
        text = buf[a.offset : a.offset + a.size]
        same = [w for w in words if w.size == a.size and buf[w.offset : w.offset + w.size] != text]
        if same:
            b = rng.choice(same)
            cases.append(Case(f"copy token@{b.offset}->@{a.offset}", file_size,
                              ((a.offset, buf[b.offset : b.offset + b.size]),)))
    return cases


def write_case(path: Path, buf: bytes, case: Case) -> None:
    head = bytearray(buf[: min(case.size, len(buf))])
    for at, raw in case.patches:
        head[at : at + len(raw)] = raw
    with path.open("wb") as f:
        f.write(head)
        f.truncate(case.size)  # sparse: the weights read as zeros


LOAD_SCRIPT = textwrap.dedent(
    """
    import sys
    from specli.errors import ModelError, SpecliError
    try:
        from specli.backend import LoadOptions, Model
        with Model(sys.argv[1], LoadOptions(n_ctx=256, n_threads=1)) as m:
            toks = m.tokenize("Hello there")[:8] or [0]
            m.decode(toks, [len(toks) - 1])
    except SpecliError as e:
        print(type(e).__name__, e.one_line(), file=sys.stderr)
        sys.exit(3 if isinstance(e, ModelError) else 4)
    """
)
# exit codes of LOAD_SCRIPT that mean "handled": loaded and decoded, refused with a
# ModelError, or another specli error (e.g. BackendError from the decode)
CLEAN_EXITS = (0, 3, 4)
N_LOADS = int(os.environ.get("SPECLI_FUZZ_LOADS", "12"))


def load_in_subprocess(path: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Load and decode in a child; a hang counts as a failure (returncode -1)."""
    try:
        return subprocess.run([sys.executable, "-c", LOAD_SCRIPT, str(path)], capture_output=True, text=True,
                              timeout=timeout, cwd=Path(__file__).resolve().parents[1])
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return subprocess.CompletedProcess(e.cmd, -1, "", f"timed out after {timeout} s\n{err}")


@pytest.mark.fuzz
def test_fuzz_damaged_smollm2(tmp_path: Path) -> None:
    src = model_file(SMOL)
    file_size = src.stat().st_size
    with src.open("rb") as f:
        buf = f.read(4 * 1024 * 1024)
    lay = layout(buf)
    assert lay.data_offset == validate_gguf(src).data_offset
    buf = buf[: lay.data_offset + 64]
    cases = fuzz_cases(buf, lay, file_size)

    accepted: list[Case] = []
    refused = 0
    target = tmp_path / "damaged.gguf"
    for case in cases:
        write_case(target, buf, case)
        try:
            validate_gguf(target)
        except ModelError as e:
            msg = e.one_line()
            assert "\n" not in msg and msg.startswith(f"damaged GGUF file {target}: "), (case, msg)
            refused += 1
            continue
        except Exception as e:  # anything but ModelError is a validator bug
            pytest.fail(f"{case.label}: validate_gguf raised {e!r}")
        accepted.append(case)
    truncated = [c for c in cases if c.label.startswith("truncate")]
    assert all(c not in accepted for c in truncated), "every truncation must be refused"
    assert refused > len(cases) // 3

    # the real llama.cpp on (a fixed sample of) what the validator let through
    sample = random.Random(99).sample(accepted, min(N_LOADS, len(accepted)))
    failures = []
    for i, case in enumerate(sample):
        path = tmp_path / f"accepted{i}.gguf"
        write_case(path, buf, case)
        proc = load_in_subprocess(path)
        if proc.returncode not in CLEAN_EXITS:
            failures.append(f"{case.label}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        path.unlink()
    print(f"fuzz: {len(cases)} damaged copies, {refused} refused, {len(accepted)} accepted, "
          f"{len(sample)} of those loaded by llama.cpp")
    assert not failures, "\n".join(failures)


def _value_offset(buf: bytes, key: str) -> int:
    """Offset of the scalar value of metadata `key` (its u64 length, key, u32 type precede it)."""
    at = buf.find(struct.pack("<Q", len(key)) + key.encode())
    assert at > 0, key
    return at + 8 + len(key) + 4


def _token_offset(buf: bytes, index: int) -> tuple[int, int]:
    """(offset, length) of the text of vocabulary token `index`."""
    key = b"tokenizer.ggml.tokens"
    pos = buf.find(struct.pack("<Q", len(key)) + key) + 8 + len(key) + 4 + 12
    for _ in range(index):
        pos += 8 + struct.unpack_from("<Q", buf, pos)[0]
    return pos + 8, struct.unpack_from("<Q", buf, pos)[0]


def test_damage_that_crashes_llama_cpp_is_refused(tmp_path: Path) -> None:
    """Damage found by the fuzz pass that makes llama.cpp abort the whole process
    (GGML_ASSERT) or hang: the validator refuses each before llama.cpp sees it."""
    src = model_file(SMOL)
    with src.open("rb") as f:
        buf = f.read(4 * 1024 * 1024)
    buf = buf[: layout(buf).data_offset]
    size = src.stat().st_size
    # two vocabulary tokens with the same text: GGML_ASSERT(id_to_token.size() == token_to_id.size())
    a_off, a_len = _token_offset(buf, 1000)
    b_off, b_len = next(_token_offset(buf, i) for i in range(1001, 5000) if _token_offset(buf, i)[1] == a_len)
    block = _value_offset(buf, "llama.block_count")
    eps = _value_offset(buf, "llama.attention.layer_norm_rms_epsilon")
    cases = {
        "duplicate token": ((a_off, buf[b_off : b_off + b_len]), "repeats token"),
        # GGML_ASSERT(n_layer_all > 0 && n_layer_all <= LLAMA_MAX_LAYERS)
        "block_count 0": ((block, struct.pack("<I", 0)), "outside 1..512"),
        "block_count 65535": ((block, struct.pack("<I", 65535)), "outside 1..512"),
        # GGML_ASSERT(eps >= 0.0f) in rms_norm; NaN hung or aborted
        "negative epsilon": ((eps, struct.pack("<f", -1e-5)), "negative"),
        "NaN epsilon": ((eps, b"\xff" * 4), "nan"),
        "bos outside the vocabulary": ((_value_offset(buf, "tokenizer.ggml.bos_token_id"), b"\xff" * 4), "outside"),
    }
    path = tmp_path / "crasher.gguf"
    for label, (patch, needle) in cases.items():
        write_case(path, buf, Case(label, size, (patch,)))
        with pytest.raises(ModelError) as ei:
            validate_gguf(path)
        assert needle in ei.value.message, (label, ei.value.message)


@pytest.mark.fuzz
def test_undamaged_sparse_copy_loads(tmp_path: Path) -> None:
    """Control for the fuzz pass: the sparse copy itself loads (zero weights decode)."""
    src = model_file(SMOL)
    with src.open("rb") as f:
        buf = f.read(4 * 1024 * 1024)
    path = tmp_path / "copy.gguf"
    write_case(path, buf[: layout(buf).data_offset], Case("copy", src.stat().st_size))
    validate_gguf(path)
    proc = load_in_subprocess(path)
    assert proc.returncode == 0, proc.stderr[-500:]
