"""Fill-in-the-middle without a server: the prompt from Qwen2.5-Coder's FIM tokens laid
out as llama-server's /infill lays it out (recorded from llama-server, tests/fixtures/fim),
an editor's stops, /infill bodies, and the cursor of `specli complete`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specli.errors import UsageError
from specli.serve.errors import ApiError
from specli.serve.fim import EditorStops, EditorText, FimFields, check_fim, fim_prompt, model_fim_prompt
from specli.serve.protocols.llama_server.request import parse_infill
from specli.serve.protocols.openai_completions.request import parse_request
from specli.types import FimTokens

FIXTURE = Path(__file__).parent / "fixtures" / "fim" / "llama-server-infill-prompts.json"


def test_prompts_are_llama_servers_token_for_token() -> None:
    """The prompt llama-server's /infill built for each recorded body (the text its answer
    shows, the count it evaluated), from the same GGUF at the same context."""
    from conftest import model_file

    from specli.backend import LoadOptions, Model

    recorded = json.loads(FIXTURE.read_text())
    assert recorded["cases"]
    model = Model(model_file(recorded["model"]), LoadOptions(n_ctx=recorded["n_ctx"]))
    try:
        for case in recorded["cases"]:
            body = case["body"]
            req = parse_infill(body)
            assert req.fim is not None
            tokens = model_fim_prompt(model, req.fim, body.get("n_predict", -1))
            assert model.vocab.detokenize(tokens, special=True) == case["prompt"], case["name"]
            assert len(tokens) == case["tokens_evaluated"], case["name"]
    finally:
        model.close()


def test_prompt_layout_and_truncation() -> None:
    """Repo-level layout; the prefix kept from its end and the suffix from its start; the
    extra chunks' tail where the context is short; the SPM order."""
    fim = FimTokens(pre=-10, suf=-11, mid=-12, rep=-13, sep=-14)

    def tok(text: str) -> list[int]:
        return [ord(c) for c in text]

    f = FimFields("ab", "cd", (("x.py", "X"),), "p")
    assert fim_prompt(tok, fim, f, 8192, prompt_tokens=[7]) == [
        -13, *tok("myproject\n"), -14, *tok("x.py\n"), *tok("X"), -14, *tok("filename\n"),
        -10, *tok("ab"), 7, -11, *tok("cd"), -12]
    long = FimFields("1" * 2000, "2" * 2000)
    out = fim_prompt(tok, fim, long, 8192)
    assert out.count(ord("1")) == 1536 and out.count(ord("2")) == 510
    assert fim_prompt(tok, fim, f, 2046)[:2] == [-10, *tok("a")]  # no room for extras (n_predict -1 adds 2)
    assert fim_prompt(tok, fim, f, 2048)[:3] == [*tok("e\n"), -10]  # the tail of the extras
    assert fim_prompt(tok, fim, FimFields("a", "b"), 2046, spm=True, bos=1) == [1, -11, ord("b"), -10, ord("a"), -12]
    no_sep = FimTokens(pre=-10, suf=-11, mid=-12)
    assert fim_prompt(tok, no_sep, f, 8192)[:19] == tok("\n\n--- snippet ---\n\n")
    with pytest.raises(UsageError, match="no prefix, suffix, middle token"):
        check_fim(FimTokens(None, None, None), "gemma.gguf")


def test_editor_stops() -> None:
    stops = EditorStops(n_indent=4, suffix_line="return total")
    assert stops.check("x = 1\n    y = 2\n") is None  # the cursor's line is never judged
    assert stops.check("x = 1\n    y = 2\n  z") == (len("x = 1\n    y = 2\n  "), "indent")
    assert stops.check("x\n    return total\n") == (2, "suffix")
    assert stops.check("x\n    return total") is None  # a line is judged once it ends
    assert stops.check("x\n    y\n\n    z") == (len("x\n    y\n"), "indent")  # an empty line ends it too
    text = EditorText(stops, 0.0)
    sent = [text.push(p, 0.0) for p in ("x = 1", "\n    y", " = 2\n    re", "turn total\n", "def f():")]
    assert sent == ["x = 1", "\n", "    y = 2\n", "", ""] and text.stopped == "suffix"
    assert text.text == "x = 1\n    y = 2\n" and text.flush() == ""
    timed = EditorText(EditorStops(t_max_ms=100), 0.0)
    assert timed.push("a\nb", now=0.05) == "a\nb" and timed.stopped is None
    assert timed.push("c", now=0.5) == "c" and timed.stopped is None  # only at a new line
    assert timed.push("\nd", now=0.5) == "\nd" and timed.stopped == "time"


@pytest.mark.parametrize(("body", "param"), [
    ({"input_suffix": ""}, "input_prefix"),
    ({"input_prefix": ""}, "input_suffix"),
    ({"input_prefix": 1, "input_suffix": ""}, "input_prefix"),
    ({"input_prefix": "", "input_suffix": "", "input_extra": {}}, "input_extra"),
    ({"input_prefix": "", "input_suffix": "", "input_extra": [{"filename": "a"}]}, "input_extra[0]"),
    ({"input_prefix": "", "input_suffix": "", "input_extra": [{"text": "", "filename": 3}]}, "input_extra[0].filename"),
    ({"input_prefix": "", "input_suffix": "", "n_indent": -1}, "n_indent"),
    ({"input_prefix": "", "input_suffix": "", "prompt": 5}, "prompt"),
])
def test_bad_infill_bodies(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_infill(body)
    assert e.value.status == 400 and e.value.param == param, e.value.message


def test_infill_and_completions_suffix_become_fim_requests() -> None:
    req = parse_infill({"input_prefix": "def f():\n    ", "input_suffix": "\n\nx = f()\n", "n_predict": 32,
                        "n_indent": 4, "t_max_predict_ms": 500, "input_extra": [{"text": "Y = 1\n"}],
                        "samplers": ["top_k"], "cache_prompt": True, "id_slot": -1})
    assert req.fim == FimFields("def f():\n    ", "\n\nx = f()\n", (("tmp", "Y = 1\n"),))
    assert req.options.max_tokens == 32 and req.options.editor == EditorStops(4, 500, "x = f()")
    assert req.endpoint == "infill" and parse_infill({"input_prefix": "", "input_suffix": "", "n_predict": -1}
                                                     ).options.max_tokens is None
    off = parse_infill({"input_prefix": "", "input_suffix": "x", "specli": {"suffix_stop": False}})
    assert off.options.editor.suffix_line is None
    oai = parse_request({"prompt": "def f():\n", "suffix": "    return 1\n", "max_tokens": 8}, "completion")
    assert oai.fim == FimFields("def f():\n", "    return 1\n") and oai.options.editor.suffix_line == "return 1"
    assert parse_request({"prompt": "x", "suffix": ""}, "completion").fim is None
    with pytest.raises(ApiError):
        parse_request({"prompt": "x", "suffix": 3}, "completion")


def test_the_cursor_of_specli_complete(tmp_path: Path) -> None:
    from specli.cli.complete import fields_from, split_at_cursor

    text = "def f(x):\n    return x\n"
    assert split_at_cursor(text, 2, 5, "f.py") == ("def f(x):\n    ", "return x\n")
    assert split_at_cursor(text, 2, 13, "f.py") == ("def f(x):\n    return x", "\n")
    assert split_at_cursor(text, 3, 1, "f.py") == (text, "")
    for line, col in ((4, 1), (2, 14), (1, 0)):
        with pytest.raises(UsageError):
            split_at_cursor(text, line, col, "f.py")
    path = tmp_path / "f.py"
    path.write_text(text)
    assert fields_from(f"{path}:2:5", None, None, []).prefix == "def f(x):\n    "
    with pytest.raises(UsageError, match="not FILE:LINE:COL"):
        fields_from("f.py:2", None, None, [])
    with pytest.raises(UsageError, match="no cursor"):
        fields_from(None, None, None, [])
