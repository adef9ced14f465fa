"""Shared fixtures: real GGUF models from the registry (pulled by scripts/test.sh)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SMOL = "smollm2-135m-instruct-q4_1"
GEMMA = "gemma-3-270m-q4_k_m"
QWEN_DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m"
QWEN_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
QWEN_F16 = "qwen2.5-coder-1.5b-instruct-f16"


def _own_dir(factory: pytest.TempPathFactory, name: str, var: str) -> Iterator[Path]:
    """A folder of the test session's own in environment variable `var` (subprocesses
    inherit it), the old value put back after."""
    path = factory.mktemp(name)
    old = os.environ.get(var)
    os.environ[var] = str(path)
    yield path
    if old is None:
        os.environ.pop(var, None)
    else:
        os.environ[var] = old


@pytest.fixture(autouse=True, scope="session")
def _own_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Generations in tests keep their history in a directory of the test session's own,
    never in the user's store."""
    yield from _own_dir(tmp_path_factory, "history", "SPECLI_HISTORY_DIR")


@pytest.fixture(autouse=True, scope="session")
def _own_prompt_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Servers in tests keep their prompt cache's files in the test session's own folder."""
    yield from _own_dir(tmp_path_factory, "prompt-cache", "SPECLI_PROMPT_CACHE_DIR")


@pytest.fixture(autouse=True, scope="session")
def _own_heads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Heads trained in tests live in the test session's own folder; auto never finds a user's."""
    yield from _own_dir(tmp_path_factory, "heads", "SPECLI_HEADS_DIR")


@pytest.fixture(autouse=True, scope="session")
def _own_model_stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No model a user keeps in LM Studio, Ollama or the Hugging Face and llama.cpp caches,
    and none they added, is found by the tests (`--draft auto` chooses among the test models)."""
    stores = {"SPECLI_LMSTUDIO_MODELS": "lmstudio", "OLLAMA_MODELS": "ollama", "HF_HUB_CACHE": "hf",
              "LLAMA_CACHE": "llama.cpp", "SPECLI_CONFIG_DIR": "config"}
    gens = [_own_dir(tmp_path_factory, name, var) for var, name in stores.items()]
    for g in gens:
        next(g)
    yield
    for g in gens:
        next(g, None)


def total_variation(a: dict[Any, float], b: dict[Any, float]) -> float:
    """Total variation distance between two distributions given as outcome -> mass."""
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def model_file(name: str) -> Path:
    """Path of a pulled registry model; skip (or fail under SPECLI_REQUIRE_MODELS=1)."""
    from specli import registry
    from specli.errors import SpecliError

    try:
        return registry.resolve(name)
    except SpecliError as e:
        if os.environ.get("SPECLI_REQUIRE_MODELS") == "1":
            pytest.fail(f"model {name} missing: {e.one_line()}")
        pytest.skip(f"model {name} not pulled: {e.one_line()}")


def _load(name: str, n_ctx: int = 2048):  # type: ignore[no-untyped-def]
    from specli.backend import LoadOptions, Model

    return Model(model_file(name), LoadOptions(n_ctx=n_ctx))


@pytest.fixture(scope="session")
def smol() -> Iterator[object]:
    m = _load(SMOL)
    yield m
    m.close()


@pytest.fixture(scope="session")
def smol_draft() -> Iterator[object]:
    m = _load(SMOL)
    yield m
    m.close()


@pytest.fixture(scope="session")
def qwen_target() -> Iterator[object]:
    m = _load(QWEN_TARGET, 4096)
    yield m
    m.close()


@pytest.fixture(scope="session")
def qwen_draft() -> Iterator[object]:
    m = _load(QWEN_DRAFT, 4096)
    yield m
    m.close()


@pytest.fixture(scope="session")
def qwen_calibration(qwen_target: object) -> object:
    """Costs and numerics of the Qwen target with the default (one-batch) options."""
    from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT
    from specli.runtime.measure.calibration import measure

    return measure(qwen_target, None, qwen_target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT])  # type: ignore[attr-defined]
