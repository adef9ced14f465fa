"""The Anthropic Messages protocol's pure parts: bodies into the internal request, the
stream's events in Anthropic's order, errors in its shape, reasoning split from text."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from specli.engine.metrics import Counters
from specli.serve import errors
from specli.serve.errors import ApiError
from specli.serve.outcome import Delta, Outcome
from specli.serve.protocols.anthropic_messages import MESSAGES
from specli.serve.protocols.anthropic_messages.reply import error, whole
from specli.serve.protocols.anthropic_messages.request import parse_messages
from specli.serve.protocols.base import Ids
from specli.serve.protocols.reasoning import ReasoningStream, split_reasoning
from specli.serve.rendering import fold_system
from specli.serve.tools import ToolCall

USER = [{"role": "user", "content": "hi"}]
TOOL = {"name": "Read", "description": "Read a file",
        "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                         "properties": {"file_path": {"type": "string"}}, "required": ["file_path"],
                         "additionalProperties": False}}


def test_a_conversation_with_tools_becomes_chat_messages() -> None:
    req = parse_messages({
        "model": "claude-haiku-4-5", "max_tokens": 100, "stop_sequences": ["END"], "temperature": 0.5, "top_k": 5,
        "system": [{"type": "text", "text": "You are an agent."}, {"type": "text", "text": "Be brief.",
                                                                    "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Read a.py"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should read it.", "signature": "abc"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a.py"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "x = 1"}]},
                {"type": "text", "text": "Now explain it."}]},
            {"role": "system", "content": "A reminder."},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom",
                                          "is_error": True}]}],
        "tools": [TOOL, {"type": "web_search_20250305", "name": "web_search"}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "adaptive"}, "metadata": {"user_id": "u"}, "context_management": {"edits": []},
        "output_config": {"effort": "high"}, "a_field_from_the_future": 1,
    })
    assert req.kind == "chat" and req.endpoint == "messages" and req.model == "claude-haiku-4-5"
    assert req.messages == (
        {"role": "system", "content": "You are an agent.\n\nBe brief."},
        {"role": "user", "content": "Read a.py"},
        {"role": "assistant", "content": "Reading.", "reasoning_content": "I should read it.",
         "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "Read",
                                                                         "arguments": {"file_path": "a.py"}}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "x = 1"},
        {"role": "user", "content": "Now explain it."},
        {"role": "system", "content": "A reminder."},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: boom"},
    )
    o = req.options
    assert (o.max_tokens, o.temperature, o.top_k, o.stop) == (100, 0.5, 5, ("END",))
    s = req.structure
    assert s is not None and s.names == ["Read"] and s.tool_choice == "required" and not s.parallel
    assert req.reasoning


@pytest.mark.parametrize("body,field", [
    ({"max_tokens": 5}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0]"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER, "temperature": "hot"}, "temperature"),
    ({"messages": USER, "stop_sequences": "END"}, None),  # a string is one sequence, as OpenAI's stop
    ({"messages": USER, "stop_sequences": [3]}, "stop_sequences"),
    ({"messages": USER, "tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({"messages": USER, "tools": [{"name": "f f", "input_schema": {"type": "object"}}]}, "tools[0].name"),
    ({"messages": USER, "tool_choice": {"type": "tool", "name": "g"}}, "tool_choice.name"),
    ({"messages": USER, "tool_choice": {"type": "any"}}, "tool_choice"),
    ({"messages": USER, "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"messages": USER, "thinking": "on"}, "thinking"),
    ({"messages": USER, "mcp_servers": [{"url": "x"}]}, "mcp_servers"),
    ({"messages": USER, "output_config": {"format": {"type": "json_schema", "schema": {"type": "bad"}}}},
     "output_config.format.schema"),
])
def test_bad_bodies_name_the_field(body: dict[str, Any], field: str | None) -> None:
    if field is None:
        assert parse_messages(body).options.stop == ("END",)
        return
    with pytest.raises(ApiError) as e:
        parse_messages(body)
    assert e.value.status == 400 and e.value.param == field, e.value.message
    reply = error(e.value)
    assert reply.status == 400 and reply.body == {"type": "error", "error": {
        "type": "invalid_request_error", "message": e.value.message}}


def test_errors_take_anthropics_types_and_a_full_queue_is_529() -> None:
    assert error(errors.busy(8, 8, 3)).status == 529
    assert error(errors.busy(8, 8, 3)).body["error"]["type"] == "overloaded_error"
    assert error(errors.busy(8, 8, 3)).headers == {"Retry-After": "3"}
    assert error(errors.wrong_api_key()).body["error"]["type"] == "authentication_error"
    assert error(errors.routing(404, "POST", "/v1/messages/x")).body["error"]["type"] == "not_found_error"
    assert error(errors.too_large(10, 5)).body["error"]["type"] == "request_too_large"
    assert error(errors.internal(ValueError("x"))).body["error"]["type"] == "api_error"


def test_system_messages_past_the_first_fold_into_a_user_turn() -> None:
    msgs = ({"role": "system", "content": "S"}, {"role": "user", "content": "a"},
            {"role": "system", "content": "r"}, {"role": "user", "content": "b"},
            {"role": "assistant", "content": "c"}, {"role": "system", "content": "late"})
    assert fold_system(msgs) == ({"role": "system", "content": "S"}, {"role": "user", "content": "a"},
                                 {"role": "user", "content": "r\n\nb\n\nlate"}, {"role": "assistant", "content": "c"})
    only = ({"role": "system", "content": "S"}, {"role": "system", "content": "T"})
    assert fold_system(only) == ({"role": "system", "content": "S\n\nT"},)
    assert fold_system(msgs[:2]) == msgs[:2]


def test_reasoning_is_split_from_the_answer_streamed_and_whole() -> None:
    text = "<think>\nLet me see.\n</think>\n\nThe answer."
    assert split_reasoning(text) == ("Let me see.", "The answer.")
    assert split_reasoning("Plain <think> text") == ("", "Plain <think> text")
    assert split_reasoning("<think>cut off") == ("cut off", "")
    for size in (1, 2, 3, 7, len(text)):
        stream = ReasoningStream(True)
        pieces = [p for i in range(0, len(text), size) for p in stream.push(text[i:i + size])] + stream.flush()
        thinking = "".join(t for k, t in pieces if k == "thinking")
        answer = "".join(t for k, t in pieces if k == "text")
        assert (thinking.strip(), answer) == ("Let me see.", "The answer."), (size, pieces)
    off = ReasoningStream(False)
    assert off.push("<think>x</think>y") + off.flush() == [("text", "<think>x</think>y")]


def _frames(items: list[Any], req_body: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    req = parse_messages(req_body or {"messages": USER, "stream": True})
    ids = Ids("msg_1", 0, "m", "specli", 12)

    async def run() -> list[bytes]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        for item in items:
            queue.put_nowait(item)
        return [b async for b in MESSAGES.events(ids, req, queue)]

    out = []
    for raw in asyncio.run(run()):
        head, data = raw.decode().split("\n", 1)
        obj = json.loads(data.removeprefix("data: "))
        assert head == f"event: {obj['type']}"
        out.append(obj)
    return out


def _outcome(text: str, reason: Any = "stop", calls: list[ToolCall] | None = None,
             stop: str | None = None) -> Outcome:
    c = Counters(n_prompt=12, n_prompt_reused=5, n_generated=7)
    finish = {"stop": "stop_string" if stop else "end", "tool_calls": "tool_call"}.get(reason, reason)
    return Outcome(text, finish, c, "stop", tool_calls=calls or [], stop_string=stop)


def test_stream_events_come_in_anthropics_order() -> None:
    call = ToolCall("Read", '{"file_path": "a.py"}', "call_abc")
    frames = _frames([Delta("Hel"), Delta("lo"), Delta("", ((0, call),)), _outcome("Hello", "tool_calls", [call])])
    assert [f["type"] for f in frames] == [
        "message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    assert frames[0]["message"]["usage"]["input_tokens"] == 12
    assert frames[1]["content_block"] == {"type": "text", "text": ""} and frames[1]["index"] == 0
    assert frames[3]["delta"] == {"type": "text_delta", "text": "Hel"}
    assert frames[6]["content_block"] == {"type": "tool_use", "id": "toolu_abc", "name": "Read", "input": {}}
    assert json.loads(frames[7]["delta"]["partial_json"]) == {"file_path": "a.py"} and frames[7]["index"] == 1
    assert frames[9]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert frames[9]["usage"] == {"input_tokens": 7, "cache_creation_input_tokens": 0,
                                  "cache_read_input_tokens": 5, "output_tokens": 7}


def test_a_stop_sequence_a_length_cut_and_an_error_mid_stream() -> None:
    frames = _frames([Delta("a"), _outcome("a", stop="END")])
    assert frames[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    frames = _frames([_outcome("", "length")])
    assert [f["type"] for f in frames] == ["message_start", "message_delta", "message_stop"]
    assert frames[1]["delta"]["stop_reason"] == "max_tokens"
    frames = _frames([Delta("a"), errors.shutting_down()])
    assert frames[-1] == {"type": "error", "error": {"type": "overloaded_error",
                                                      "message": "the server is shutting down"}}


def test_whole_message_blocks() -> None:
    req = parse_messages({"messages": USER})
    ids = Ids("msg_1", 0, "claude-x", "specli", 12)
    call = ToolCall("Read", '{"file_path": "a.py"}', "call_abc")
    out = whole(ids, req, _outcome("<think>hm</think>Sure.", "tool_calls", [call]))
    assert out["content"] == [{"type": "thinking", "thinking": "hm", "signature": ""},
                              {"type": "text", "text": "Sure."},
                              {"type": "tool_use", "id": "toolu_abc", "name": "Read", "input": {"file_path": "a.py"}}]
    assert (out["type"], out["role"], out["model"], out["stop_reason"]) == ("message", "assistant", "claude-x",
                                                                            "tool_use")
    assert whole(ids, req, _outcome(""))["content"] == [{"type": "text", "text": ""}]


def test_strict_model_refuses_other_names_in_each_protocols_shape() -> None:
    """With --strict-model a name other than the model's or an --alias is a 404 before
    anything else is looked at (here: a server still loading, which says 503)."""
    from starlette.testclient import TestClient

    from specli.profiles import Settings
    from specli.serve.app import AppConfig, create_app
    from specli.serve.stats import ServerMetrics
    from specli.serve.worker import Worker

    def post(strict: bool, path: str, model: str) -> tuple[int, dict[str, Any]]:
        config = AppConfig("qwen", listed=("claude-haiku",), strict_model=strict)
        with TestClient(create_app(Worker(Settings(), 1), ServerMetrics(), config)) as http:
            body = {"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
            r = http.post(path, json=body)
            return r.status_code, r.json()

    status, body = post(True, "/v1/messages", "claude-opus")
    assert status == 404 and body["error"]["type"] == "not_found_error" and "qwen" in body["error"]["message"]
    status, body = post(True, "/v1/chat/completions", "claude-opus")
    assert status == 404 and body["error"]["code"] == "model_not_found"
    assert post(True, "/v1/messages", "claude-haiku")[0] == 503
    assert post(False, "/v1/messages", "claude-opus") == (503, {"type": "error", "error": {
        "type": "overloaded_error", "message": "the model is still loading; try again shortly"}})


def test_claude_codes_billing_line_is_not_shown_to_the_model() -> None:
    """Claude Code's attribution line changes with each conversation's first prompt (the
    version's last digits) and each request (cch=): off the prompt, new conversations share
    the whole system prompt, as their tools, with the ones before."""
    def system(fingerprint: str, stamp: str, *, one_block: bool = False) -> str:
        head = f"x-anthropic-billing-header: cc_version=2.1.332.{fingerprint}; cc_entrypoint=sdk-cli; cch={stamp};"
        blocks = ([{"type": "text", "text": head + "You are..."}] if one_block
                  else [{"type": "text", "text": head}, {"type": "text", "text": "You are..."}])
        req = parse_messages({"system": blocks, "messages": USER})
        return str(req.messages[0]["content"])

    assert system("642", "a5145") == system("934", "0b9e2") == "You are..."
    assert system("642", "a5145", one_block=True) == "You are..."  # llama-server's example: text after the last ';'
    assert parse_messages({"system": "x-anthropic-billing-header: cc_version=1.0.abc;\nBe brief.",
                           "messages": USER}).messages[0]["content"] == "Be brief."
    kept = "Quote: x-anthropic-billing-header: cch=a5145; stays where it is not the start"
    assert parse_messages({"system": kept, "messages": USER}).messages[0]["content"] == kept
    assert parse_messages({"system": [{"type": "text", "text": "x-anthropic-billing-header: cch=a5145;"}],
                           "messages": USER}).messages[0]["role"] == "user"  # nothing left: no system message
