"""`specli bench`: pure parts without models, then short real runs (SmolLM2, one Qwen pair run)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import QWEN_DRAFT, QWEN_TARGET, SMOL, model_file
from typer.testing import CliRunner

from specli import bench, profiles
from specli.bench import BenchOptions, Mode
from specli.bench.suites import SUITE_NAMES, SUITES, Prompt, suite
from specli.engine import verify_step
from specli.engine.metrics import Counters
from specli.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, ProfileError, Terminated, UsageError
from specli.types import Draft, SamplingParams, Verdict

# one thread: llama.cpp threads spin, and on a busy 2-core machine a second one costs more than it gives
SMOL_OVERRIDES = {"target": SMOL, "draft": SMOL, "drafter": "draft", "ctx": 1024, "threads": 1}
SMOL_ARGS = ["--target", SMOL, "--draft", SMOL, "--ctx", "1024", "--threads", "1"]


@pytest.fixture(autouse=True)
def _own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user profile of the machine leaks in; written profiles land in tmp_path."""
    cfg = tmp_path / "config"
    monkeypatch.setenv("SPECLI_CONFIG_DIR", str(cfg))
    return cfg


# ------------------------------------------------------------------ prompt files


def test_spec_bench_jsonl_parses(tmp_path: Path) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text(
        '{"question_id": 7, "category": "writing", "turns": ["First turn.", "Second turn."]}\n'
        "\n"
        '{"question_id": "x9", "category": "qa", "turns": ["Only one."], "reference": ["r"]}\n'
    )
    ps = bench.load_prompt_file(f)
    assert [p.id for p in ps] == ["7", "x9"]
    assert ps[0].category == "writing" and ps[0].turns == ("First turn.", "Second turn.")
    assert ps[1].turns == ("Only one.",) and ps[1].source == str(f)


def test_humaneval_jsonl_parses() -> None:
    text = json.dumps({"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Sum.\"\"\"\n",
                       "canonical_solution": "    return a + b\n", "entry_point": "add"})
    (p,) = bench.parse_prompts(text, "he.jsonl")
    assert p.id == "HumanEval/0" and p.category == "humaneval"
    assert "def add(a, b):" in p.turns[0] and p.turns[0].startswith("Complete the following Python code")


def test_plain_text_parses(tmp_path: Path) -> None:
    f = tmp_path / "prompts.txt"
    f.write_text("Name three rivers.\n\n   \nWrite a haiku about {braces}.\n")
    ps = bench.load_prompt_file(f)
    assert [(p.id, p.category, p.turns) for p in ps] == [
        ("line-1", "text", ("Name three rivers.",)), ("line-4", "text", ("Write a haiku about {braces}.",)),
    ]
    # detection without a telling suffix: a first line starting with { means JSONL
    assert bench.parse_prompts("hello\n{not json}\n", "x")[1].turns == ("{not json}",)
    assert bench.parse_prompts('{"prompt": "hi", "id": 3}\n', "x")[0].id == "3"


@pytest.mark.parametrize(("line", "words"), [
    ('{"question_id": 2, "turns": ["b"]', "not valid JSON"),
    ('["a list"]', "expected a JSON object"),
    ('{"question_id": 2, "category": "c", "turns": []}', "'turns' must be a non-empty list"),
    ('{"question_id": 2, "category": "c", "turns": "text"}', "'turns' must be a non-empty list"),
    ('{"task_id": "t", "prompt": ""}', "'prompt' must be a non-empty string"),
    ('{"question": "what?"}', "expected Spec-Bench fields"),
    ('{"question_id": true, "turns": ["a"]}', "'question_id' must be a string or an integer"),
])
def test_malformed_line_names_file_and_line(tmp_path: Path, line: str, words: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"question_id": 1, "category": "c", "turns": ["a"]}\n\n' + line + "\n")
    with pytest.raises(UsageError) as e:
        bench.load_prompt_file(f)
    assert f"{f} line 3:" in e.value.message and words in e.value.message


def test_unreadable_and_empty_prompt_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        bench.load_prompt_file(tmp_path / "missing.jsonl")
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(UsageError, match="no prompts"):
        bench.load_prompt_file(tmp_path / "empty.txt")
    (tmp_path / "latin.txt").write_bytes(b"ok\ncaf\xe9\n")
    with pytest.raises(UsageError, match="line 2: not UTF-8"):
        bench.load_prompt_file(tmp_path / "latin.txt")


def test_limit_is_round_robin_and_categories_filter() -> None:
    ps = [Prompt(f"{c}{i}", c, ("t",)) for c, n in (("a", 3), ("b", 1), ("c", 2)) for i in range(n)]
    assert [p.id for p in bench.select_prompts(ps, limit=2)] == ["a0", "b0", "c0", "a1", "c1"]
    assert [p.id for p in bench.select_prompts(ps, ["c", "a"], limit=1)] == ["a0", "c0"]
    assert len(bench.select_prompts(ps)) == 6
    with pytest.raises(UsageError, match="no prompts in category z"):
        bench.select_prompts(ps, ["z"])
    with pytest.raises(UsageError, match="--limit"):
        bench.select_prompts(ps, limit=0)


def test_builtin_suites() -> None:
    assert set(SUITE_NAMES) == {"code", "edit", "chat", "summarize", "rag", "math", "all"}
    everything = suite("all")
    assert len({p.id for p in everything}) == len(everything) == sum(len(v) for v in SUITES.values())
    for name, prompts in SUITES.items():
        assert len(prompts) >= 3 and all(p.category == name and p.turns and all(p.turns) for p in prompts)
    for p in SUITES["edit"]:  # the function to edit is in the prompt, 15-30 lines
        code = p.turns[0].split("```python\n")[1].split("```")[0]
        assert 15 <= len(code.strip().splitlines()) <= 30, p.id
    assert all(len(p.turns) == 2 for p in SUITES["chat"])
    with pytest.raises(UsageError, match="unknown suite"):
        bench.suite_prompts("poems")


# ---------------------------------------------------------------- modes, sweeps


def test_mode_parsing() -> None:
    modes = bench.parse_modes(None)
    assert [m.name for m in modes] == ["baseline", "draft", "ngram"]
    modes = bench.parse_modes("draft:k=5,draft_p_min=0.3,ngram:k=6 hybrid;auto,draft:draft-max=5,draft-p-min=0.3")
    assert [m.name for m in modes] == ["baseline", "draft:k=5,draft_p_min=0.3", "ngram:k=6", "hybrid", "auto"]
    assert modes[1].overrides() == {"drafter": "draft", "draft_max": "5", "draft_p_min": "0.3"}
    assert modes[0].overrides() == {"drafter": "none"} and modes[0].is_baseline
    assert bench.parse_mode("ngram:ngram_max=3").options == (("ngram_max", "3"),)


@pytest.mark.parametrize(("text", "words"), [
    ("draft:", "nothing after ':'"),
    ("draft:k", "expected KEY=VALUE"),
    ("draft:k=3,,draft_p_min=1", "empty"),
    ("baseline:k=1", "baseline takes no options"),
    ("ngram,k=3", "does not follow a mode with ':'"),
    ("draft:ctx=512", "cannot differ between modes"),
    ("draft:max_tokens=5", "cannot differ between modes"),
    ("draft:k=2,draft_max=3", "given twice"),
    ("draft:drafter=ngram", "named before ':'"),
    ("peer:llama-cpp-python", "peers are not modes"),
    (":k=2", "missing the drafter"),
])
def test_mode_errors(text: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        bench.parse_modes(text)


def test_mode_values_are_checked_by_the_profile_rules() -> None:
    opts = BenchOptions(suite="math", overrides=dict(SMOL_OVERRIDES))
    for modes, words in (("draft:k=abc", "--draft-max: expected an integer"), ("draft:bogus=1", "unknown key"),
                         ("telepathy", "--drafter: expected one of")):
        opts.modes = modes
        with pytest.raises(ProfileError, match=words) as e:
            bench.plan_bench(opts)
        assert e.value.exit_code == 6 and "mode " in e.value.message
    opts.modes, opts.overrides = "draft", {"draft": "none"}  # no draft model for the draft drafter
    with pytest.raises(ProfileError):
        bench.plan_bench(opts)


def test_sweep_parsing() -> None:
    axes = bench.parse_sweep("draft-max=1..8,draft-p-min=0,0.3,0.6")
    assert axes == [("draft_max", [str(i) for i in range(1, 9)]), ("draft_p_min", ["0", "0.3", "0.6"])]
    assert bench.parse_sweep("k=2,1..3, ngram_max=4") == [("draft_max", ["2", "1", "3"]), ("ngram_max", ["4"])]
    modes = bench.sweep_modes(axes, "draft")
    assert len(modes) == 24 and modes[0].name == "draft:k=1,draft_p_min=0" and modes[-1].name == "draft:k=8,draft_p_min=0.6"
    both = bench.sweep_modes(bench.parse_sweep("drafter=draft,ngram,k=2,3"), "draft")
    assert [m.name for m in both] == ["draft:k=2", "draft:k=3", "ngram:k=2", "ngram:k=3"]


@pytest.mark.parametrize(("text", "words"), [
    ("draft-p-min=0.1..0.5", "needs integers"),
    ("k=5..2", "empty range"),
    ("3,4", "must start with KEY=VALUES"),
    ("k=1,,2", "empty value"),
    ("k=", "no value"),
    ("k=1,draft-max=2", "given twice"),
    ("ctx=512,1024", "cannot differ"),
    ("=3", "missing a key"),
])
def test_sweep_errors(text: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        bench.parse_sweep(text)


def test_plan_with_sweep_and_peer() -> None:
    plan = bench.plan_bench(BenchOptions(suite="math", limit=2, sweep="k=1..3", peer="llama-cpp-python:k=5",
                                         overrides=dict(SMOL_OVERRIDES)))
    assert [m.name for m in plan.modes] == ["baseline", "draft:k=1", "draft:k=2", "draft:k=3",
                                            "peer:llama-cpp-python:k=5"]
    assert plan.settings["draft:k=2"].draft_max == 2 and plan.settings["baseline"].drafter == "none"
    assert plan.settings["peer:llama-cpp-python:k=5"].draft_max == 5
    assert plan.runtime.drafter == "draft" and plan.n_generations == 2 * 5
    ngram_only = bench.plan_bench(BenchOptions(suite="math", modes="ngram", overrides=dict(SMOL_OVERRIDES)))
    assert ngram_only.runtime.drafter == "none"  # no mode needs the draft model: it is not loaded
    with pytest.raises(UsageError, match="unknown peer"):
        bench.parse_peer("vllm")
    with pytest.raises(UsageError, match="not supported here"):
        bench.parse_peer("llama-cpp-python:draft_p_min=0.5")


# -------------------------------------------------------- records and aggregates


def _rec(mode: str, index: int, tps: float, tokens: list[int], *, repeat: int = 0, category: str = "c",
         drafted: int = 0, accepted: int = 0, temperature: float = 0.0) -> bench.BenchRecord:
    n = len(tokens)
    c = Counters(n_prompt=10, n_generated=n, t_total=n / tps, t_first_token=0.1, t_prefill=0.1, t_llama=n / tps / 2)
    steps = max(1, n - 1 - accepted)
    c.record_step("draft" if drafted else "none", drafted, accepted, n - 1)
    c.n_target_forwards = steps
    m = Mode(mode, "none" if mode == "baseline" else "draft")
    return bench.record_from_counters(c, mode=m, prompt=Prompt(f"p{index}", category, ("x",)), prompt_index=index,
                                      repeat=repeat, turn=0, tokens=tokens, text="", finish_reason="length",
                                      temperature=temperature)


def test_speedups_are_ratios_and_aggregates_are_medians() -> None:
    recs = [
        _rec("baseline", 0, 10.0, [1, 2, 3]), _rec("draft", 0, 15.0, [1, 2, 3], drafted=4, accepted=3),
        _rec("baseline", 1, 20.0, [4, 5]), _rec("draft", 1, 10.0, [4, 5], drafted=2, accepted=0),
        _rec("baseline", 2, 8.0, [6, 7, 8, 9], category="d"),
        _rec("draft", 2, 16.0, [6, 7, 8, 9], drafted=3, accepted=3, category="d"),
    ]
    assert bench.finish_records(recs) == []
    assert [r.speedup for r in recs] == pytest.approx([1.0, 1.5, 1.0, 0.5, 1.0, 2.0])
    rows = bench.aggregate(recs)
    assert [(r.mode, r.category) for r in rows] == [
        ("baseline", "c"), ("baseline", "d"), ("baseline", "all"), ("draft", "c"), ("draft", "d"), ("draft", "all")]
    overall = rows[-1]
    assert overall.speedup_median == pytest.approx(1.5)
    assert (overall.speedup_min, overall.speedup_max) == pytest.approx((0.5, 2.0))
    assert overall.tokens_per_second == pytest.approx(15.0)
    assert overall.acceptance_rate == pytest.approx(6 / 9)
    assert overall.compared == 3 and overall.mismatches == 0
    assert rows[3].speedup_median == pytest.approx(1.0)  # median of 1.5 and 0.5
    assert rows[2].acceptance_rate is None and rows[2].speedup_median == 1.0
    assert abs(sum(overall.time_split.values()) - 1.0) < 1e-9
    assert overall.python_overhead_fraction == pytest.approx(0.5)
    # the formatted outputs carry the same figures
    assert "1.50x" in bench.markdown_table(rows) and "0.50-2.00" in bench.markdown_table(rows)
    assert "draft" in bench.bar_chart(rows) and "2.00x" not in bench.bar_chart(rows)
    rows_csv = list(csv.DictReader(io.StringIO(bench.csv_text(recs))))
    assert len(rows_csv) == 6 and float(rows_csv[1]["speedup"]) == pytest.approx(1.5)


def test_lossless_comparison_finds_the_first_difference() -> None:
    assert bench.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert bench.first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert bench.first_difference([1, 2, 3], [1, 2]) == 2
    assert bench.first_difference([], [5]) == 0
    recs = [_rec("baseline", 0, 10.0, [1, 2, 3, 4]), _rec("draft", 0, 12.0, [1, 2, 7, 4]),
            _rec("baseline", 0, 10.0, [1, 2, 3, 4], repeat=1), _rec("draft", 0, 12.0, [1, 2, 3, 4], repeat=1)]
    (x,) = bench.finish_records(recs)
    assert (x.mode, x.prompt_id, x.repeat, x.first_diff) == ("draft", "p0", 0, 2)
    assert (x.baseline_token, x.mode_token) == (3, 7)
    assert [r.lossless for r in recs] == ["baseline", "mismatch", "baseline", "match"]
    assert bench.aggregate(recs)[-1].mismatches == 1
    sampled = [_rec("baseline", 0, 10.0, [1], temperature=0.7), _rec("draft", 0, 10.0, [2], temperature=0.7)]
    assert bench.finish_records(sampled) == [] and sampled[1].lossless == "unchecked"


def test_divergences_are_near_ties_only_at_the_baselines_runner_up_within_the_bound() -> None:
    base = _rec("baseline", 0, 10.0, [1, 2, 3, 4])
    base.margins = [(9, 5.0), (9, 5.0), (7, 0.02), (9, 5.0)]  # at position 2 token 7 was 0.02 behind
    tie = _rec("draft", 0, 12.0, [1, 2, 7, 5])
    third = _rec("draft", 0, 12.0, [1, 2, 8, 5])  # not the runner-up
    wide = _rec("draft", 0, 12.0, [1, 9, 3, 4])  # the runner-up, but 5 logits behind
    exact = _rec("draft", 0, 12.0, [1, 2, 7, 5])
    exact.verify = "exact"  # bit-exact mode: every divergence is a mismatch
    verdicts = [bench.classify_divergence(base, r, bench.first_difference(base.tokens, r.tokens) or 0, 0.05)
                for r in (tie, third, wide, exact)]
    assert verdicts == ["near-tie", "mismatch", "mismatch", "mismatch"]
    assert bench.classify_divergence(base, tie, 2, None) == "mismatch"  # no measured bound: no excuse
    assert bench.classify_divergence(base, tie, 2, 0.01) == "mismatch"  # gap above the bound
    for r in (tie, third):
        r.mode = "draft" if r is tie else "ngram"
    recs = [base, tie, third]
    divergences = bench.divergences_of(recs, 0.05)
    assert [x.verdict for x in divergences] == ["near-tie", "mismatch"]
    assert divergences[0].baseline_gap == 0.02 and divergences[0].baseline_runner_up == 7
    assert [r.lossless for r in recs] == ["baseline", "near-tie", "mismatch"]
    rows = {r.mode: r for r in bench.aggregate(recs) if r.category == "all"}
    assert (rows["draft"].near_ties, rows["draft"].mismatches) == (1, 0)
    assert (rows["ngram"].near_ties, rows["ngram"].mismatches) == (0, 1)


def test_a_contender_behind_the_runner_up_is_a_near_tie_within_the_bound() -> None:
    """Three tokens within the noise (seen: Spec-Bench rag 482, 0.147 and 0.174 behind):
    a batch may pick the third; one further behind than the bound is still a mismatch."""
    base = _rec("baseline", 0, 10.0, [1, 2, 3, 4])
    base.margins = [(9, 5.0), (9, 5.0), (7, 0.02), (9, 5.0)]
    base.contenders = [{9: 5.0}, {9: 5.0}, {7: 0.02, 8: 0.04, 6: 0.3}, {9: 5.0}]
    third, far = _rec("ngram", 0, 12.0, [1, 2, 8, 5]), _rec("ngram", 0, 12.0, [1, 2, 6, 5])
    assert [bench.classify_divergence(base, r, 2, 0.05) for r in (third, far)] == ["near-tie", "mismatch"]
    (x,) = bench.divergences_of([base, third], 0.05)
    assert x.verdict == "near-tie" and x.mode_token_gap == 0.04 and x.baseline_runner_up == 7


def test_llama_cpp_peer_output_is_parsed() -> None:
    from specli.bench import peers

    spec = ("encoded  412 tokens in    3.210 seconds, speed:  128.349 t/s\n"
            "decoded  193 tokens in    5.420 seconds, speed:   35.609 t/s\n\nn_draft   = 3\n"
            "n_predict = 193\nn_drafted = 240\nn_accept  = 180\naccept    = 75.000%\n")
    run = peers.parse_speculative(spec)
    assert (run.n_generated, run.prefill_s, run.decode_s, run.n_drafted, run.n_accepted) == (193, 3.21, 5.42, 240, 180)
    comp = ("common_perf_print: prompt eval time =    3000.00 ms /   412 tokens (    7.28 ms per token,   137.33 tokens"
            " per second)\ncommon_perf_print:        eval time =   13700.00 ms /   191 runs   (   71.73 ms per token,"
            "    13.94 tokens per second)\n")
    run = peers.parse_completion(comp)
    assert (run.n_generated, run.prefill_s, run.decode_s) == (192, 3.0, 13.7)
    with pytest.raises(ValueError):
        peers.parse_completion(spec)
    assert bench.modes.parse_peer_spec("draft:k=5") == ("draft", 5)
    with pytest.raises(UsageError):
        bench.modes.parse_peer_spec("ngram-simple:k=5")
    modes = bench.plan_bench(BenchOptions(suite="code", peer=["llama.cpp:ngram-simple", "llama.cpp:draft:k=3"],
                                          modes="baseline")).modes
    assert [(m.name, m.kind, m.compare_to) for m in modes] == [
        ("baseline", "baseline", "baseline"), ("peer:llama.cpp", "peer-baseline", "peer:llama.cpp"),
        ("peer:llama.cpp:ngram-simple", "peer", "peer:llama.cpp"), ("peer:llama.cpp:draft:k=3", "peer", "peer:llama.cpp")]


def test_replay_proposals_counts_like_the_engine() -> None:
    c = Counters(n_generated=6)
    out = [10, 11, 12, 13, 14, 15]
    # drafted after token 1: [11, 12, 99] -> 2 accepted, +1 correction; after token 4: [] -> plain step;
    # after token 5: [15, 16] -> 1 accepted, the last token (max_tokens reached); after the last: ignored
    bench.replay_proposals(c, out, [(1, [11, 12, 99]), (4, []), (5, [15, 16]), (6, [1])], name="peer")
    assert (c.n_target_forwards, c.n_step_tokens, c.n_drafted, c.n_accepted) == (3, 5, 5, 3)
    assert c.drafted_by_pos == [2, 2, 1] and c.accepted_by_pos == [2, 1, 0]
    assert c.drafter_steps == {"peer": 2, "none": 1}


def test_write_profile_without_models(tmp_path: Path, _own_config: Path) -> None:
    plan = bench.plan_bench(BenchOptions(profile="ngram", suite="edit", sweep="k=4,8", write_profile="fast"))
    recs = []
    for i in range(2):
        recs += [_rec("baseline", i, 10.0, [1, 2]), _rec("ngram:k=4", i, 12.0, [1, 2], drafted=3, accepted=1),
                 _rec("ngram:k=8", i, 14.0, [1, 2], drafted=3, accepted=1)]
    bench.finish_records(recs)
    rows = bench.aggregate(recs, [m.name for m in plan.modes])
    best = bench.best_mode(plan, rows)
    assert best is not None and best.mode == "ngram:k=8"
    path = bench.write_profile(plan, rows, best, "fast")
    assert path == _own_config / "profiles" / "fast.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["extends"] == "ngram" and data["drafter"] == "ngram" and data["draft_max"] == 8
    assert "1.40x" in path.read_text()  # the measured figures, as comments
    s = profiles.validate_file(path)
    assert s.drafter == "ngram" and s.draft_max == 8 and s.draft is None  # the rest comes from `extends`
    assert profiles.resolve_settings("fast").draft_max == 8
    # a mismatching mode is never chosen
    recs[2].lossless = "mismatch"
    best = bench.best_mode(plan, bench.aggregate(recs, [m.name for m in plan.modes]))
    assert best is not None and best.mode == "ngram:k=4"


# -------------------------------------------------------------- real model runs


def _smol_opts(**kw: Any) -> BenchOptions:
    model_file(SMOL)
    base: dict[str, Any] = {"suite": "code", "limit": 2, "max_tokens": 16, "progress": False,
                            "overrides": dict(SMOL_OVERRIDES)}
    base.update(kw)
    return BenchOptions(**base)


def test_cli_run_writes_every_output(tmp_path: Path, _own_config: Path) -> None:
    model_file(SMOL)
    out = tmp_path / "out"
    res = CliRunner().invoke(bench_app(), [
        "bench", *SMOL_ARGS, "--suite", "code", "--limit", "2", "-n", "16", "--modes", "baseline,draft:k=2,draft_p_min=0,ngram",
        "--peer", "llama-cpp-python", "--json", str(out / "b.json"), "--csv", str(out / "b.csv"),
        "--markdown", str(out / "b.md"), "--write-profile", "tuned",
    ])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "b.json").read_text())
    for key in ("schema", "options", "definitions", "settings", "modes", "machine", "prompts", "records",
                "aggregates", "lossless", "complete", "interrupted", "best"):
        assert key in doc, key
    assert doc["complete"] and not doc["interrupted"]
    assert doc["machine"]["cpu_count"] >= 1 and doc["machine"]["llama_system_info"]
    assert [m["name"] for m in doc["modes"]] == ["baseline", "draft:k=2,draft_p_min=0", "ngram", "peer:llama-cpp-python"]
    recs = doc["records"]
    assert len(recs) == 2 * 4 and {r["prompt_id"] for r in recs} == {"code-1", "code-2"}
    fields = ("tokens_per_second", "speedup", "acceptance_rate", "mean_accepted_length", "acceptance_by_position",
              "time_to_first_token_s", "time_s", "python_overhead_fraction", "tokens", "lossless", "first_diff")
    for r in recs:
        assert all(f in r for f in fields)
        # llama-cpp-python prefills and verifies in batches of its own: a near-tie within its bound
        # (a 128-token batch moved SmolLM2's logits by 1.2 on an AVX-512 build) is lossless too
        peer = r["mode"] == "peer:llama-cpp-python"
        assert 0 < r["n_generated"] <= 16 and r["lossless"] in ("baseline", "match", *(("near-tie",) * peer))
        base = next(b for b in recs if b["mode"] == "baseline" and b["prompt_index"] == r["prompt_index"])
        assert r["speedup"] == pytest.approx(r["tokens_per_second"] / base["tokens_per_second"])
        if r["lossless"] != "near-tie":
            assert r["tokens"] == base["tokens"]
    numerics = doc["lossless"]["numerics"]
    assert numerics["peer_tie_bounds"]["peer:llama-cpp-python"] >= numerics["tie_bound"]
    for row in doc["aggregates"]:
        mine = [r["speedup"] for r in recs if r["mode"] == row["mode"]]
        assert row["speedup_median"] == pytest.approx(float(np.median(mine)))
    draft = [r for r in recs if r["mode"] == "draft:k=2,draft_p_min=0"]
    assert all(r["n_drafted"] > 0 and len(r["acceptance_by_position"]) <= 2 for r in draft)
    assert doc["lossless"]["checked"] and doc["lossless"]["mismatches"] == 0 and doc["lossless"]["compared"] == 6
    assert len(list(csv.DictReader((out / "b.csv").open()))) == 8
    assert "| draft:k=2,draft_p_min=0 |" in (out / "b.md").read_text()
    assert "lossless check passed" in res.stdout and "median speedup" in res.stdout
    written = _own_config / "profiles" / "tuned.yaml"
    assert profiles.validate_file(written).drafter in ("draft", "ngram")
    assert doc["best"]["mode"] in ("draft:k=2,draft_p_min=0", "ngram") and yaml.safe_load(written.read_text())["extends"] == "default"


def bench_app() -> Any:
    from specli.cli import app

    return app


def _broken_verifier(draft: Draft, logits: np.ndarray, sampling: SamplingParams,
                     rng: np.random.Generator) -> Verdict:
    """Accepts every draft token and returns a wrong bonus token after any draft."""
    k = len(draft.tokens)
    best = int(logits[k].argmax())
    return Verdict(k, best if k == 0 else (best + 1) % len(logits[k]))


@pytest.mark.parametrize("verify", ["batch", "exact"])
def test_broken_verifier_fails_the_lossless_check(tmp_path: Path, verify: str) -> None:
    opts = _smol_opts(modes="baseline,draft:k=3,draft_p_min=0", warmup=False, json_out=str(tmp_path / "b.json"))
    opts.overrides["verify"] = verify
    with pytest.raises(bench.LosslessError) as e:
        bench.command(opts, verifier=_broken_verifier)
    assert e.value.exit_code == bench.EXIT_LOSSLESS == 9
    doc = json.loads((tmp_path / "b.json").read_text())  # written before failing
    assert doc["lossless"]["mismatches"] == 2 and doc["lossless"]["by_mode"] == {"draft:k=3,draft_p_min=0": 2}
    assert doc["lossless"]["near_ties"] == 0 and doc["settings"]["verify"] == verify
    for x in doc["lossless"]["details"]:
        r = next(r for r in doc["records"] if r["mode"] == "draft:k=3,draft_p_min=0" and r["prompt_id"] == x["prompt_id"])
        b = next(r for r in doc["records"] if r["mode"] == "baseline" and r["prompt_id"] == x["prompt_id"])
        assert x["first_diff"] == bench.first_difference(b["tokens"], r["tokens"]) is not None
        assert r["tokens"][: x["first_diff"]] == b["tokens"][: x["first_diff"]]


@pytest.mark.parametrize(("stop", "code", "how"), [(KeyboardInterrupt, EXIT_INTERRUPTED, "Ctrl-C"),
                                                   (Terminated, EXIT_TERMINATED, "SIGTERM")])
def test_interrupt_keeps_results(tmp_path: Path, stop: type[BaseException], code: int, how: str) -> None:
    def interrupting(draft: Draft, logits: np.ndarray, sampling: SamplingParams,
                     rng: np.random.Generator) -> Verdict:
        if draft.tokens:  # only the second mode drafts: stopped in its first generation
            raise stop
        return Verdict(0, int(logits[0].argmax()))

    opts = _smol_opts(modes="baseline,draft:k=2,draft_p_min=0", max_tokens=8, warmup=False, json_out=str(tmp_path / "b.json"),
                      markdown_out=tmp_path / "b.md")
    assert bench.command(opts, verifier=interrupting) == code
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["interrupted"] and not doc["complete"] and len(doc["records"]) == 1
    assert doc["stopped_by"] == how
    assert (tmp_path / "b.md").read_text().startswith("| mode |")


def test_multi_turn_conversation_reuses_the_cache() -> None:
    opts = _smol_opts(suite="chat", limit=1, max_tokens=8, modes="baseline,ngram", turns="all", warmup=False)
    plan = bench.plan_bench(opts)
    result = bench.BenchResult(plan)
    bench.execute(plan, result)
    recs = result.records
    assert [(r.mode, r.turn) for r in recs] == [("baseline", 0), ("baseline", 1), ("ngram", 0), ("ngram", 1)]
    assert recs[0].counters.n_prompt_reused == 0 and recs[2].counters.n_prompt_reused == 0  # each mode pays its prefill
    assert recs[1].counters.n_prompt_reused > recs[0].counters.n_prompt // 2  # turn 2 continues the conversation
    assert recs[1].counters.n_prompt > recs[0].counters.n_prompt + recs[0].counters.n_generated
    assert bench.finish_records(recs) == []


def test_later_turns_follow_the_baselines_conversation() -> None:
    """A mode whose first answer leaves the baseline's (here a verifier that spoils its
    first drafted step) decodes its second turn on the baseline's conversation: the same
    prompt, so that turn's lossless check compares one conversation, not two."""
    spoiled = []

    def spoil_once(draft: Draft, logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> Verdict:
        k = len(draft.tokens)
        v = verify_step(draft, logits, sampling, rng)
        if k and not spoiled:
            spoiled.append(k)
            return Verdict(0, (int(logits[0].argmax()) + 1) % len(logits[0]))
        return v

    opts = _smol_opts(suite="chat", limit=1, max_tokens=8, modes="baseline,draft:k=2,draft_p_min=0", turns="all",
                      warmup=False)
    plan = bench.plan_bench(opts)
    result = bench.BenchResult(plan)
    bench.execute(plan, result, verifier=spoil_once)
    recs = {(r.mode, r.turn): r for r in result.records}
    bench.finish_records(result.records)
    mode = "draft:k=2,draft_p_min=0"
    assert spoiled and recs[(mode, 0)].lossless == "mismatch"
    assert recs[(mode, 1)].counters.n_prompt == recs[("baseline", 1)].counters.n_prompt
    assert recs[(mode, 1)].lossless == "match"


def test_qwen_pair_on_builtin_prompts() -> None:
    model_file(QWEN_TARGET)
    model_file(QWEN_DRAFT)
    opts = BenchOptions(suite="code", limit=2, max_tokens=16, modes="baseline,draft", progress=False, warmup=False,
                        overrides={"target": QWEN_TARGET, "draft": QWEN_DRAFT, "ctx": 512, "threads": 2})
    plan = bench.plan_bench(opts)
    result = bench.BenchResult(plan)
    bench.execute(plan, result)
    assert bench.finish_records(result.records) == []
    rows = bench.aggregate(result.records)
    draft = next(r for r in rows if r.mode == "draft" and r.category == "all")
    assert draft.n == 2 and draft.n_drafted > 0 and draft.mean_accepted_length > 1.0
    assert 0 < draft.acceptance_rate <= 1
