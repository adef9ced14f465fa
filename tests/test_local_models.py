"""Models where people keep them: LM Studio's folder and Ollama's store (built here, as
each tool lays them out), the user's own registry (`specli models add`), found read-only
and run by name; broken ones named with the fix, and nothing in the folders changed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import SMOL, model_file
from typer.testing import CliRunner

from specli.cli import app

runner = CliRunner()
PROMPT = "Say hi."


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and modification time."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = (Path(dirpath) / name).lstat()
            out[str(Path(dirpath) / name)] = (st.st_size, st.st_mtime_ns)
    return out


def lmstudio_folder(root: Path) -> Path:
    """LM Studio's layout, publisher/repo/file.gguf, the file a link to the test model."""
    folder = root / "bartowski" / "SmolLM2-135M-Instruct-GGUF"
    folder.mkdir(parents=True)
    (folder / "SmolLM2-135M-Instruct-Q4_1.gguf").symlink_to(model_file(SMOL))
    return root


def ollama_store(root: Path, name: str = "smollm2", tag: str = "135m", size: int | None = None,
                 blob: bool = True) -> Path:
    """Ollama's layout: a manifest naming a content-addressed blob (a copy of the test
    model, or `size` bytes of it: a blob cut short)."""
    data = model_file(SMOL).read_bytes()
    digest = hashlib.sha256(data if blob else name.encode()).hexdigest()
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    if blob:
        (blobs / f"sha256-{digest}").write_bytes(data[:size] if size is not None else data)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 10}]}))
    return root


def generate(target: str, *args: str) -> tuple[int, str, dict[str, object] | None]:
    res = runner.invoke(app, ["generate", "--target", target, "--ctx", "512", "-n", "8", "--json", *args, PROMPT])
    try:
        out = json.loads(res.stdout)
    except ValueError:
        out = None
    return res.exit_code, res.output, out


def test_lmstudio_and_ollama_models_run_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lms, ollama = lmstudio_folder(tmp_path / "lms"), ollama_store(tmp_path / "ollama")
    monkeypatch.setenv("SPECLI_LMSTUDIO_MODELS", str(lms))
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    before = snapshot(tmp_path)
    listed = runner.invoke(app, ["models", "list", "--json"])
    names = {r["name"]: r for r in json.loads(listed.stdout)}
    assert "lmstudio:bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_1" in names
    assert names["ollama:smollm2:135m"]["role"] == "Ollama"
    plain = generate(SMOL, "--drafter", "none")
    assert plain[0] == 0, plain[1]
    for name in ("lmstudio:bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_1",
                 "SmolLM2-135M-Instruct-Q4_1", "ollama:smollm2:135m", "smollm2:135m"):
        rc, output, out = generate(name, "--drafter", "none")
        assert rc == 0, (name, output)
        assert out is not None and plain[2] is not None and out["text"] == plain[2]["text"]
    assert snapshot(tmp_path) == before  # read-only: nothing written, moved or touched


def test_broken_ollama_models_are_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ollama = ollama_store(tmp_path / "ollama", "cut", "short", size=1 << 20)
    ollama_store(ollama, "gone", "latest", blob=False)
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    before = snapshot(tmp_path)
    rc, output, _ = generate("ollama:cut:short", "--drafter", "none")
    assert rc == 3 and "has 1048576 of" in output and "ollama pull cut:short" in output, output
    rc, output, _ = generate("ollama:gone", "--drafter", "none")
    assert rc == 3 and "missing" in output and "ollama pull" in output, output
    assert "Traceback" not in output
    listed = runner.invoke(app, ["models", "list"])
    assert listed.exit_code == 0 and "not runnable" in listed.output
    assert snapshot(tmp_path) == before


def test_a_name_in_two_places_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECLI_LMSTUDIO_MODELS", str(lmstudio_folder(tmp_path / "lms")))
    cache = tmp_path / "llama.cpp"
    cache.mkdir()
    (cache / "SmolLM2-135M-Instruct-Q4_1.gguf").symlink_to(model_file(SMOL))
    monkeypatch.setenv("LLAMA_CACHE", str(cache))
    rc, output, _ = generate("SmolLM2-135M-Instruct-Q4_1", "--drafter", "none")
    assert rc == 3 and "2 places" in output and "llama.cpp:SmolLM2-135M-Instruct-Q4_1" in output, output
    assert generate("llama.cpp:SmolLM2-135M-Instruct-Q4_1", "--drafter", "none")[0] == 0


def test_models_add_records_a_checked_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECLI_CONFIG_DIR", str(tmp_path / "config"))
    res = runner.invoke(app, ["models", "add", "my-smol", str(model_file(SMOL))])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "config" / "models.yaml").read_text()
    assert hashlib.sha256(model_file(SMOL).read_bytes()).hexdigest() in text
    assert generate("my-smol", "--drafter", "none")[0] == 0
    listed = {r["name"]: r for r in json.loads(runner.invoke(app, ["models", "list", "--json"]).stdout)}
    assert listed["my-smol"]["role"] == "added"
    bad = tmp_path / "notes.gguf"
    bad.write_text("not a model")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model_file(SMOL).read_bytes()[: 1 << 16])
    for name, path, code, words in (("gone", tmp_path / "nope.gguf", 3, "not found"),
                                    ("bad", bad, 3, "GGUF"), ("cut", cut, 3, "damaged"),
                                    ("Bad Name", model_file(SMOL), 4, "bad model name"),
                                    (SMOL, model_file(SMOL), 4, "shipped registry")):
        res = runner.invoke(app, ["models", "add", name, str(path)])
        assert res.exit_code == code and words in res.output, (name, res.output)
    assert "gone" not in (tmp_path / "config" / "models.yaml").read_text()


def test_models_info_lists_the_drafts_that_pair() -> None:
    target = "qwen2.5-coder-1.5b-instruct-q4_k_m"
    model_file(target)
    res = runner.invoke(app, ["models", "info", target, "--json"])
    assert res.exit_code == 0, res.output
    drafts = {d["name"]: d["pairing"] for d in json.loads(res.stdout)["drafts"]}
    assert drafts["qwen2.5-coder-0.5b-instruct-q4_k_m"] == "same vocabulary"
    assert drafts[SMOL] == "across tokenizers"
