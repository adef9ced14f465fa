"""Fill-in-the-middle on a real `specli serve` (Qwen2.5-Coder 0.5B and its FIM tokens):
llama-server's /infill and OpenAI's /v1/completions with `suffix`, whole and streamed,
the editor's stops, a model without FIM tokens, and greedy answers equal to plain
decoding's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import QWEN_DRAFT, model_file

from harness.processes import ServeProcess, http, running
from specli.bench.fim_tasks import fim_holes, passes

ARGS = ["--target", QWEN_DRAFT, "--draft", "none", "--drafter", "ngram", "--ctx", "4096", "--parallel", "1"]
# the cursor at the first statement of moving_average(): this model writes that statement,
# then the one after it, which is the suffix's first line (unless stopped)
HOLE = next(h for h in fim_holes() if h.id == "stats.moving_average/mid")
PREFIX, SUFFIX = HOLE.prefix, HOLE.suffix
NEXT_LINE = "out = []"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    model_file(QWEN_DRAFT)
    with running(ARGS, env={"SPECLI_PROMPT_CACHE_DIR": str(tmp_path_factory.mktemp("pc"))}) as srv:
        yield srv


def infill(server: ServeProcess, **body: Any) -> tuple[int, dict[str, Any]]:
    status, _, raw = http("POST", server.base + "/infill", {"temperature": 0, **body}, timeout=300)
    return status, json.loads(raw)


def stream(server: ServeProcess, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    status, _, raw = http("POST", server.base + path, {**body, "stream": True}, timeout=300)
    assert status == 200
    out = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            out.append(json.loads(block[6:]))
    return out


def test_infill_whole_streamed_and_as_plain_decoding(server: ServeProcess) -> None:
    status, whole = infill(server, input_prefix=PREFIX, input_suffix=SUFFIX, n_predict=64)
    assert status == 200 and whole["content"] and whole["stop"] is True
    assert whole["tokens_predicted"] > 0 and whole["tokens_evaluated"] > 20 and whole["stop_type"] == "word"
    assert whole["timings"]["predicted_n"] == whole["tokens_predicted"]
    chunks = stream(server, "/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 64,
                                        "temperature": 0})
    assert all(c["stop"] is False for c in chunks[:-1]) and chunks[-1]["stop"] is True
    assert "".join(c["content"] for c in chunks) == whole["content"]
    status, plain = infill(server, input_prefix=PREFIX, input_suffix=SUFFIX, n_predict=64,
                           specli={"drafter": "none"})
    assert plain["content"] == whole["content"]  # lossless: the lookup drafts changed nothing
    assert whole["specli"]["drafted"] > 0 or whole["specli"]["target_forwards"] == whole["tokens_predicted"]


def test_completions_suffix_is_the_same_fill_in_the_middle(server: ServeProcess) -> None:
    _, want = infill(server, input_prefix=PREFIX, input_suffix=SUFFIX, n_predict=64)
    status, _, raw = http("POST", server.base + "/v1/completions",
                          {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 64, "temperature": 0}, timeout=300)
    body = json.loads(raw)
    assert status == 200 and body["choices"][0]["text"] == want["content"]
    chunks = stream(server, "/v1/completions", {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 64,
                                                "temperature": 0})
    assert "".join(c["choices"][0]["text"] for c in chunks if c.get("choices")) == want["content"]


def test_editor_stops_cut_the_completion(server: ServeProcess) -> None:
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 96}
    _, free = infill(server, **body, specli={"suffix_stop": False})
    assert NEXT_LINE in free["content"]  # it writes on into the code after the cursor
    _, cut = infill(server, **body)
    assert NEXT_LINE not in cut["content"] and cut["specli"]["finish_reason"] == "suffix"
    assert free["content"].startswith(cut["content"]) and cut["stop_type"] == "word"
    # n_indent: a line indented less than that ends it, cut after its indentation (llama-server's rule)
    _, indented = infill(server, **body, n_indent=8, specli={"suffix_stop": False})
    assert indented["specli"]["finish_reason"] == "indent" and indented["stop_type"] == "limit"
    assert indented["content"].endswith("\n    ") and free["content"].startswith(indented["content"])
    assert all(len(x) - len(x.lstrip()) >= 8 for x in indented["content"].split("\n")[1:-1])
    # t_max_predict_ms: ends at a new line once the time is spent
    _, timed = infill(server, **body, t_max_predict_ms=1, specli={"suffix_stop": False})
    assert timed["specli"]["finish_reason"] == "time" and timed["stop_type"] == "limit"
    assert "\n" in timed["content"] and free["content"].startswith(timed["content"])
    assert len(timed["content"]) < len(free["content"])
    _, stopped = infill(server, **body, stop=["out ="], specli={"suffix_stop": False})
    assert "out =" not in stopped["content"] and stopped["stop_type"] == "word"


def test_a_hole_is_filled_so_its_tests_pass(server: ServeProcess) -> None:
    hole = next(h for h in fim_holes() if h.id == "stats.mean/line")
    _, out = infill(server, input_prefix=hole.prefix, input_suffix=hole.suffix, n_predict=32, n_indent=hole.n_indent)
    assert passes(hole.filled(out["content"]), hole.tests), out["content"]


def test_bad_bodies_and_a_model_without_fim_tokens(server: ServeProcess, tmp_path: Any) -> None:
    status, body = infill(server, input_prefix="x", input_suffix="y", input_extra=[{"filename": "a.py"}])
    assert status == 400 and body["error"]["param"] == "input_extra[0]"
    assert infill(server, input_suffix="y")[0] == 400
    status, _, _ = http("POST", server.base + "/infill", {"input_prefix": "a", "input_suffix": "b", "n_predict": 2,
                                                          "input_extra": [{"filename": "u.py", "text": "U = 1\n"}]})
    assert status == 200  # the server serves on
    model_file("gemma-3-270m-q4_k_m")
    with running(["--target", "gemma-3-270m-q4_k_m", "--draft", "none", "--ctx", "1024", "--parallel", "1"],
                 env={"SPECLI_PROMPT_CACHE_DIR": str(tmp_path)}) as gemma:
        status, _, raw = http("POST", gemma.base + "/infill", {"input_prefix": "a", "input_suffix": "b"})
        err = json.loads(raw)["error"]
        assert status == 400 and "cannot fill in the middle" in err["message"] and "prefix" in err["message"]
        status, _, raw = http("POST", gemma.base + "/v1/completions", {"prompt": "a", "suffix": "b"})
        assert status == 400 and json.loads(raw)["error"]["param"] == "suffix"


def test_specli_complete_at_a_cursor_answers_as_the_server(server: ServeProcess, tmp_path: Any) -> None:
    """`specli complete FILE:LINE:COL` builds the same prompt and, greedy, the same
    completion as the server's /infill for that file and cursor. (A file no other test
    sends: a prompt prefilled in other chunks, as after a cache hit, may flip a
    near-tie of this small model.)"""
    import subprocess
    import sys

    hole = next(h for h in fim_holes() if h.id == "config.get_int/mid")
    path = tmp_path / "config.py"
    path.write_text(hole.prefix + hole.suffix)
    line = hole.prefix.count("\n") + 1
    col = len(hole.prefix) - hole.prefix.rfind("\n")
    r = subprocess.run([sys.executable, "-m", "specli", "complete", f"{path}:{line}:{col}", "--target", QWEN_DRAFT,
                        "--draft", "none", "--drafter", "ngram", "--ctx", "4096", "-n", "64", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    _, want = infill(server, input_prefix=hole.prefix, input_suffix=hole.suffix, n_predict=64)
    assert out["completion"] == want["content"] and out["n_prompt"] == want["tokens_evaluated"]
    assert out["finish_reason"] == want["specli"]["finish_reason"]
    bad = subprocess.run([sys.executable, "-m", "specli", "complete", f"{path}:999:1", "--target", QWEN_DRAFT],
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "outside the file" in bad.stderr and "Traceback" not in bad.stderr
