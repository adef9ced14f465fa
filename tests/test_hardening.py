"""Bad input, interruptions and closed pipes: one-line errors, right exit codes, nothing lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import QWEN_TARGET, SMOL, model_file
from typer.testing import CliRunner

from specli import profiles
from specli.cli import app
from specli.errors import ModelError

runner = CliRunner()
SMOL_ARGS = ["--target", SMOL, "--draft", SMOL, "--drafter", "draft", "--ctx", "512"]
SPECLI = [sys.executable, "-m", "specli.cli"]


@pytest.fixture(autouse=True)
def _models() -> None:
    model_file(SMOL)


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and "Exception ignored" not in text


@pytest.mark.parametrize("content", [b"hello, I am a text file\n", os.urandom(4096), b""])
def test_not_a_gguf_gives_exit_3(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(content)
    res = runner.invoke(app, ["generate", "--target", str(bad), "--drafter", "none", "hi"])
    assert res.exit_code == 3, res.output
    assert "GGUF" in res.output or "damaged" in res.output
    no_traceback(res.output)


def test_truncated_gguf_gives_exit_3(tmp_path: Path) -> None:
    src = model_file(SMOL)
    cut = tmp_path / "cut.gguf"
    with src.open("rb") as f:
        cut.write_bytes(f.read(src.stat().st_size // 2))
    res = runner.invoke(app, ["generate", "--target", str(cut), "--drafter", "none", "hi"])
    assert res.exit_code == 3, res.output
    no_traceback(res.output)


def test_prompt_longer_than_context_says_by_how_much() -> None:
    res = runner.invoke(app, ["generate", *SMOL_ARGS, "--raw", "word " * 600])
    assert res.exit_code == 7, res.output
    assert "more than" in res.output and "context" in res.output


def test_invalid_utf8_on_stdin() -> None:
    res = runner.invoke(app, ["generate", *SMOL_ARGS, "-"], input=b"caf\xe9 \xff")
    assert res.exit_code == 2 and "UTF-8" in res.output


def test_unknown_drafter_value_is_a_profile_error() -> None:
    res = runner.invoke(app, ["generate", *SMOL_ARGS, "--drafter", "magic", "hi"])
    assert res.exit_code == 6 and "--drafter" in res.output


def test_special_token_text_in_user_input_stays_text() -> None:
    from specli.backend import LoadOptions, Model

    with Model(model_file(SMOL), LoadOptions(n_ctx=256)) as m:
        im_end = m.tokenize("<|im_end|>", add_special=False, parse_special=True)[0]
        plain = m.chat_tokens([{"role": "user", "content": "hi"}])
        tricky = m.chat_tokens([{"role": "user", "content": "hi <|im_end|>"}])
        assert tricky.count(im_end) == plain.count(im_end)


def test_memory_check_refuses_what_cannot_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from specli.runtime import wiring as runtime

    monkeypatch.setattr(runtime, "available_memory", lambda: 50 * 2**20)
    monkeypatch.setattr(runtime, "supports_gpu_offload", lambda: False)
    s = profiles.resolve_settings(None, {"target": SMOL, "drafter": "none"})
    with pytest.raises(ModelError, match="GiB"):
        runtime.fit_context(s, model_file(SMOL), [])


def test_context_larger_than_trained_is_capped_with_a_note() -> None:
    from specli.runtime import wiring as runtime

    notes: list[str] = []
    s = profiles.resolve_settings(None, {"target": SMOL, "drafter": "none", "ctx": 100_000})
    assert runtime.fit_context(s, model_file(SMOL), notes) == 8192
    assert notes and "8192" in notes[0]


def test_incompatible_pair_refused_before_weights_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from specli.errors import PairError
    from specli.runtime import wiring as runtime

    model_file(QWEN_TARGET)
    loaded: list[object] = []
    monkeypatch.setattr(runtime, "Model", lambda *a, **k: loaded.append(a))
    s = profiles.resolve_settings(None, {"target": QWEN_TARGET, "draft": SMOL, "drafter": "draft",
                                         "draft_pairing": "strict"})  # cross (the default) drafts text instead
    with pytest.raises(PairError, match="differ"):
        runtime.open_runtime(s)
    assert loaded == []


def _default_sigint() -> None:
    # a shell's background job (e.g. `scripts/test.sh &`) starts with SIGINT ignored and
    # Python then installs no KeyboardInterrupt handler: give the child the default back
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*SPECLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=_default_sigint)


def _wait_for_output(p: subprocess.Popen[bytes], timeout: float = 120) -> bytes:
    assert p.stdout is not None
    os.set_blocking(p.stdout.fileno(), False)
    got = b""
    t0 = time.time()
    while len(got) < 20 and time.time() - t0 < timeout and p.poll() is None:
        chunk = p.stdout.read(64)
        if chunk:
            got += chunk
        time.sleep(0.05)
    return got


LONG_STORY = ["generate", *SMOL_ARGS, "--ctx", "4096", "--raw", "Once upon a time, in a land far away,"]


@pytest.fixture(scope="module")
def story_start() -> str:
    """The first 120 tokens of the (greedy, deterministic) uninterrupted story."""
    res = runner.invoke(app, [*LONG_STORY, "-q", "-n", "120"])
    assert res.exit_code == 0, res.output
    return res.stdout.removesuffix("\n")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_during_generate_flushes_partial_text(sig: int, code: int, story_start: str) -> None:
    # a context of 4096 so that the generation outlasts the signal
    p = _start([*LONG_STORY, "-n", "2000"])
    first = _wait_for_output(p)
    assert first, "no output before the signal"
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == code, err.decode()
    no_traceback(err.decode())
    # the text generated so far, then the closing newline: nothing lost, nothing garbled
    shown = (first + out).decode()
    assert shown.endswith("\n")
    partial = shown[:-1]
    assert partial.strip(), shown
    if len(partial) <= len(story_start):
        assert story_start.startswith(partial), (partial, story_start)
    else:
        assert partial.startswith(story_start), (partial, story_start)


def test_signal_during_json_generate_still_prints_the_object() -> None:
    import json

    p = _start(["generate", *SMOL_ARGS, "--ctx", "4096", "--json", "-n", "3000", "--raw", "Once upon a time,"])
    time.sleep(8)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err.decode()
    data = json.loads(out)
    assert data["finish_reason"] == "interrupted"


def test_stdout_closed_early_exits_quietly() -> None:
    p = subprocess.Popen(f"{' '.join(SPECLI)} generate {' '.join(SMOL_ARGS)} -q -n 400 --raw 'One, two, three,' | head -c 5",
                         shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=120)
    assert len(out) == 5
    no_traceback(err.decode())
