"""The CLI through typer's runner, against real small models."""

from __future__ import annotations

import json

import pytest
from conftest import SMOL, model_file
from typer.testing import CliRunner

from specli.cli import app

runner = CliRunner()
SMOL_ARGS = ["--target", SMOL, "--draft", SMOL, "--drafter", "draft", "--ctx", "1024"]


@pytest.fixture(autouse=True)
def _models_present() -> None:
    model_file(SMOL)


def test_models_list_json() -> None:
    res = runner.invoke(app, ["models", "list", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    names = {r["name"] for r in rows}
    assert {"qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m", SMOL,
            "gemma-3-270m-q4_k_m", "qwen2.5-coder-1.5b-instruct-f16"} <= names
    smol = next(r for r in rows if r["name"] == SMOL)
    assert smol["present"] is True and smol["size"] == 98362432 and len(smol["sha256"]) == 64


def test_models_path_and_info() -> None:
    res = runner.invoke(app, ["models", "path", SMOL])
    assert res.exit_code == 0 and res.stdout.strip().endswith(f"{SMOL}.gguf")
    res = runner.invoke(app, ["models", "info", SMOL, "--json"])
    assert res.exit_code == 0
    info = json.loads(res.stdout)
    assert info["gguf"]["architecture"] == "llama" and info["gguf"]["n_vocab"] == 49152


def test_models_unknown_name_suggests() -> None:
    res = runner.invoke(app, ["models", "path", "smollm2-135m"])
    assert res.exit_code == 4
    assert "unknown model" in res.output and "did you mean" in res.output
    assert "Traceback" not in res.output


def test_models_pull_is_a_noop_when_present() -> None:
    res = runner.invoke(app, ["models", "pull", SMOL])
    assert res.exit_code == 0, res.output


def test_pull_progress_is_plain_lines_where_not_a_terminal() -> None:
    import io
    import re

    from rich.console import Console

    from specli.cli.models import pull_progress

    out = io.StringIO()
    size = 98362432
    with pull_progress(Console(file=out, width=200, force_terminal=False)) as update:
        update(f"{SMOL}: looking up pkg (1/1)", 0, 0)
        for done in range(0, size, 1 << 20):
            update(f"{SMOL}: pkg", done, size)
        update(f"{SMOL}: pkg", size, size)
        update(f"{SMOL}: done", size, size)
    lines = out.getvalue().splitlines()
    assert lines[:2] == [f"{SMOL}: looking up pkg (1/1) started", f"{SMOL}: pkg started"], lines
    assert re.fullmatch(rf"{SMOL}: pkg done \(98\.4 MB, \d+\.\d s\)", lines[2]), lines
    assert re.fullmatch(rf"{SMOL}: done \(98\.4 MB, \d+\.\d s\)", lines[3]), lines
    assert len(lines) == 4, lines


def test_generate_json_has_every_field() -> None:
    res = runner.invoke(app, ["generate", *SMOL_ARGS, "--json", "-n", "24", "--draft-max", "3", "--draft-p-min", "0.1",
                              "--top-k", "5", "--seed", "3", "--stop", "###", "--stop", "@@", "--threads", "2",
                              "Name three fruits."])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["n_tokens"] > 0 and out["text"]
    assert out["finish_reason"] in ("stop", "length")
    assert out["settings"]["draft_max"] == 3 and out["settings"]["target"] == SMOL
    assert (out["settings"]["draft_p_min"], out["settings"]["top_k"], out["settings"]["seed"]) == (0.1, 5, 3)
    assert out["settings"]["stop"] == ["###", "@@"] and out["settings"]["threads"] == 2
    m = out["metrics"]
    for key in ("acceptance_rate", "mean_accepted_length", "acceptance_by_position", "tokens_per_second",
                "time_to_first_token_s", "time_s", "n_target_forwards", "n_drafted", "n_accepted"):
        assert key in m
    assert m["n_drafted"] > 0 and 0 <= m["acceptance_rate"] <= 1


def test_generate_same_text_with_and_without_drafter() -> None:
    base = runner.invoke(app, ["generate", *SMOL_ARGS, "--drafter", "none", "--json", "-n", "32", "Say hi."])
    spec = runner.invoke(app, ["generate", *SMOL_ARGS, "--json", "-n", "32", "Say hi."])
    ngram = runner.invoke(app, ["generate", *SMOL_ARGS, "--drafter", "ngram", "--json", "-n", "32", "Say hi."])
    texts = [json.loads(r.stdout)["text"] for r in (base, spec, ngram)]
    assert texts[0] == texts[1] == texts[2]
    assert json.loads(base.stdout)["metrics"]["n_drafted"] == 0


def test_generate_plain_and_stdin() -> None:
    res = runner.invoke(app, ["generate", *SMOL_ARGS, "-q", "-n", "8", "-"], input="Say hi.")
    assert res.exit_code == 0 and res.stdout.strip()


def test_generate_empty_prompt_is_a_usage_error() -> None:
    res = runner.invoke(app, ["generate", *SMOL_ARGS, "   "])
    assert res.exit_code == 2 and "empty" in res.output


def test_generate_bad_setting_names_the_flag() -> None:
    res = runner.invoke(app, ["generate", *SMOL_ARGS, "--temperature", "-1", "x"])
    assert res.exit_code == 6 and "--temperature" in res.output


def test_generate_missing_model_file() -> None:
    res = runner.invoke(app, ["generate", "--target", "/nope/model.gguf", "--drafter", "none", "x"])
    assert res.exit_code == 3 and "not found" in res.output


def test_generate_incompatible_pair_is_refused_when_strict() -> None:
    res = runner.invoke(app, ["generate", "--target", "qwen2.5-coder-0.5b-instruct-q4_k_m", "--draft", SMOL,
                              "--draft-pairing", "strict", "x"])
    if "not downloaded" in res.output:
        pytest.skip("qwen draft not pulled")
    assert res.exit_code == 5 and "differ" in res.output and "ngram" in res.output


def test_profiles_list_show_validate(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = runner.invoke(app, ["profiles", "list"])
    assert res.exit_code == 0 and "default" in res.stdout and "creative" in res.stdout
    res = runner.invoke(app, ["profiles", "show", "creative"])
    assert res.exit_code == 0 and json.loads(res.stdout)["temperature"] == 0.8
    bad = tmp_path / "bad.yaml"
    bad.write_text("draft_mx: 3\n")
    res = runner.invoke(app, ["profiles", "validate", str(bad)])
    assert res.exit_code == 6 and "draft_max" in res.output


def test_calibrate_measures_shows_and_caches(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SPECLI_MODELS_DIR", str(model_file(SMOL).parent))  # models stay where they are
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    smol = ["--target", SMOL, "--draft", "none", "--ctx", "512"]  # no context axis: test_context_costs has it
    res = runner.invoke(app, ["calibrate", *smol, "--json"])
    assert res.exit_code == 0, res.output
    cal = json.loads(res.stdout)
    assert cal["sizes"][0] == 1 and cal["ratios"][0] == 1.0 and len(cal["sizes"]) == len(cal["ratios"])
    assert cal["t1"] > 0 and cal["exact_batch"] >= 1 and cal["tie_bound"] == 2 * cal["max_logit_diff"]
    cache = json.loads((tmp_path / "specli" / "calibration.json").read_text())
    assert cal["key"] in cache["entries"]
    shown = runner.invoke(app, ["calibrate", *smol, "--show", "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["measured"] == cal["measured"]  # from the cache
    res = runner.invoke(app, ["calibrate", *smol, "--show"])
    assert res.exit_code == 0 and "near-tie bound" in res.stdout and "bit-exact chunk" not in res.stdout
    res = runner.invoke(app, ["calibrate", *smol, "--exact"])
    assert res.exit_code == 0 and "largest bit-exact chunk" in res.stdout


def test_calibrate_check_compares_the_table_with_runs_and_now(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A run's observations are stored beside the table (and a table they show wrong is
    corrected); --check shows them with a quick measurement now, and stores nothing."""
    from specli import profiles
    from specli.drafters.auto.costs import interpolate
    from specli.runtime import open_runtime
    from specli.runtime.measure.calibration import load
    from specli.runtime.measure.load import Load

    monkeypatch.setenv("SPECLI_MODELS_DIR", str(model_file(SMOL).parent))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rt = open_runtime(profiles.resolve_settings(None, {"target": SMOL, "draft": "none", "drafter": "auto", "ctx": 512}))
    key, costs = rt.calibration_key(), rt.costs()
    stored = rt.calibration()
    for _ in range(2):  # plain steps twice as slow as the table says: a machine busy when it was measured
        costs.observe_verify(0, 2 * stored.t1, None, 200)
    for k in (3, 3, 4, 3, 4):  # 4-5 token batches, observed at twice the table's price in plain steps
        costs.observe_verify(k, 4 * stored.t1 * interpolate(stored.sizes, stored.ratios, k + 1), k, 200)
    rt.close()
    healed = load(key)
    assert healed is not None and healed.observed["corrected"] and healed.observed["sizes"]
    assert healed.ratios[stored.sizes.index(4)] > 1.5 * stored.ratios[stored.sizes.index(4)]
    assert healed.t1 > 1.5 * stored.t1
    assert healed.provisional and healed.observed["t1_off"] > 1.5  # off by more than noise: measure it again
    res = runner.invoke(app, ["calibrate", "--target", SMOL, "--draft", "none", "--ctx", "512", "--check", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["what"]: r for r in json.loads(res.stdout)["rows"]}
    assert rows["t1 (ms)"]["now"] > 0 and rows["batch of 4"]["last_run"] > 1.0 and rows["batch of 33"]["now"] > 1.0
    assert rows["batch of 2"]["last_run"] is None  # not seen in that run
    assert load(key) == healed  # nothing stored
    res = runner.invoke(app, ["calibrate", "--target", SMOL, "--draft", "none", "--check"])
    assert res.exit_code == 0 and "drift now" in res.stdout and "which corrected the table" in res.stdout
    assert "a plain step off by 2.0x" in " ".join(res.stdout.split())
    rt = open_runtime(profiles.resolve_settings(None, {"target": SMOL, "draft": "none", "drafter": "auto", "ctx": 512}))
    again = rt.calibration()  # the next start, on an idle machine, measures it again
    rt.close()
    if again.provisional and again.observed:  # another process kept this machine busy: it waits for an idle start
        return
    assert not again.observed and load(key) == again
    assert again.provisional == Load(**again.load).busy, again.load


def test_exact_generation_equals_the_target_alone() -> None:
    base = runner.invoke(app, ["generate", *SMOL_ARGS, "--drafter", "none", "--exact", "--json", "-n", "32", "Say hi."])
    spec = runner.invoke(app, ["generate", *SMOL_ARGS, "--drafter", "ngram", "--exact", "--json", "-n", "32",
                               "Say hi."])
    assert base.exit_code == 0 and spec.exit_code == 0, spec.output
    assert json.loads(spec.stdout)["text"] == json.loads(base.stdout)["text"]
    assert json.loads(spec.stdout)["settings"]["verify"] == "exact"


def _option_names(command: str) -> set[str]:
    import typer

    group = typer.main.get_command(app)
    return {name for p in group.commands[command].params for name in p.opts}  # type: ignore[attr-defined]


def test_every_generation_option_is_in_generate_chat_and_bench() -> None:
    from specli.cli import GENERATION

    flags = {"--exact" if n == "verify" else "--" + n.replace("_", "-") for n in GENERATION}
    assert {"--raw", "--top-p", "--stop", "--draft-p-min"} <= flags  # chat lacked the first three
    for command in ("generate", "chat", "bench"):
        names = _option_names(command)
        assert flags | {"-t", "-n"} <= names, (command, flags - names)
        assert "--p-min" not in names
    assert {"--target", "--draft", "--threads", "--exact"} <= _option_names("calibrate")


def test_chat_takes_raw_top_p_and_stop() -> None:
    res = runner.invoke(app, ["chat", *SMOL_ARGS, "--raw", "--top-p", "0.9", "--stop", "\n", "-n", "8",
                              "--no-dashboard"], input="One, two, three,\n/exit\n")
    assert res.exit_code == 0, res.output
    assert "finish:" in res.stdout


def test_old_profile_key_is_a_note(tmp_path) -> None:  # type: ignore[no-untyped-def]
    old = tmp_path / "old.yaml"
    old.write_text("extends: default\np_min: 0.4\n")
    res = runner.invoke(app, ["profiles", "show", str(old)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["draft_p_min"] == 0.4
    assert "note:" in res.stderr and "'p_min' is deprecated: rename it 'draft_p_min'" in res.stderr


def test_the_command_list_gives_each_command_one_line() -> None:
    """`specli --help` lists each command in one line at 80 columns, as git and gh do; the
    details are each command's own --help."""
    res = runner.invoke(app, ["--help"], env={"COLUMNS": "80", "NO_COLOR": "1"}, terminal_width=80)
    assert res.exit_code == 0, res.output
    box = res.output.split("Commands")[1].splitlines()[1:]
    rows = [line.strip("│ ").strip() for line in box if line.startswith("│")]
    names = [r.split()[0] for r in rows if r]
    assert {"generate", "chat", "serve", "bench", "calibrate", "complete", "rpc-server", "models"} <= set(names)
    assert all(line[2] != " " for line in box if line.startswith("│")), res.output  # no continuation lines
