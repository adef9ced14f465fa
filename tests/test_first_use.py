"""A first run measures only what it needs, says so first, and leaves the rest to
`specli calibrate` (runtime.measure.first_use), on the real SmolLM2 pair."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SMOL, model_file

from specli import profiles
from specli.backend import LoadOptions, Model
from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT, open_runtime
from specli.runtime.measure import calibration, first_use
from specli.runtime.measure.first_use import Why


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Model, Model]]:
    target = Model(model_file(SMOL), LoadOptions(n_ctx=512))
    draft = Model(model_file(SMOL), LoadOptions(n_ctx=512))
    yield target, draft
    draft.close()
    target.close()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECLI_MODELS_DIR", str(model_file(SMOL).parent))  # the models stay where they are
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "specli" / "calibration.json"


def test_a_cold_start_says_what_it_measures_first_then_measures_only_that(
        pair: tuple[Model, Model], cache: Path) -> None:
    target, draft = pair
    context = target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
    said: list[tuple[str, int]] = []
    say = lambda text: said.append((text, target.n_past))  # noqa: E731 - the cache's state when it was said
    cal = first_use.load_or_quick("pair", "solo", target, draft, context, say, Why(exact=True, pair=True, ctx=512))
    assert said[0][1] == 0 and said[0][0].startswith("first use of --exact with this pair here: measuring")
    assert "specli calibrate --exact --ctx 512" in said[0][0] and "--drafter none" in said[0][0]
    assert "a plain step takes" in said[1][0] and "left" in said[1][0]
    assert said[-1][0].startswith("measured in") and "about" in said[-1][0]
    assert cal.quick and cal.sizes == [1, *first_use.QUICK_SIZES] and len(cal.ratios) == len(cal.sizes)
    assert cal.draft_ratio > 0 and cal.exact_batch >= 1 and cal.t1 > 0
    assert cal.exact_batch == calibration.measure_exact_batch(target, context)  # as `measure` finds it
    assert calibration.load("pair") == cal and target.n_past == 0 and draft.n_past == 0
    said.clear()
    assert first_use.load_or_quick("pair", "solo", target, draft, context, say, Why(True, True)) == cal
    assert said == []  # stored: nothing measured, nothing said


def test_a_pair_whose_target_was_calibrated_alone_measures_its_draft_token_only(
        pair: tuple[Model, Model], cache: Path) -> None:
    target, draft = pair
    context = target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
    solo = calibration.Calibration(0.004, [1, 2, 4], [1.0, 1.2, 1.5], exact_batch=4, max_logit_diff=0.01,
                                   measured="then")
    calibration.store("solo", solo)
    said: list[str] = []
    cal = first_use.load_or_quick("pair", "solo", target, draft, context, said.append, Why(True, True))
    assert len(said) == 2 and "draft model's token" in said[0] and "plain steps" in said[1]
    assert replace(cal, draft_ratio=0.0, measured="then") == solo and cal.draft_ratio > 0
    assert calibration.load("pair") == cal


def test_the_full_measurement_replaces_a_quick_table(pair: tuple[Model, Model], cache: Path) -> None:
    """bench, serve and `specli calibrate` measure a quick table in full; a runtime that
    announces (generate, chat) uses it as it is, and never times the context axis itself."""
    target, _ = pair
    context = target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
    quick = first_use.measure_quick(target, None, context)
    calibration.store("k", quick)
    full = calibration.load_or_measure("k", target, None, context)
    assert not full.quick and full.sizes == list(calibration.SIZES) and calibration.load("k") == full


def test_a_runtime_that_announces_measures_quickly_and_defers_the_context_axis(cache: Path) -> None:
    s = profiles.resolve_settings(None, {"target": SMOL, "draft": SMOL, "drafter": "auto", "ctx": 2048,
                                         "verify": "exact"})
    rt = open_runtime(s)
    try:
        said: list[str] = []
        rt.announce = said.append
        assert not rt.calibration_stored()
        rt.drafter()
        assert rt.calibration().quick and said and "first use of --exact with this pair" in said[0]
        assert not rt.calibration().contexts  # 2048 tokens has context points: not measured by itself
        assert not rt.calibration_stored()  # serve and bench would still measure it in full
        assert rt.target.exact_batch == rt.calibration().exact_batch
    finally:
        rt.close()


def test_full_seconds_grows_with_the_context() -> None:
    cal = calibration.Calibration(0.05, [1, 2, 4, 8, 16, 33], [1.0, 1.2, 1.5, 2.2, 3.8, 7.0], draft_ratio=0.3)
    short, long = first_use.full_seconds(cal, 512, 128, True), first_use.full_seconds(cal, 16384, 128, True)
    assert 5 < short < 60 and long > 10 * short
