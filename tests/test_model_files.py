"""Each model file is read once before its weights load: one validation of its GGUF
structure and one tokenizer (vocabulary-only) load, shared by the pair check, context
fitting and loading, on the real models."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import pytest
from conftest import QWEN_DRAFT, QWEN_TARGET, SMOL, model_file

from specli import profiles, runtime
from specli.backend import ModelFile, read_model_file, read_model_info
from specli.gguf import validate


class Reads:
    """How often each path was validated and handed to llama.cpp (vocabulary only or with weights)."""

    def __init__(self) -> None:
        self.validated: collections.Counter[Path] = collections.Counter()
        self.vocab_loads: collections.Counter[Path] = collections.Counter()
        self.weight_loads: collections.Counter[Path] = collections.Counter()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    counts = Reads()
    reader = validate.Reader
    load = llama_cpp.llama_model_load_from_file

    def counting_reader(f: Any, size: int) -> Any:  # every validate_gguf reads through one Reader
        counts.validated[Path(f.name).resolve()] += 1
        return reader(f, size)

    def counting_load(path: bytes, params: Any) -> Any:
        loads = counts.vocab_loads if params.vocab_only else counts.weight_loads
        loads[Path(path.decode()).resolve()] += 1
        return load(path, params)

    monkeypatch.setattr(validate, "Reader", counting_reader)
    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", counting_load)
    yield counts


def _open(overrides: dict[str, Any]) -> runtime.Runtime:
    s = profiles.resolve_settings(None, {"ctx": 256, **overrides})
    return runtime.open_runtime(s)


def test_default_pair_reads_each_file_once(reads: Reads) -> None:
    """`specli generate` with the default profile: the Qwen target and its draft."""
    target, draft = model_file(QWEN_TARGET).resolve(), model_file(QWEN_DRAFT).resolve()
    rt = _open({})
    try:
        assert rt.draft is not None and rt.n_common == 151936
    finally:
        rt.close()
    # choosing the draft reads the metadata of the other local models (smaller ones), never their tokenizers
    assert (reads.validated[target], reads.validated[draft]) == (1, 1)
    for counter in (reads.vocab_loads, reads.weight_loads):
        assert counter == {target: 1, draft: 1}


def test_model_drafting_for_itself_is_read_once(reads: Reads) -> None:
    smol = model_file(SMOL).resolve()
    rt = _open({"target": SMOL, "draft": SMOL, "drafter": "draft"})
    try:
        assert rt.draft is not None
    finally:
        rt.close()
    assert reads.validated == reads.vocab_loads == {smol: 1}
    assert reads.weight_loads == {smol: 2}  # two contexts, two copies of the weights


def test_a_model_file_read_once_is_not_checked_again_when_loaded(reads: Reads) -> None:
    from specli.backend import LoadOptions, Model

    smol = model_file(SMOL).resolve()
    with read_model_file(smol) as f:
        assert isinstance(f, ModelFile)
        assert f.gguf.architecture == f.info.architecture == "llama"
        assert f.info.n_vocab == f.vocab.n_vocab == 49152
    with Model(f, LoadOptions(n_ctx=64)) as m:
        assert m.path == smol
    with Model(smol, LoadOptions(n_ctx=64)):  # a path is checked first
        pass
    assert reads.validated == {smol: 2} and reads.weight_loads == {smol: 2}


def test_model_info_record_matches_the_dict() -> None:
    path = model_file(SMOL)
    with read_model_file(path) as f:
        info = f.info
    d = read_model_info(path)
    assert list(d) == ["architecture", "model_name", "context_length", "vocab_type", "n_vocab", "bos", "eos",
                       "add_bos", "has_chat_template", "kv_bytes_per_token"]
    assert d["context_length"] == info.context_length == 8192
    assert d["kv_bytes_per_token"] == info.kv_bytes_per_token > 0


def test_vocab_key_is_shared_by_models_with_the_same_token_ids() -> None:
    """The history store is keyed by a hash of the tokens' texts, taken during the file's
    check: the Qwen2.5-Coder 0.5B and 1.5B share it, SmolLM2 does not."""
    from specli.backend import read_model_file
    from specli.gguf.format import TOKENS_KEY

    digests = {}
    for name in (QWEN_DRAFT, QWEN_TARGET, SMOL):
        with read_model_file(model_file(name)) as f:
            digests[name] = f.gguf.metadata[TOKENS_KEY].digest
    assert digests[QWEN_DRAFT] == digests[QWEN_TARGET] != digests[SMOL]
    assert all(d and len(d) == 16 for d in digests.values())
