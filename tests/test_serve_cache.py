"""`specli serve`'s prompt cache and predicted outputs, through a real server process on
127.0.0.1 (SmolLM2-135M) and the `openai` client: a side call between two main turns
costs the main conversation no prefill, saved conversations outlive a restart, and a
prediction drafts without changing the answer."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SMOL, model_file

from harness.processes import ServeProcess, http, running

openai = pytest.importorskip("openai")

SYSTEM = "You are a careful assistant. " + " ".join(
    f"Tool {i}: read_file_{i}(path) returns the text of a file in folder {i}." for i in range(40))
SIDE_SYSTEM = "Write a title of at most six words for the conversation below."


def args(folder: Path) -> list[str]:
    """One slot: a side call must push the main conversation out (with more slots it takes
    another one: test_serve_slots)."""
    return ["--target", SMOL, "--draft", "none", "--ctx", "2048", "--parallel", "1", "--cache-ram", "64",
            "--cache-dir", str(folder)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("served-cache")


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[ServeProcess]:
    model_file(SMOL)
    with running(args(folder)) as srv:
        yield srv


def ask(srv: ServeProcess, messages: list[dict[str, str]], **kw: Any) -> Any:
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120)
    return c.chat.completions.create(model=SMOL, messages=messages, max_tokens=kw.pop("max_tokens", 24),
                                     temperature=0, **kw)


def main_turns(n: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": SYSTEM}]
    for i in range(n):
        msgs.append({"role": "user", "content": f"Question {i}: what does tool {i} do?"})
        msgs.append({"role": "assistant", "content": f"Tool {i} reads a file in folder {i}."})
    msgs.append({"role": "user", "content": f"Question {n}: what does tool {n} do?"})
    return msgs


def figures(r: Any) -> dict[str, Any]:
    return r.model_dump()["specli"]


def test_main_turn_after_a_side_call_restores_and_survives_a_restart(server: ServeProcess, folder: Path) -> None:
    first = ask(server, main_turns(1))
    n_main = first.usage.prompt_tokens
    side = ask(server, [{"role": "system", "content": SIDE_SYSTEM}, {"role": "user", "content": "Tools and files."}])
    assert figures(side)["prompt_cache"]["saved_entry"]  # the main conversation saved before the side call
    second = ask(server, main_turns(2))
    pc = figures(second)["prompt_cache"]
    assert pc["source"] == "ram" and pc["restored_tokens"] >= n_main
    assert second.usage.prompt_tokens_details.cached_tokens >= n_main
    assert second.model_dump()["timings"]["cache_n"] == second.usage.prompt_tokens_details.cached_tokens
    end = time.monotonic() + 10  # the log line is written as the request is recorded, after its answer
    while "restored" not in server.log and time.monotonic() < end:
        time.sleep(0.05)
    assert "restored" in server.log
    status, _, data = http("GET", server.base + "/metrics")
    text = data.decode()
    assert status == 200
    metric = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line.startswith("specli:prompt_cache")}
    assert metric["specli:prompt_cache_hits_total"] >= 1 and metric["specli:prompt_cache_restored_tokens_total"] >= n_main
    assert metric['specli:prompt_cache_entries{where="ram"}'] >= 1
    answer = second.choices[0].message.content
    assert server.stop(signal.SIGTERM) == 143, server.log
    assert list(folder.glob("*/*.kv"))  # written at exit
    with running(args(folder)) as again:
        ask(again, [{"role": "system", "content": SIDE_SYSTEM}, {"role": "user", "content": "Files."}])
        third = ask(again, main_turns(2))
        assert figures(third)["prompt_cache"]["source"] == "disk"
        assert third.choices[0].message.content == answer  # the same answer from a restored state


def test_exact_restore_answers_as_plain_decoding() -> None:
    """--exact: a main turn restored from RAM after a side call answers bit for bit as plain
    decoding (--drafter none) of the same turns with no side call between them."""
    side = [{"role": "system", "content": SIDE_SYSTEM}, {"role": "user", "content": "Tools and files."}]
    base = ["--target", SMOL, "--draft", "none", "--ctx", "2048", "--no-prompt-cache-disk"]
    with running([*base, "--drafter", "ngram", "--exact"]) as srv:
        ask(srv, main_turns(1), max_tokens=48)
        ask(srv, side)
        restored = ask(srv, main_turns(2), max_tokens=96)
    with running([*base, "--drafter", "none"]) as srv:
        ask(srv, main_turns(1), max_tokens=48)
        plain = ask(srv, main_turns(2), max_tokens=96)
    assert figures(restored)["prompt_cache"]["source"] == "ram"
    assert figures(restored)["drafted"] > 0
    assert restored.choices[0].message.content == plain.choices[0].message.content


def test_no_disk_and_a_lone_surrogate(tmp_path: Path) -> None:
    with running(["--target", SMOL, "--draft", "none", "--ctx", "2048", "--no-prompt-cache-disk",
                  "--cache-dir", str(tmp_path)]) as srv:
        status, _, data = http("POST", srv.base + "/v1/chat/completions",
                               raw=b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}')
        assert status == 400 and b"messages[0].content" in data and b"surrogate" in data
        assert "Traceback" not in srv.log
    assert not list(tmp_path.glob("*/*.kv"))


def test_prediction_drafts_and_keeps_the_answer(tmp_path: Path) -> None:
    code = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(12))
    ask_for = [{"role": "user", "content": "Repeat this code exactly:\n" + code}]
    # --exact: greedy output bit-identical to one-token decoding, with or without drafts
    with running(["--target", SMOL, "--draft", "none", "--ctx", "2048", "--drafter", "ngram", "--exact",
                  "--cache-dir", str(tmp_path)]) as srv:
        plain = ask(srv, ask_for, max_tokens=120)
        with_file = ask(srv, ask_for, max_tokens=120, extra_body={"prediction": {"type": "content", "content": code}})
        only = [{"role": "user", "content": "Write twelve functions f0..f11; fi(x) returns x + i."}]
        predicted = ask(srv, only, max_tokens=120, extra_body={"prediction": {"type": "content", "content": code}})
        unpredicted = ask(srv, only, max_tokens=120)
    assert with_file.choices[0].message.content == plain.choices[0].message.content
    assert predicted.choices[0].message.content == unpredicted.choices[0].message.content
    d = predicted.usage.completion_tokens_details
    drafted = figures(predicted)["drafted_by"].get("prediction", 0)
    assert drafted > 0 and d.accepted_prediction_tokens + d.rejected_prediction_tokens == drafted
    assert d.accepted_prediction_tokens == figures(predicted)["accepted_by"]["prediction"]
    assert unpredicted.usage.completion_tokens_details.accepted_prediction_tokens == 0


def poem_turns(n: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "You write short poems. " + " ".join(
        f"Rule {i}: line {i} of a poem names colour number {i} and rhymes with the line before." for i in range(30))}]
    for i in range(n):
        msgs += [{"role": "user", "content": f"Poem {i}, please."}, {"role": "assistant", "content": f"Red {i}, bed {i}."}]
    return [*msgs, {"role": "user", "content": f"Poem {n}, please."}]


def test_every_slots_conversation_outlives_a_restart(tmp_path: Path) -> None:
    """Two conversations in two slots: at exit each is written, not only the first
    slot's, and after a restart each goes on from disk."""
    two = args(tmp_path)
    two[two.index("--parallel") + 1] = "2"
    model_file(SMOL)
    with running(two) as srv:
        tools = ask(srv, main_turns(1))
        poems = ask(srv, poem_turns(1))  # another slot: the first conversation is parked, this one stays live
        assert figures(poems)["prompt_cache"]["source"] == "none"
        assert srv.stop(signal.SIGTERM) == 143, srv.log
    with running(two) as again:
        for turns, first in ((poem_turns, poems), (main_turns, tools)):
            pc = figures(ask(again, turns(2)))["prompt_cache"]
            assert pc["source"] == "disk" and pc["restored_tokens"] >= first.usage.prompt_tokens, (turns, pc)
