"""`specli bench --warm-history`: warm prompts fill the history-reading modes' in-run
history before measuring, unrecorded (issue #14's held-apart split and warm-from-other-
categories check). The plan without models, then one short SmolLM2 run."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SMOL, model_file

from specli import bench
from specli.bench import BenchOptions
from specli.errors import UsageError

SMOL_OVERRIDES = {"target": SMOL, "draft": SMOL, "ctx": 1024, "threads": 1}
POEM = "Write a short poem about the sea and the stars."


@pytest.fixture(autouse=True)
def _own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = tmp_path / "config"
    monkeypatch.setenv("SPECLI_CONFIG_DIR", str(cfg))
    return cfg


def _prompt_file(tmp_path: Path, items: list[tuple[str, str, str]]) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": i, "category": c, "prompt": t}) + "\n" for i, c, t in items))
    return path


def _ids(prompts: list[Any]) -> list[str]:
    return [p.id for p in prompts]


def _five_and_two(tmp_path: Path) -> Path:
    return _prompt_file(tmp_path, [*((f"a{i}", "a", f"prompt a{i}") for i in range(1, 6)),
                                   ("b1", "b", "prompt b1"), ("b2", "b", "prompt b2")])


def test_split_holds_each_categorys_second_half_apart(tmp_path: Path) -> None:
    path = _five_and_two(tmp_path)
    plan = bench.plan_bench(BenchOptions(prompts=path, warm_history="split",
                                         modes="baseline,suffix,ngram,auto:history=false,auto"))
    assert _ids(plan.warm_prompts) == ["a1", "a2", "b1"]  # n // 2 of each category, in the file's order
    assert _ids(plan.prompts) == ["a3", "a4", "a5", "b2"]
    assert [m.name for m in plan.warm_modes] == ["suffix", "auto"]  # only the modes that read history
    assert plan.n_warm_generations == 3 * 2 and plan.n_generations == 4 * 5
    # --limit and --categories choose the set first, then it is halved
    plan = bench.plan_bench(BenchOptions(prompts=path, warm_history="split", limit=4, modes="baseline,suffix"))
    assert _ids(plan.warm_prompts) == ["a1", "b1", "a2"] and _ids(plan.prompts) == ["b2", "a3", "a4"]  # round-robin
    plan = bench.plan_bench(BenchOptions(prompts=path, warm_history="split", categories="a", modes="suffix"))
    assert _ids(plan.warm_prompts) == ["a1", "a2"] and _ids(plan.prompts) == ["a3", "a4", "a5"]
    assert not set(_ids(plan.warm_prompts)) & set(_ids(plan.prompts))
    # without the option nothing warms
    plan = bench.plan_bench(BenchOptions(prompts=path, modes="baseline,suffix"))
    assert plan.warm_prompts == [] and plan.warm_modes == [] and plan.n_warm_generations == 0


def test_others_warms_on_the_categories_not_measured(tmp_path: Path) -> None:
    path = _prompt_file(tmp_path, [("a1", "a", "x"), ("a2", "a", "y"), ("b1", "b", "z"), ("b2", "b", "w"),
                                   ("c1", "c", "v")])
    plan = bench.plan_bench(BenchOptions(prompts=path, warm_history="others", categories="b", modes="baseline,auto"))
    assert _ids(plan.prompts) == ["b1", "b2"] and _ids(plan.warm_prompts) == ["a1", "a2", "c1"]
    plan = bench.plan_bench(BenchOptions(prompts=path, warm_history="others", categories="b,c", limit=1,
                                         modes="baseline,auto"))
    assert _ids(plan.prompts) == ["b1", "c1"] and _ids(plan.warm_prompts) == ["a1"]  # --limit caps both


@pytest.mark.parametrize(("kw", "words"), [
    ({"warm_history": "split", "categories": "b", "limit": 1}, "category 'b' has 1 prompt"),
    ({"warm_history": "others"}, "needs --categories"),
    ({"warm_history": "others", "categories": "a,b"}, "no other category"),
    ({"warm_history": "half"}, "must be split or others"),
    ({"warm_history": "split", "modes": "baseline,ngram,auto:history=false"}, "no mode drafts from history"),
    ({"warm_history": "split", "modes": "baseline,suffix:k=0"}, "no mode drafts from history"),
])
def test_plan_refuses_bad_warm_combinations(tmp_path: Path, kw: dict[str, Any], words: str) -> None:
    opts = BenchOptions(prompts=_five_and_two(tmp_path), **{"modes": "baseline,suffix", **kw})
    with pytest.raises(UsageError) as e:
        bench.plan_bench(opts)
    assert words in e.value.message and "\n" not in e.value.one_line()


def test_warm_split_run_drafts_from_the_held_apart_half(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm prompts run first, unrecorded, and fill the history: the measured twin of
    a warm prompt drafts its answer from the warm output; the mode without history, and
    the baseline, are not warmed; the output stays the baseline's."""
    model_file(SMOL)
    path = _prompt_file(tmp_path, [("p1", "poem", POEM), ("l1", "list", "Name three colors."),
                                   ("p2", "poem", POEM), ("l2", "list", "List five fruits.")])
    seen: list[tuple[str | None, int]] = []
    totals: list[int] = []

    @contextlib.contextmanager
    def progress(console: object, total: int, enabled: bool) -> Iterator[Any]:
        totals.append(total)
        yield lambda description=None, advance=0: seen.append((description, advance))

    monkeypatch.setattr("specli.bench.run._progress", progress)
    out = tmp_path / "b.json"
    opts = BenchOptions(prompts=path, warm_history="split", modes="baseline,suffix,suffix:history=false",
                        max_tokens=16, warmup=False, progress=False, json_out=str(out),
                        overrides=dict(SMOL_OVERRIDES))
    assert bench.command(opts) == 0  # lossless: warm history changes speed, never tokens
    doc = json.loads(out.read_text())
    assert doc["options"]["warm_history"] == "split"
    assert doc["warm_history"] == {"how": "split", "modes": ["suffix"], "n_prompts": 2, "prompt_ids": ["p1", "l1"],
                                   "categories": ["poem", "list"], "generations": 2, "generations_run": 2}
    assert [p["id"] for p in doc["prompts"]] == ["p2", "l2"]
    recs = doc["records"]
    assert len(recs) == 2 * 3 and {r["prompt_id"] for r in recs} == {"p2", "l2"}  # warm-up is not recorded
    assert totals == [2 * 3 + 2]
    warm_steps = [d for d, _ in seen if d and d.startswith("warm-up")]
    assert warm_steps == ["warm-up 1/2 p1 · suffix", "warm-up 2/2 l1 · suffix"]
    assert [d for d, _ in seen if d][:2] == warm_steps  # before anything measured
    assert sum(a for _, a in seen) == 2 * 3 + 2

    def rec(mode: str) -> dict[str, Any]:
        return next(r for r in recs if r["mode"] == mode and r["prompt_id"] == "p2")

    warm, cold = rec("suffix"), rec("suffix:history=false")
    assert warm["tokens"] == cold["tokens"] == rec("baseline")["tokens"] and len(warm["tokens"]) == 16
    # p1's answer is in the history: after a few tokens the rest is drafted from it and accepted
    assert warm["n_accepted"] >= 10 and warm["n_accepted"] >= cold["n_accepted"] + 6, (warm, cold)
    assert warm["n_target_forwards"] < cold["n_target_forwards"]
    costs = doc["costs"]  # what the summary script prices generations with
    assert costs["sizes"][0] == 1 and len(costs["ratios"]) == len(costs["sizes"]) and costs["t1"] > 0


def test_summary_prices_each_verify_batch_with_the_calibrated_costs() -> None:
    from specli.bench import summarize as summary

    sizes, ratios = [1, 2, 4], [1.0, 1.5, 2.5]
    # 10 forwards: 7 plain, then drafts of 1, 2 and 3 tokens (batches of 2, 3 and 4)
    record = {"n_target_forwards": 10, "drafted_by_pos": [3, 2, 1]}
    assert summary.modelled_steps(record, sizes, ratios) == pytest.approx(7 + 1.5 + 2.0 + 2.5)
    assert summary.modelled_steps({"n_target_forwards": 5, "drafted_by_pos": []}, sizes, ratios) == 5
