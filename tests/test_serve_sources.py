"""The web page's stream extension, `"specli": {"sources": true}`: each streamed chat
chunk carries its tokens' sources, the steps and the answer's figures, the text is
unchanged, an OpenAI client reads the same answer, and with the extension off every
protocol's bytes are those of a request that never heard of it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from conftest import QWEN_DRAFT, model_file

from harness.processes import ServeProcess, http, running

MODEL = QWEN_DRAFT  # a coder: the same server answers /infill
ASK = "Repeat exactly, three times, one per line: the quick brown fox jumps over the lazy dog"
SOURCES = {"target", "ngram"}  # the server's drafter, and the target's own tokens


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    model_file(MODEL)
    # --exact: every answer to the same prompt is the same bytes, whatever the cache holds
    with running(["--target", MODEL, "--draft", "none", "--drafter", "ngram", "--exact", "--ctx", "2048"]) as srv:
        yield srv


def _events(server: ServeProcess, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[str]:
    status, _, raw = http("POST", server.base + path, body, headers=headers, timeout=300)
    assert status == 200, raw
    return [e for e in raw.decode().split("\n\n") if e]


def _masked(events: list[str]) -> list[str]:
    """What differs between two runs of one request left out: ids, creation times, and the
    figures' numbers (timings)."""
    out = []
    for e in events:
        e = re.sub(r'"id":"[^"]*"', '"id":"#"', e)
        e = re.sub(r'"created":\d+', '"created":#', e)
        e = re.sub(r'"(msg|chatcmpl|cmpl)_?-?[0-9a-f]{8,}"', '"#"', e)
        if '"timings"' in e or '"specli":{"' in e and '"tokens"' not in e:
            e = re.sub(r"-?\d+\.\d+(e-?\d+)?", "#", e)
        out.append(e)
    return out


def _chat(sources: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "stream": True, "temperature": 0, "max_tokens": 40,
                            "messages": [{"role": "user", "content": ASK}]}
    if sources is not None:
        body["specli"] = {"sources": sources}
    return body


def test_sources_mark_every_token_of_the_streamed_text(server: ServeProcess) -> None:
    chunks = [json.loads(e.removeprefix("data: ")) for e in _events(server, "/v1/chat/completions", _chat(True))
              if e != "data: [DONE]"]
    deltas = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    text = "".join(c["choices"][0]["delta"]["content"] for c in deltas)
    assert text and all("specli" in c for c in deltas)
    for c in deltas:  # each chunk's marks are its own text, token by token
        assert "".join(t["text"] for t in c["specli"]["tokens"]) == c["choices"][0]["delta"]["content"]
    marks = [t for c in deltas for t in c["specli"]["tokens"]]
    assert {t["source"] for t in marks} <= SOURCES and any(t["source"] == "ngram" for t in marks)
    steps = [s for c in deltas for s in c["specli"]["steps"]]
    assert sum(s[3] for s in steps) + 1 >= len(marks)  # the prefill's token is no step
    assert all(s[0] in ("ngram", "none") and s[2] <= s[1] for s in steps)
    live = deltas[-1]["specli"]["live"]
    assert live["generated"] >= len(marks) - 1 and live["accepted"] == sum(s[2] for s in steps)
    assert deltas[0]["specli"]["prompt"]["tokens"] > 0 and "prompt" not in deltas[-1]["specli"]


def test_logprobs_and_the_runner_up_come_with_the_marks_when_asked(server: ServeProcess) -> None:
    body = {**_chat(True), "logprobs": True, "top_logprobs": 2, "max_tokens": 12}
    chunks = [json.loads(e.removeprefix("data: ")) for e in _events(server, "/v1/chat/completions", body)
              if e != "data: [DONE]"]
    marks = [t for c in chunks for t in c.get("specli", {}).get("tokens", [])]
    assert marks and all(t["logprob"] <= 0 and t["runner_up"]["logprob"] <= t["logprob"] + 1e-6 for t in marks)


def _twice(server: ServeProcess, path: str, body: dict[str, Any], other: dict[str, Any],
           headers: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """`body`'s events and `other`'s, after a first `body` that leaves its prompt in the
    cache for both (a cold prefill's figures differ from a warm one's)."""
    _events(server, path, body, headers)
    return _events(server, path, other, headers), _events(server, path, body, headers)


def test_with_the_extension_off_every_protocol_sends_the_same_bytes(server: ServeProcess) -> None:
    """Off (absent, or false) is the bytes of a request without it; on, the chat chunks
    differ only by their `specli` object; Messages and /infill ignore it."""
    off, plain = _twice(server, "/v1/chat/completions", _chat(None), _chat(False))
    assert _masked(off) == _masked(plain) and not any('"tokens"' in e for e in plain)
    on_events, plain = _twice(server, "/v1/chat/completions", _chat(None), _chat(True))
    on = [json.loads(e.removeprefix("data: ")) for e in on_events if e != "data: [DONE]"]
    assert sum("tokens" in c.get("specli", {}) for c in on) > 1
    for c in on:
        if "tokens" in c.get("specli", {}):
            del c["specli"]
    stripped = ["data: " + json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in on] + ["data: [DONE]"]
    assert _masked(stripped) == _masked(plain)

    messages = {"model": MODEL, "max_tokens": 24, "stream": True, "temperature": 0,
                "messages": [{"role": "user", "content": ASK}]}
    on_events, plain = _twice(server, "/v1/messages", messages, {**messages, "specli": {"sources": True}},
                              {"anthropic-version": "2023-06-01"})
    assert _masked(on_events) == _masked(plain)
    fim = {"input_prefix": "def add(a, b):\n", "input_suffix": "\n", "n_predict": 16, "stream": True, "temperature": 0}
    on_events, plain = _twice(server, "/infill", fim, {**fim, "specli": {"sources": True}})
    assert _masked(on_events) == _masked(plain)


def test_an_openai_client_reads_the_same_answer_with_the_extension_on(server: ServeProcess) -> None:
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=300)

    def text(**kw: Any) -> str:
        stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ASK}],
                                                temperature=0, max_tokens=40, stream=True, **kw)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    assert text(extra_body={"specli": {"sources": True}}) == text()


def test_a_sources_flag_that_is_not_a_boolean_is_refused(server: ServeProcess) -> None:
    status, _, raw = http("POST", server.base + "/v1/chat/completions", {**_chat("yes"), "stream": False})
    error = json.loads(raw)["error"]
    assert status == 400 and error["param"] == "specli.sources" and "true or false" in error["message"]


def _step(tokens: list[int], n_accepted: int, drafter: str = "ngram") -> Any:
    from specli.engine.metrics import Counters
    from specli.engine.text import StepEvent

    return StepEvent(tokens, "", [], [i < n_accepted for i in range(len(tokens))], n_accepted + 1, n_accepted,
                     drafter, Counters())


def test_marks_follow_the_text_as_it_is_sent_held_back_or_split() -> None:
    """Marks wait for their text: a token whose text is cut by a held-back stop string is
    split, its tail sent with the next chunk; a token with no text of its own (the first
    bytes of a character) has no mark; the steps and the prompt come once."""
    from specli.engine.metrics import Counters
    from specli.serve.sources import SourceMarks

    texts = {1: "Hello", 2: " wor", 3: "", 4: "ld\u00e9", 5: "!"}
    marks = SourceMarks(lambda ts: "".join(texts[t] for t in ts), lambda t: texts[t].encode(), None, 7)
    marks.add(_step([1], 0, "prefill"))
    marks.add(_step([2, 3, 4], 2))
    first = marks.take("Hello wo", Counters())
    assert [(t["text"], t["source"]) for t in first["tokens"]] == [("Hello", "target"), (" wo", "ngram")]
    assert first["steps"] == [["ngram", 3, 2, 3]] and first["prompt"] == {"tokens": 7, "restored": 0, "from": None}
    marks.add(_step([5], 0, "none"))
    second = marks.take("rld\u00e9!", Counters())
    assert [(t["text"], t["source"]) for t in second["tokens"]] == [("r", "ngram"), ("ld\u00e9", "target"),
                                                                     ("!", "target")]
    assert second["steps"] == [["none", 1, 0, 1]] and "prompt" not in second


@pytest.mark.parametrize("drafter", ["medusa", "eagle"])
def test_tokens_a_learned_drafter_drafted_are_marked_heads(drafter: str) -> None:
    """The page styles one `heads` source for every learned drafter; the step keeps its name."""
    from specli.engine.metrics import Counters
    from specli.serve.sources import SourceMarks

    texts = {1: "Two", 2: " plus", 3: " two"}
    marks = SourceMarks(lambda ts: "".join(texts[t] for t in ts), lambda t: texts[t].encode(), None, 3)
    marks.add(_step([1], 0, "prefill"))
    marks.add(_step([2, 3], 1, drafter))
    got = marks.take("Two plus two", Counters())
    assert [(t["text"], t["source"]) for t in got["tokens"]] == [("Two", "target"), (" plus", "heads"),
                                                                  (" two", "target")]
    assert got["steps"] == [[drafter, 2, 1, 2]]
