"""Settings, profile loading, validation and precedence."""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specli.errors import ProfileError
from specli.profiles import (
    DRAFTERS,
    PROFILE_NAME_RE,
    RELOAD_KEYS,
    SETTING_NAMES,
    SPECS,
    DeprecatedKey,
    Settings,
    describe_fields,
    find_profile,
    list_profiles,
    load_profile,
    needs_draft_model,
    resolve_settings,
    settings_to_dict,
    shipped_dir,
    user_dir,
    validate_file,
)
from specli.types import SamplingParams

SHIPPED = ("creative", "default", "f16", "gpu", "ngram")


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the developer's real ~/.config out of every test."""
    cfg = tmp_path / "config"
    monkeypatch.setenv("SPECLI_CONFIG_DIR", str(cfg))
    return cfg


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def error_of(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ProfileError) as info:
        fn(*args, **kwargs)
    msg = info.value.message
    assert "\n" not in msg, msg
    assert info.value.exit_code == 6
    return msg


# --------------------------------------------------------------------- defaults


def test_defaults_and_sampling() -> None:
    s = Settings()
    assert s.target == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert s.draft == "auto"  # the smallest local model that pairs with the target (runtime.draft_choice)
    assert (s.drafter, s.draft_max, s.draft_min, s.draft_p_min) == ("draft", 4, 0, 0.0)
    assert (s.ctx, s.n_batch, s.threads, s.kv_type, s.flash_attn) == (4096, 512, None, "auto", "auto")
    assert s.verify == "batch"
    assert s.sampling() == SamplingParams(0.0, 0, 1.0, 0.0, None)
    s2 = Settings(temperature=0.7, top_k=5, top_p=0.9, min_p=0.1, seed=3)
    assert s2.sampling() == SamplingParams(0.7, 5, 0.9, 0.1, 3)


def test_every_field_has_a_spec_and_its_default_is_valid() -> None:
    for f in fields(Settings):
        spec = SPECS[f.name]
        assert spec.doc, f.name
        assert spec.check(f.default) == f.default, f.name
    assert DRAFTERS == ("draft", "ngram", "suffix", "hybrid", "medusa", "eagle", "auto", "none")


def test_describe_fields_and_settings_to_dict() -> None:
    rows = describe_fields()
    assert [r.name for r in rows] == list(SETTING_NAMES)
    by_name = {r.name: r for r in rows}
    assert by_name["draft_max"].type == "int 0..64"
    assert by_name["top_p"].type == "float (0, 1]"
    assert by_name["min_p"].type == "float [0, 1)"
    assert by_name["draft"].default == "auto"
    assert by_name["threads"].default == "null"
    for name, type_text, default, help_text in rows:
        assert name and type_text and isinstance(default, str) and help_text
    d = settings_to_dict(Settings(stop=("a", "b"), tensor_split=(3.0, 1.0)))
    assert list(d) == list(SETTING_NAMES)
    assert d["stop"] == ["a", "b"] and d["tensor_split"] == [3.0, 1.0]
    json.dumps(d)


def test_reload_keys_are_the_model_and_runtime_settings() -> None:
    assert {"target", "draft", "draft_pairing", "verify", "ctx", "n_batch", "threads", "n_gpu_layers",
                           "draft_n_gpu_layers", "main_gpu", "tensor_split", "flash_attn", "kv_type",
                           "rpc", "draft_rpc", "rpc_timeout", "heads"} == RELOAD_KEYS
    assert not RELOAD_KEYS & {"drafter", "draft_max", "draft_p_min", "temperature", "max_tokens", "stop"}


@pytest.mark.parametrize(
    "changes, needed",
    [
        ({}, True),
        ({"drafter": "hybrid"}, True),
        ({"drafter": "auto"}, True),
        ({"drafter": "auto", "draft": None}, False),  # auto drafts with n-grams only
        ({"drafter": "ngram"}, False),
        ({"drafter": "none"}, False),
        ({"draft_max": 0}, False),  # drafts nothing
        ({"drafter": "auto", "draft_max": 0}, False),
    ],
)
def test_needs_draft_model(changes: dict[str, Any], needed: bool) -> None:
    assert needs_draft_model(replace(Settings(), **changes)) is needed


def test_profile_name_re() -> None:
    for name in ("default", "gpu2", "my.tuned+fast-1_a"):
        assert PROFILE_NAME_RE.match(name), name
    for name in ("", "-x", ".hidden", "a/b", "a b", "tuned.yaml/x"):
        assert not PROFILE_NAME_RE.match(name), name


def test_old_p_min_key_still_reads_with_a_note(tmp_path: Path) -> None:
    p = write(tmp_path / "old.yaml", "p_min: 0.4\n")
    with pytest.warns(DeprecatedKey, match="key 'p_min' is deprecated: rename it 'draft_p_min'"):
        assert validate_file(p).draft_p_min == 0.4
    with pytest.warns(DeprecatedKey, match="command line: key 'p-min'.*'draft_p_min'"):
        assert resolve_settings(None, {"p-min": "0.2"}).draft_p_min == 0.2
    p = write(tmp_path / "both.yaml", "p_min: 0.4\ndraft_p_min: 0.3\n")
    with pytest.warns(DeprecatedKey):
        assert "key 'draft_p_min' repeats key 'p_min'" in error_of(load_profile, str(p))
    p = write(tmp_path / "bad.yaml", "p_min: 2\n")
    with pytest.warns(DeprecatedKey):
        assert "key 'p_min': expected a number >= 0 and <= 1, got 2 (int)" in error_of(load_profile, str(p))


# ------------------------------------------------------------------- locations


def test_user_dir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECLI_CONFIG_DIR", str(tmp_path / "c"))
    assert user_dir() == tmp_path / "c" / "profiles"
    monkeypatch.delenv("SPECLI_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "x"))
    assert user_dir() == tmp_path / "x" / "specli" / "profiles"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert user_dir() == tmp_path / "h" / ".config" / "specli" / "profiles"
    assert shipped_dir() == Path(__file__).resolve().parent.parent / "profiles"


def test_list_profiles_shipped() -> None:
    infos = {p.name: p for p in list_profiles()}
    assert set(SHIPPED) <= set(infos)
    for name in SHIPPED:
        assert infos[name].origin == "shipped"
        assert infos[name].description
        assert infos[name].error == ""
        assert infos[name].path == shipped_dir() / f"{name}.yaml"


def test_user_profile_shadows_shipped(config_dir: Path) -> None:
    user = write(config_dir / "profiles" / "gpu.yaml", "description: mine\ndraft_max: 2\n")
    write(config_dir / "profiles" / "mine.yaml", "temperature: 0.5\n")
    write(config_dir / "profiles" / "broken.yaml", "draft_max: [\n")
    infos = {p.name: p for p in list_profiles()}
    assert infos["gpu"].origin == "user" and infos["gpu"].path == user
    assert infos["gpu"].description == "mine"
    assert infos["mine"].origin == "user"
    assert "YAML syntax error" in infos["broken"].error
    assert [p.name for p in list_profiles()].count("gpu") == 1
    assert find_profile("gpu") == user
    assert find_profile("default") == shipped_dir() / "default.yaml"
    s = resolve_settings("gpu")
    assert s.draft_max == 2 and s.n_gpu_layers == 0
    assert resolve_settings("mine").temperature == 0.5


def test_user_default_shadows_shipped_and_may_extend_it(config_dir: Path) -> None:
    write(config_dir / "profiles" / "default.yaml", "extends: default\ndraft_max: 7\n")
    s = resolve_settings()
    assert s.draft_max == 7  # the user's default
    assert s.draft_p_min == 0.5  # ...built on the shipped default
    assert resolve_settings("gpu").draft_max == 64  # gpu extends the user default


def test_find_profile_unknown_lists_names_and_close_matches() -> None:
    msg = error_of(find_profile, "gpuu")
    assert "unknown profile 'gpuu'" in msg
    assert "did you mean 'gpu'" in msg
    for name in SHIPPED:
        assert name in msg


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    for fn in (find_profile, load_profile, resolve_settings, validate_file):
        msg = error_of(fn, str(missing))
        assert str(missing) in msg and "not found" in msg
    assert "not found" in error_of(load_profile, missing)
    assert "not found" in error_of(find_profile, "sub/dir/thing")


# ------------------------------------------------------------------ precedence


def test_precedence_defaults_profile_overrides(tmp_path: Path) -> None:
    p = write(tmp_path / "p.yaml", "draft_max: 6\ntemperature: 0.3\n")
    s = resolve_settings(str(p))
    assert s.draft_max == 6 and s.temperature == 0.3
    assert s.ctx == 4096  # default untouched
    s = resolve_settings(str(p), {"draft_max": 9, "temperature": None, "ctx": 8192})
    assert s.draft_max == 9  # override beats profile
    assert s.temperature == 0.3  # None means "not given"
    assert s.ctx == 8192  # override beats default
    assert resolve_settings(overrides={"seed": 5}).seed == 5


def test_no_profile_uses_shipped_default() -> None:
    s = resolve_settings()
    assert (s.drafter, s.draft_max, s.draft_p_min) == ("auto", 64, 0.5)
    assert s == resolve_settings("default")


def test_no_default_profile_means_plain_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("specli.profiles.files.shipped_dir", lambda: tmp_path / "none")
    assert resolve_settings() == Settings()


def test_overrides_accept_strings_and_dashes() -> None:
    s = resolve_settings(
        overrides={
            "draft-max": "7",
            "temperature": "0.5",
            "raw": "yes",
            "draft": "none",
            "drafter": "NGRAM",
            "tensor_split": "3,1",
            "stop": "\n\n",
            "threads": "auto",
        }
    )
    assert (s.draft_max, s.temperature, s.raw, s.draft, s.drafter) == (7, 0.5, True, None, "ngram")
    assert s.tensor_split == (3.0, 1.0) and s.stop == ("\n\n",) and s.threads is None


def test_override_errors_name_the_command_line() -> None:
    msg = error_of(resolve_settings, None, {"temperature": "hot"})
    assert msg == "command line: --temperature: expected a number >= 0 and <= 5, got 'hot' (str)"
    msg = error_of(resolve_settings, None, {"draft_mx": 3})
    assert msg == "command line: unknown key 'draft_mx' (did you mean 'draft_max'?)"
    assert "--draft-max" in error_of(resolve_settings, None, {"draft_max": 65})
    assert "unknown key 'extends'" in error_of(resolve_settings, None, {"extends": "gpu"})


# --------------------------------------------------------------------- extends


def test_extends_chain_and_overriding(tmp_path: Path) -> None:
    write(tmp_path / "base.yaml", "draft_max: 2\ntemperature: 0.1\nctx: 1024\n")
    write(tmp_path / "sub" / "mid.yaml", "extends: ../base.yaml\ntemperature: 0.2\n")
    top = write(tmp_path / "sub" / "top.yaml", "extends: mid.yaml\nctx: 2048\n")
    assert load_profile(str(top)) == {"draft_max": 2, "temperature": 0.2, "ctx": 2048}
    s = resolve_settings(str(top))
    assert (s.draft_max, s.temperature, s.ctx) == (2, 0.2, 2048)


def test_extends_by_name(tmp_path: Path) -> None:
    p = write(tmp_path / "x.yaml", "extends: gpu\ndraft_max: 10\n")
    s = validate_file(p)
    assert (s.n_gpu_layers, s.flash_attn, s.draft_max, s.draft_p_min) == (-1, "on", 10, 0.3)
    assert s.target == "qwen2.5-coder-1.5b-instruct-q4_k_m"


def test_extends_unknown(tmp_path: Path) -> None:
    p = write(tmp_path / "x.yaml", "extends: gpuu\n")
    msg = error_of(load_profile, str(p))
    assert str(p.resolve()) in msg and "key 'extends'" in msg and "did you mean 'gpu'" in msg
    p = write(tmp_path / "y.yaml", "extends: 3\n")
    assert "key 'extends': expected a profile name or path, got 3 (int)" in error_of(load_profile, str(p))
    p = write(tmp_path / "z.yaml", "extends: missing.yaml\n")
    assert "not found" in error_of(load_profile, str(p))


def test_extends_cycle(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "extends: b.yaml\n")
    write(tmp_path / "b.yaml", "extends: c.yaml\n")
    write(tmp_path / "c.yaml", "extends: a.yaml\n")
    msg = error_of(load_profile, str(tmp_path / "a.yaml"))
    assert "cycle a.yaml -> b.yaml -> c.yaml -> a.yaml" in msg
    assert msg.startswith(str((tmp_path / "c.yaml").resolve()))
    write(tmp_path / "self.yaml", "extends: ./self.yaml\n")
    assert "cycle self.yaml -> self.yaml" in error_of(load_profile, str(tmp_path / "self.yaml"))


def test_extends_cycle_by_name(config_dir: Path) -> None:
    write(config_dir / "profiles" / "a.yaml", "extends: b\n")
    write(config_dir / "profiles" / "b.yaml", "extends: a\n")
    assert "cycle a.yaml -> b.yaml -> a.yaml" in error_of(resolve_settings, "a")
    write(config_dir / "profiles" / "me.yaml", "extends: me\n")
    assert "cycle me.yaml -> me.yaml" in error_of(resolve_settings, "me")


def test_error_in_parent_names_parent(tmp_path: Path) -> None:
    parent = write(tmp_path / "parent.yaml", "top_p: 0\n")
    child = write(tmp_path / "child.yaml", "extends: parent.yaml\n")
    msg = error_of(load_profile, str(child))
    assert msg.startswith(str(parent.resolve()) + ": key 'top_p'")


# ------------------------------------------------------------------ validation


def test_unknown_key_with_suggestion(tmp_path: Path) -> None:
    p = write(tmp_path / "p.yaml", "draft_mx: 3\n")
    assert (
        error_of(load_profile, str(p)) == f"{p.resolve()}: unknown key 'draft_mx' (did you mean 'draft_max'?)"
    )
    p = write(tmp_path / "q.yaml", "zzzzzz: 3\n")
    assert error_of(load_profile, str(p)) == f"{p.resolve()}: unknown key 'zzzzzz'"
    p = write(tmp_path / "r.yaml", "descripton: hi\n")
    assert "did you mean 'description'" in error_of(load_profile, str(p))


def test_wrong_type(tmp_path: Path) -> None:
    p = write(tmp_path / "p.yaml", "temperature: hot\n")
    assert error_of(load_profile, str(p)) == (
        f"{p.resolve()}: key 'temperature': expected a number >= 0 and <= 5, got 'hot' (str)"
    )
    cases = {
        "draft_max: 4.0": "expected an integer >= 0 and <= 64, got 4.0 (float)",
        "draft_max: true": "expected an integer >= 0 and <= 64, got True (bool)",
        "draft_max: '4'": "got '4' (str)",
        "raw: 1": "key 'raw': expected true or false, got 1 (int)",
        "target: 5": "key 'target': expected a non-empty string, got 5 (int)",
        "target: null": "key 'target': expected a non-empty string, got null",
        "stop: [1, 2]": "key 'stop': expected a string or a list of strings",
        "drafter: magic": "expected one of draft, ngram, suffix, hybrid, medusa, eagle, auto, none, got 'magic' (str)",
        "kv_type: q5": "expected one of auto, f16, q8_0, q4_0, f32",
        "tensor_split: [0, 0]": "key 'tensor_split': expected a list of numbers >= 0",
        "tensor_split: {a: 1}": "key 'tensor_split'",
        "threads: many": "expected an integer >= 1, or auto/null",
        "description: 5": "key 'description': expected a string, got 5 (int)",
        "1: 2": "key 1 (int): expected a setting name",
        "temperature: .nan": "got nan (float)",
        "draft_p_min: .inf": "got inf (float)",
    }
    for i, (text, expected) in enumerate(cases.items()):
        p = write(tmp_path / f"t{i}.yaml", text + "\n")
        msg = error_of(load_profile, str(p))
        assert expected in msg, (text, msg)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("temperature: -0.1", "key 'temperature': expected a number >= 0 and <= 5, got -0.1 (float)"),
        ("temperature: 5.5", "key 'temperature': expected a number >= 0 and <= 5, got 5.5 (float)"),
        ("top_p: 0", "key 'top_p': expected a number > 0 and <= 1, got 0 (int)"),
        ("top_p: 1.5", "key 'top_p': expected a number > 0 and <= 1, got 1.5 (float)"),
        ("draft_max: -1", "key 'draft_max': expected an integer >= 0 and <= 64, got -1 (int)"),
        ("draft_max: 65", "key 'draft_max': expected an integer >= 0 and <= 64, got 65 (int)"),
        ("min_p: 1.0", "key 'min_p': expected a number >= 0 and < 1, got 1.0 (float)"),
        ("draft_p_min: 1.01", "key 'draft_p_min': expected a number >= 0 and <= 1"),
        ("ngram_min: 0", "key 'ngram_min': expected an integer >= 1 and <= 16"),
        ("ngram_max: 17", "key 'ngram_max': expected an integer >= 1 and <= 16"),
        ("ctx: 32", "key 'ctx': expected an integer >= 64 and <= 1048576, got 32 (int)"),
        ("max_tokens: 0", "key 'max_tokens': expected an integer >= 1"),
        ("n_gpu_layers: -2", "key 'n_gpu_layers': expected an integer >= -1"),
        ("threads: 0", "key 'threads': expected an integer >= 1, or auto/null, got 0 (int)"),
        ("seed: -1", "key 'seed': expected an integer >= 0, or null"),
        ("top_k: -1", "key 'top_k': expected an integer >= 0"),
    ],
)
def test_out_of_range(tmp_path: Path, text: str, expected: str) -> None:
    p = write(tmp_path / "p.yaml", text + "\n")
    msg = error_of(load_profile, str(p))
    assert msg == f"{p.resolve()}: {expected}" or msg.startswith(f"{p.resolve()}: {expected}"), msg


def test_cross_field_checks(tmp_path: Path) -> None:
    p = write(tmp_path / "p.yaml", "draft_min: 5\n")
    msg = error_of(validate_file, p)
    assert msg == f"{p.resolve()}: key 'draft_min': expected a value <= draft_max (4 from defaults), got 5"
    p = write(tmp_path / "q.yaml", "draft_min: 3\ndraft_max: 2\n")
    assert "key 'draft_min': expected a value <= draft_max (2), got 3" in error_of(validate_file, p)
    p = write(tmp_path / "r.yaml", "ngram_min: 5\nngram_max: 3\n")
    assert "key 'ngram_min': expected a value <= ngram_max (3), got 5" in error_of(validate_file, p)
    p = write(tmp_path / "s.yaml", "draft: none\n")
    msg = error_of(validate_file, p)
    assert msg.startswith(f"{p.resolve()}: key 'draft': expected a draft model name or path")
    # the later layer is blamed
    msg = error_of(resolve_settings, "ngram", {"drafter": "hybrid"})
    assert msg.startswith("command line: --drafter: expected a drafter that needs no draft model")
    assert "ngram.yaml" in msg
    msg = error_of(resolve_settings, "ngram", {"draft_min": 17})
    assert msg.startswith("command line: --draft-min: expected a value <= draft_max (16 from ")
    msg = error_of(resolve_settings, "default", {"draft_max": 1, "draft_min": 2})
    assert msg.startswith("command line: --draft-min:")
    assert resolve_settings("ngram", {"drafter": "auto"}).draft is None


def test_yaml_syntax_error_reports_line(tmp_path: Path) -> None:
    p = write(tmp_path / "p.yaml", "draft_max: 3\ntemperature: 0.2\nstop: [a, b\nctx: 4\n")
    msg = error_of(load_profile, str(p))
    assert msg.startswith(f"{p.resolve()} line ") and "YAML syntax error:" in msg
    p = write(tmp_path / "q.yaml", "a: 1\n  b: 2\n")
    assert error_of(load_profile, str(p)).startswith(f"{p.resolve()} line 2: YAML syntax error: ")
    p = write(tmp_path / "r.yaml", "draft_max: 3\ndraft_max: 4\n")
    assert (
        error_of(load_profile, str(p))
        == f"{p.resolve()} line 2: YAML syntax error: duplicate key 'draft_max'"
    )
    p = write(tmp_path / "s.yaml", "when: 2020-13-45\n")
    assert "cannot read YAML" in error_of(load_profile, str(p))


def test_top_level_must_be_mapping_and_empty_is_empty(tmp_path: Path) -> None:
    for text, kind in (("- a\n- b\n", "list"), ("just text\n", "str"), ("3\n", "int")):
        p = write(tmp_path / "p.yaml", text)
        assert f"expected a mapping of settings (key: value lines) at the top level, got {kind}" in error_of(
            load_profile, str(p)
        )
    for text in ("", "# only a comment\n", "---\n"):
        p = write(tmp_path / "e.yaml", text)
        assert load_profile(str(p)) == {}
        assert validate_file(p) == Settings()


def test_unreadable_files(tmp_path: Path) -> None:
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"\xff\xfe\x00bad")
    assert "not UTF-8" in error_of(load_profile, str(p))
    d = tmp_path / "dir.yaml"
    d.mkdir()
    assert "not found" in error_of(load_profile, str(d))


def test_none_draft_and_null_words(tmp_path: Path) -> None:
    for text in ("draft: none", "draft: None", "draft: null", "draft: ~", "draft:"):
        p = write(tmp_path / "p.yaml", text + "\ndrafter: ngram\n")
        assert load_profile(str(p))["draft"] is None, text
        assert validate_file(p).draft is None
    p = write(tmp_path / "t.yaml", "threads: auto\nseed: null\nsystem: null\n")
    assert load_profile(str(p)) == {"threads": None, "seed": None, "system": None}


def test_dash_keys_and_normalisation(tmp_path: Path) -> None:
    p = write(
        tmp_path / "p.yaml",
        (
            "draft-max: 7\nn-gpu-layers: -1\ntop_p: 0.9\nkv-type: Q8_0\nflash-attn: on\n"
            "stop: '###'\ntensor-split: [3, 1]\ndescription: dashes\n"
        ),
    )
    assert load_profile(str(p)) == {
        "draft_max": 7,
        "n_gpu_layers": -1,
        "top_p": 0.9,
        "kv_type": "q8_0",
        "flash_attn": "on",
        "stop": ("###",),
        "tensor_split": (3.0, 1.0),
    }
    p = write(tmp_path / "q.yaml", "draft-max: 7\ndraft_max: 5\n")
    assert "key 'draft_max' repeats key 'draft-max'" in error_of(load_profile, str(p))
    p = write(tmp_path / "r.yaml", "flash_attn: off\nstop: [a, b]\n")
    assert load_profile(str(p)) == {"flash_attn": "off", "stop": ("a", "b")}


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_validate(name: str) -> None:
    path = shipped_dir() / f"{name}.yaml"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecatedKey)  # shipped profiles use the current keys
        s = validate_file(path)
    assert s == resolve_settings(name)
    raw = yaml.safe_load(path.read_text())
    assert isinstance(raw.get("description"), str) and raw["description"]
    if name != "default":
        assert raw["extends"] == "default"
    assert "#" in path.read_text()  # commented


def test_shipped_profile_values() -> None:
    d = resolve_settings("default")
    assert (d.target, d.draft) == ("qwen2.5-coder-1.5b-instruct-q4_k_m", "auto")  # auto: the 0.5B, by draft_choice
    assert (d.drafter, d.draft_max, d.draft_p_min) == ("auto", 64, 0.5)
    g = resolve_settings("gpu")
    assert (g.n_gpu_layers, g.draft_n_gpu_layers, g.draft_max, g.draft_p_min, g.flash_attn) == (
        -1,
        -1,
        64,
        0.3,
        "on",
    )
    f = resolve_settings("f16")
    assert (f.target, f.draft_max, f.draft_p_min) == ("qwen2.5-coder-1.5b-instruct-f16", 64, 0.3)
    assert f.draft == d.draft
    c = resolve_settings("creative")
    assert c.sampling() == SamplingParams(0.8, 40, 0.95, 0.05, None)
    n = resolve_settings("ngram")
    assert (n.drafter, n.draft, n.draft_max) == ("ngram", None, 16)


# ------------------------------------------------------------------ properties

KEYS = (
    list(SETTING_NAMES)
    + [k.replace("_", "-") for k in SETTING_NAMES if "_" in k]
    + [
        "description",
        "draft_mx",
        "temp",
        "",
        "extends ",
        "Draft",
        "x" * 70,
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(-3, 70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(-1, 6)
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "none",
            "null",
            "auto",
            "on",
            "off",
            "yes",
            "draft",
            "ngram",
            "f16",
            "3,1",
            "0.5",
            "4",
            "",
            " ",
            "hybrid",
            "q8_0",
        ]
    )
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
MAPPINGS = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), VALUES, max_size=8)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_scratch = tempfile.TemporaryDirectory()
SCRATCH = Path(_scratch.name) / "fuzz.yaml"


def _check_settings(s: Settings) -> None:
    for f in fields(Settings):
        value = getattr(s, f.name)
        assert SPECS[f.name].check(value) == value
        if isinstance(value, float):
            assert math.isfinite(value)
    assert s.draft_min <= s.draft_max and s.ngram_min <= s.ngram_max
    assert not (s.drafter in ("draft", "hybrid") and s.draft is None)
    json.dumps(settings_to_dict(s))


@FUZZ
@given(MAPPINGS)
def test_fuzz_profile_loads_or_raises_profile_error(mapping: dict[str, Any]) -> None:
    SCRATCH.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    try:
        s = validate_file(SCRATCH)
    except ProfileError as e:
        assert e.message and "\n" not in e.message
        return
    _check_settings(s)


@FUZZ
@given(MAPPINGS)
def test_fuzz_overrides_resolve_or_raise_profile_error(mapping: dict[Any, Any]) -> None:
    try:
        s = resolve_settings("default", mapping)
    except ProfileError as e:
        assert e.message.startswith("command line: ") and "\n" not in e.message
        return
    _check_settings(s)


@FUZZ
@given(
    st.text(max_size=80)
    | st.sampled_from(
        [
            "a: [",
            "a: {b",
            "? [a]\n: 1",
            "&a x: *a",
            "!!python/object:os.system {}",
            "<<: {draft_max: 2}\ndraft_max: 3",
            "- 1",
            "'",
        ]
    )
)
def test_fuzz_raw_text(text: str) -> None:
    SCRATCH.write_text(text, encoding="utf-8")
    try:
        s = validate_file(SCRATCH)
    except ProfileError as e:
        assert "\n" not in e.message
        return
    _check_settings(s)


def _valid_value(name: str) -> st.SearchStrategy[Any]:
    spec = SPECS[name]
    if spec.kind == "int":
        lo = int(spec.lo) if spec.lo is not None else None
        hi = int(spec.hi) if spec.hi is not None else None
        base: st.SearchStrategy[Any] = st.integers(lo, hi)
    elif spec.kind == "float":
        base = st.floats(spec.lo, spec.hi, exclude_min=spec.lo_open, exclude_max=spec.hi_open)
    elif spec.kind == "choice":
        base = st.sampled_from(spec.choices)
    elif spec.kind == "bool":
        base = st.booleans()
    elif spec.kind == "str":
        base = st.text(min_size=1, max_size=10).filter(
            lambda s: s.strip() and s.strip().lower() not in spec.null_words
        )
    elif spec.kind == "strs":
        base = st.lists(st.text(min_size=1, max_size=5), max_size=3).map(tuple)
    elif spec.kind == "endpoints":
        host = st.from_regex(r"[a-z]([a-z0-9-]{0,6}[a-z0-9])?(\.[a-z0-9]{1,5}){0,2}", fullmatch=True)
        endpoint = st.builds(lambda h, p: f"{h}:{p}", host, st.integers(1, 65535))
        base = st.lists(endpoint, min_size=1, max_size=3, unique=True).map(tuple)
    else:
        base = st.lists(st.floats(0, 100), min_size=1, max_size=4).filter(lambda v: sum(v) > 0).map(tuple)
    return (base | st.none()) if spec.nullable else base


VALID = st.fixed_dictionaries({}, optional={name: _valid_value(name) for name in SETTING_NAMES})


@FUZZ
@given(VALID)
def test_fuzz_valid_values_round_trip(mapping: dict[str, Any]) -> None:
    """Valid values always load (unless a cross-field rule fails) and a profile written
    from settings_to_dict reads back as the same Settings."""
    data = {k: list(v) if isinstance(v, tuple) else v for k, v in mapping.items()}
    SCRATCH.write_text(yaml.safe_dump(data), encoding="utf-8")
    try:
        s = validate_file(SCRATCH)
    except ProfileError as e:
        assert any(rule in e.message for rule in ("expected a value", "draft model", "nothing would run on the "
                                                                                    "servers")), e.message
        return
    for k, v in mapping.items():
        assert getattr(s, k) == v
    _check_settings(s)
    SCRATCH.write_text(yaml.safe_dump(settings_to_dict(s)), encoding="utf-8")
    assert validate_file(SCRATCH) == s
    if s.draft is not None:  # None overrides mean "not given", so the profile's draft stays
        assert resolve_settings(overrides=settings_to_dict(s)) == s
