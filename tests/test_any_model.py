"""Any model a user brings runs with the default drafter: each family the registry can
pull (qwen2: Qwen2.5, llama: SmolLM2, gemma3: Gemma 3) as the target of generate, chat
(two turns), serve (chat completions and Messages) and bench, with `auto` choosing its
draft model (none pairs with these: it drafts without one) and with an explicitly named
draft of another family (drafting across tokenizers). Greedy `--exact` output equals
plain decoding in each."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GEMMA, QWEN_DRAFT, QWEN_TARGET, SMOL, model_file
from typer.testing import CliRunner

from harness.processes import ServeProcess
from specli.backend import read_model_file
from specli.cli import app
from specli.registry.lookup import local_models
from specli.runtime.draft_choice import DraftChoice, choose_draft

runner = CliRunner()
FAMILIES = {"qwen2": QWEN_DRAFT, "llama": SMOL, "gemma3": GEMMA}
CROSS = {"qwen2": SMOL, "llama": GEMMA, "gemma3": SMOL}  # a draft of another family for each
PROMPT = "Write a Python function that returns the squares of a list of numbers."
RAW = {GEMMA: ("--raw",)}  # a base model without a chat template: its prompt is text
COMMON = ("--ctx", "1024", "--exact")


@pytest.fixture(autouse=True)
def _models() -> None:
    for name in (*FAMILIES.values(), QWEN_TARGET):
        model_file(name)


def generate(target: str, *args: str, n: int = 32) -> tuple[str, str]:
    """The text of a greedy --exact generation, and everything printed."""
    res = runner.invoke(app, ["generate", "--target", target, *COMMON, *RAW.get(target, ()), "-n", str(n), "--json",
                              *args, PROMPT])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["text"], res.output


def test_auto_chooses_the_smallest_pairing_local_draft() -> None:
    """The default target gets its shipped draft; models no local file pairs with get none,
    with a note naming their vocabulary."""
    models = local_models()

    def choice(name: str) -> DraftChoice:
        with read_model_file(model_file(name)) as f:
            chosen = choose_draft(f, name, models)
        if chosen.file is not None:
            chosen.file.close()
        return chosen

    assert choice(QWEN_TARGET).name == QWEN_DRAFT
    for name in FAMILIES.values():
        c = choice(name)
        assert c.path is None and "no draft model pairs with " + name in c.note, c


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_default_and_cross_family_drafts_equal_plain(family: str) -> None:
    target = FAMILIES[family]
    plain, _ = generate(target, "--drafter", "none")
    auto, said = generate(target)
    assert auto == plain
    assert "no draft model pairs with" in said and "drafting from n-grams" in said, said
    cross, said = generate(target, "--draft", CROSS[family], "--drafter", "draft", "--draft-max", "4")
    assert cross == plain
    assert "it drafts text" in said, said
    strict = runner.invoke(app, ["generate", "--target", target, "--draft", CROSS[family], "--draft-pairing",
                                 "strict", "-n", "4", PROMPT])
    assert strict.exit_code == 5 and "differ" in strict.output


def answers(output: str) -> list[str]:
    """A chat transcript's answers: what follows each prompt mark up to its statistics,
    without the lines specli says meanwhile (a first use's measurement, notes)."""
    found = re.findall(r"> (.*?)\n\d+ tokens,", output, flags=re.S)
    return ["\n".join(line for line in m.splitlines() if not line.startswith(("specli: ", "note: "))).strip()
            for m in found]


@pytest.mark.parametrize("family", FAMILIES)
def test_chat_two_turns_equal_plain(family: str) -> None:
    target = FAMILIES[family]
    turns = "Write a Python function that adds two numbers.\nNow the same for three numbers.\n/exit\n"

    def chat(*args: str) -> list[str]:
        res = runner.invoke(app, ["chat", "--target", target, *COMMON, *RAW.get(target, ()), "-n", "24",
                                  "--no-dashboard", *args], input=turns)
        assert res.exit_code == 0, res.output
        return answers(res.output)

    plain = chat("--drafter", "none")
    assert len(plain) == 2 and all(plain), plain
    assert chat() == plain
    assert chat("--draft", CROSS[family]) == plain


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, ServeProcess]]:
    target = FAMILIES[request.param]
    srv = ServeProcess(["--target", target, "--ctx", "2048", "--exact"])
    try:
        srv.wait_ready(1800)  # a first start measures this machine's costs for the model
        yield target, srv
    finally:
        srv.stop()


def test_serve_chat_completions_and_messages_equal_plain(family_server: tuple[str, ServeProcess]) -> None:
    """The first answer carries what auto drafts with in specli.notes; then plain and auto agree."""
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    target, srv = family_server
    assert "no draft model pairs with" in srv.log, srv.log
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": PROMPT}]

    def ask(drafter: str) -> tuple[str, list[str]]:
        extra = {"specli": {"drafter": drafter}}
        if target == GEMMA:  # no chat template: the completions route takes its text
            r = c.completions.create(model=target, prompt=PROMPT, max_tokens=24, temperature=0, extra_body=extra)
            text = r.choices[0].text
        else:
            r = c.chat.completions.create(model=target, messages=messages, max_tokens=24,  # type: ignore[arg-type]
                                          temperature=0, extra_body=extra)
            text = r.choices[0].message.content or ""
        return text, list((r.model_extra or {}).get("specli", {}).get("notes", []))

    (plain, first_notes), (auto, later_notes) = ask("none"), ask("auto")
    assert any("no draft model pairs with" in n for n in first_notes), first_notes
    assert not any("draft model" in n for n in later_notes), later_notes
    assert auto == plain and plain
    if target == GEMMA:
        return
    a = anthropic.Anthropic(base_url=srv.base, api_key="none", max_retries=0, timeout=300)
    msgs = [a.messages.create(model=target, max_tokens=24, messages=messages,  # type: ignore[arg-type]
                              extra_body={"temperature": 0, "specli": {"drafter": d}}) for d in ("none", "auto")]
    assert msgs[0].content[0].text == msgs[1].content[0].text == plain  # type: ignore[union-attr]


@pytest.mark.parametrize("family", FAMILIES)
def test_bench_with_the_default_drafter_has_no_mismatch(family: str, tmp_path: Path) -> None:
    target = FAMILIES[family]
    out = tmp_path / "bench.json"
    res = runner.invoke(app, ["bench", "--target", target, "--ctx", "1024", "--suite", "code", "--limit", "1",
                              "-n", "24", "--modes", "auto", "--json", str(out)])
    assert res.exit_code == 0, res.output
    lossless = json.loads(out.read_text())["lossless"]
    assert lossless["checked"] and lossless["compared"] >= 1 and lossless["mismatches"] == 0, lossless
