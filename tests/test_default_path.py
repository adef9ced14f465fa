"""The path users take with no options: the default profile's `auto` drafter (draft model,
n-gram index, earlier outputs) priced by a calibration measured on first use and cached,
and `hybrid`, end to end through `specli generate` on real models."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import QWEN_DRAFT, QWEN_TARGET, SMOL, model_file
from typer.testing import CliRunner

from specli.cli import app
from specli.runtime.measure import calibration, first_use

runner = CliRunner()


@dataclass(frozen=True)
class Case:
    models: tuple[str, ...]  # registry names the case needs
    options: tuple[str, ...]  # on top of the default profile, for every run
    exact: bool  # verify --exact (and a baseline on the same KV cache type)
    prompt: str
    n: int


CASES = {
    # the default profile as shipped: its Qwen pair, auto, draft_max 64. The Q4_K_M target's
    # batches are not bit-identical to one-token decoding (outputs may part at near-ties),
    # so verify --exact
    "qwen-pair": Case((QWEN_TARGET, QWEN_DRAFT), (), True,
                      "Repeat this line four times: for i in range(10): print(i)", 40),
    # SmolLM2 drafting for itself, one-batch verification (the default): its batches of up
    # to 33 rows measure bit-identical to one-token decoding, and 32 tokens stay below that
    "smollm-self": Case((SMOL,), ("--target", SMOL, "--draft", SMOL), False,
                        'Write the word "apple" twenty times, separated by commas.', 32),
}


@pytest.fixture
def calibration_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Caches, history and user profiles of the test's own; models stay where they are.
    No user profile can shadow the shipped default. Returns the calibration file."""
    monkeypatch.setenv("SPECLI_MODELS_DIR", str(model_file(SMOL).parent))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECLI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECLI_HISTORY_DIR", str(tmp_path / "history"))
    path = calibration.cache_file()
    assert path.is_relative_to(tmp_path)
    return path


def generate(case: Case, *args: str) -> dict[str, Any]:
    res = runner.invoke(app, ["generate", *case.options, *args, "--json", "-n", str(case.n), "--ctx", "512",
                              case.prompt])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@pytest.mark.parametrize("name", CASES)
def test_default_profile_end_to_end(name: str, calibration_file: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]
    for model in case.models:
        model_file(model)
    spec_args: tuple[str, ...] = ()
    base_args: tuple[str, ...] = ()
    if case.exact:
        # exact mode runs a q8_0 KV cache on CPU: the baseline decodes over one too
        q8 = tmp_path / "q8.yaml"
        q8.write_text("extends: default\nkv_type: q8_0\n")
        spec_args, base_args = ("--exact",), ("--profile", str(q8))
    measured: list[str] = []
    measure, quick = calibration.measure, first_use.measure_quick

    def counted(*args: Any, **kwargs: Any) -> calibration.Calibration:
        measured.append("measure")
        return measure(*args, **kwargs)

    def counted_quick(*args: Any, **kwargs: Any) -> calibration.Calibration:  # a first use's (runtime.measure.first_use)
        measured.append("quick")
        return quick(*args, **kwargs)

    monkeypatch.setattr(calibration, "measure", counted)
    monkeypatch.setattr(first_use, "measure_quick", counted_quick)

    base = generate(case, *base_args, "--drafter", "none")
    assert base["metrics"]["n_drafted"] == 0 and base["n_tokens"] >= case.n // 2
    assert not calibration_file.exists() and measured == []  # plain decoding needs no costs

    # first use: auto measures this machine's costs and caches them; a busy machine (CI's,
    # a developer's) measures again, up to the tries measure_idle allows, and stores the
    # quietest marked provisional with the load it saw
    first = generate(case, *spec_args)
    # the draft: the one named, or with --draft auto (the default) the smallest that pairs (the key says which)
    assert first["settings"]["drafter"] == "auto" and first["settings"]["draft"] in ("auto", case.models[-1])
    assert 1 <= len(measured) <= calibration.MEASURE_TRIES
    entries = json.loads(calibration_file.read_text())["entries"]
    assert len(entries) == 1
    (key, entry), = entries.items()
    draft_file = model_file(case.models[-1]).name
    assert key.startswith(model_file(case.models[0]).name) and draft_file in key.split("|")[1:]
    noise = f"measured batching noise {entry['max_logit_diff']} (nonzero: outputs may part at a near-tie)"
    assert first["text"] == base["text"], noise
    assert first["metrics"]["n_drafted"] > 0 and first["metrics"]["n_accepted"] > 0, first["metrics"]
    assert len(measured) == 1 or (entry["provisional"] and entry["load"]), entry

    # second use: the cached figures, nothing measured again (unless they were measured busy
    # and the machine is idle now: then measured once more, as the product is meant to)
    _, entry = _reused(case, spec_args, base, measured, calibration_file, key, entry, noise)
    hybrid, _ = _reused(case, (*spec_args, "--drafter", "hybrid"), base, measured, calibration_file, key, entry, noise)
    assert hybrid["metrics"]["n_accepted"] > 0, hybrid["metrics"]


def _reused(case: Case, args: tuple[str, ...], base: dict[str, Any], measured: list[str], calibration_file: Path,
            key: str, entry: dict[str, Any], noise: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A generation with stored costs: the target's text, drafted, and the stored entry
    reused as it is, or (a provisional one) measured again at most MEASURE_TRIES times."""
    before = len(measured)
    out = generate(case, *args)
    assert out["text"] == base["text"], noise
    assert out["metrics"]["n_drafted"] > 0, out["metrics"]
    now = json.loads(calibration_file.read_text())["entries"][key]
    if not entry["provisional"]:
        assert len(measured) == before and now["measured"] == entry["measured"]
    else:
        assert len(measured) - before <= calibration.MEASURE_TRIES
    return out, dict(now)


def test_history_drafts_from_earlier_runs(calibration_file: Path, tmp_path: Path) -> None:
    """`suffix` drafts from outputs kept by earlier runs: the second run of a prompt drafts
    its answer from the first's, and its output is still the target's; --no-history keeps
    nothing; `specli cache` shows and clears the store."""
    case = CASES["smollm-self"]
    model_file(SMOL)
    prompt_case = Case(case.models, (*case.options, "--draft-max", "16"), False,
                       "List five fruits, one per line, each with a short description.", 32)
    base = generate(prompt_case, "--drafter", "none")
    assert not (tmp_path / "history").exists() or not any((tmp_path / "history").iterdir())

    unkept = generate(prompt_case, "--drafter", "suffix", "--no-history")
    assert unkept["text"] == base["text"] and "suffix" not in unkept["metrics"]["drafter_steps"]
    assert not (tmp_path / "history").exists() or not list((tmp_path / "history").glob("*.hist"))

    cold = generate(prompt_case, "--drafter", "suffix")
    warm = generate(prompt_case, "--drafter", "suffix")
    assert cold["text"] == base["text"] and warm["text"] == base["text"]
    assert warm["metrics"]["drafter_steps"].get("suffix", 0) > 0
    assert warm["metrics"]["n_target_forwards"] < cold["metrics"]["n_target_forwards"] / 2

    stats = json.loads(runner.invoke(app, ["cache", "stats", "--json"]).stdout)
    assert [(s["n_documents"], s["status"]) for s in stats] == [(2, "ok")]
    assert runner.invoke(app, ["cache", "clear"]).exit_code == 0
    assert json.loads(runner.invoke(app, ["cache", "stats", "--json"]).stdout) == []
