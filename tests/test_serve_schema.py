"""The server's pure parts: request checking, response shapes, Prometheus text."""

from __future__ import annotations

import json

import pytest

from specli.engine.metrics import Counters
from specli.serve.errors import ApiError
from specli.serve.jobs import RequestRecord
from specli.serve.outcome import Outcome
from specli.serve.protocols.base import Ids
from specli.serve.protocols.openai_completions.reply import chat_response, chunk, usage_chunk
from specli.serve.protocols.openai_completions.request import parse_request
from specli.serve.served import parse_body
from specli.serve.stats import ServerMetrics

USER = [{"role": "user", "content": "hi"}]


def test_chat_request_is_checked_into_options() -> None:
    req = parse_request({"model": "m", "messages": [{"role": "developer", "content": "be brief"},
                                                    {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                                 {"type": "text", "text": "b"}]}],
                         "temperature": 0, "top_p": 0.9, "max_completion_tokens": 7, "stop": "END",
                         "seed": 3, "stream": True, "stream_options": {"include_usage": True},
                         "n": 1, "tool_choice": "none", "user": "x",
                         "specli": {"drafter": "ngram", "draft_max": 8, "history": False}}, "chat")
    assert req.messages == ({"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"})
    o = req.options
    assert (o.max_tokens, o.temperature, o.top_p, o.stop, o.seed) == (7, 0.0, 0.9, ("END",), 3)
    assert (o.drafter, o.draft_max, o.history) == ("ngram", 8, False)
    assert req.stream and req.reply.include_usage


@pytest.mark.parametrize("body,param", [
    ({"messages": USER, "n": 2}, "n"),
    ({"messages": USER, "temperature": 3}, "temperature"),
    ({"messages": USER, "temperature": True}, "temperature"),
    ({"messages": USER, "top_p": 0}, "top_p"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER, "max_tokens": 2.5}, "max_tokens"),
    ({"messages": USER, "stop": [1]}, "stop"),
    ({"messages": USER, "stop": ["a"] * 17}, "stop"),
    ({"messages": USER, "seed": -1}, "seed"),
    ({"messages": USER, "response_format": {"type": "xml"}}, "response_format.type"),
    ({"messages": USER, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "bad"}}}},
     "response_format.json_schema.schema"),
    ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {
        "type": "function", "function": {"name": "g"}}}, "tool_choice"),
    ({"messages": USER, "tool_choice": "required"}, "tool_choice"),
    ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]},
     "tools[0].function.parameters"),
    ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}],
      "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f",
                                                                          "arguments": "{bad"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"messages": USER, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": USER, "specli": {"draft_max": 65}}, "specli.draft_max"),
    ({"messages": USER, "specli": {"speed": "max"}}, "specli.speed"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
    ({"messages": []}, "messages"),
    ({"messages": USER, "prompt": "x"}, "prompt"),
])
def test_bad_chat_requests_name_the_parameter(body: dict, param: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_request(body, "chat")
    assert e.value.status == 400 and e.value.param == param
    err = e.value.body()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]


@pytest.mark.parametrize("raw,code", [(b"\xff", "invalid_encoding"), (b"{", "invalid_json"),
                                      (b"[]", "invalid_json"), (b'{"a": NaN}', "invalid_json")])
def test_bodies_that_are_not_json_objects(raw: bytes, code: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_body(raw)
    assert e.value.status == 400 and e.value.code == code


def test_completion_request() -> None:
    req = parse_request({"prompt": ["def f():"], "max_tokens": 5, "echo": False}, "completion")
    assert req.prompt == "def f():" and req.options.max_tokens == 5
    with pytest.raises(ApiError):
        parse_request({"prompt": "x", "messages": USER}, "completion")
    with pytest.raises(ApiError):
        parse_request({"prompt": "x", "echo": True}, "completion")


def _outcome() -> Outcome:
    c = Counters(n_prompt=10, n_prompt_reused=6, n_generated=5, n_target_forwards=3, n_drafted=4, n_accepted=2,
                 drafter_steps={"ngram": 2, "none": 1}, drafted_by={"ngram": 1, "prediction": 3},
                 accepted_by={"ngram": 1, "prediction": 1}, t_prefill=0.1, t_first_token=0.1, t_total=0.5)
    return Outcome("hello", "end", c, "stop", 0.01)


def test_response_and_chunk_shapes() -> None:
    ids = Ids("chatcmpl-1", 123, "m", "fp")
    out = _outcome()
    r = chat_response(ids, out)
    assert r["choices"][0]["message"] == {"role": "assistant", "content": "hello", "refusal": None}
    assert r["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                          "prompt_tokens_details": {"cached_tokens": 6},
                          "completion_tokens_details": {"accepted_prediction_tokens": 1,
                                                        "rejected_prediction_tokens": 2}}
    assert r["timings"]["draft_n"] == 4 and r["timings"]["draft_n_accepted"] == 2 and r["timings"]["prompt_n"] == 4
    assert r["specli"]["drafted"] == 4 and r["specli"]["drafter_steps"] == {"ngram": 2, "none": 1}
    first = chunk(ids, "chat", "he", first=True, include_usage=True)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "he"} and first["usage"] is None
    last = chunk(ids, "chat", None, out=out)
    assert last["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert usage_chunk(ids, "chat", out)["choices"] == []
    text = chunk(ids, "completion", "x")
    assert text["object"] == "text_completion" and text["choices"][0]["text"] == "x"
    json.dumps(r)


def test_prometheus_text() -> None:
    m = ServerMetrics()
    c = _outcome().counters
    c.drafted_by_pos, c.accepted_by_pos = [2, 2], [2, 0]
    m.add(RequestRecord("1", "chat", 200, c, "stop", 0.0, 0.5))
    m.add(RequestRecord("2", "chat", 499, Counters(n_prompt=3), "cancelled", 0.1, 0.2))
    text = m.prometheus(running=1, waiting=2)
    lines = text.splitlines()
    assert 'specli:requests_total{endpoint="chat",status="200"} 1' in lines
    assert 'specli:requests_total{endpoint="chat",status="499"} 1' in lines
    assert "specli:spec_decode_num_drafts_total 2" in lines
    assert "specli:spec_decode_num_draft_tokens_total 4" in lines
    assert 'specli:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 2' in lines
    assert "specli:prompt_tokens_total 13" in lines and "specli:requests_waiting 2" in lines
    for line in lines:  # every sample line is NAME[{labels}] VALUE
        if not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            float(value)
            assert name.startswith("specli:")
