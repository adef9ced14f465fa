"""`POST /v1/messages` (Anthropic Messages) on a real `specli serve` process (Qwen2.5-Coder
0.5B, whose template calls tools) through the official `anthropic` client and plain
HTTP, and the bodies Claude Code and opencode really sent (tests/fixtures/agents)
replayed against it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import QWEN_DRAFT, model_file
from typer.testing import CliRunner

from harness.processes import ServeProcess, http, running

anthropic = pytest.importorskip("anthropic")

MODEL = QWEN_DRAFT
KEY = "messages-key"
CTX = "16384"  # Claude Code's first request is 11.7k tokens with this tokenizer
ARGS = ["--target", MODEL, "--draft", "none", "--ctx", CTX, "--parallel", "2", "--api-key", KEY,
        "--alias", "claude-haiku-4-5"]
FIXTURES = Path(__file__).parent / "fixtures" / "agents"
PROMPT = "List the first five planets of the solar system, one per line."
GREEDY = {"temperature": 0}  # the SDK no longer takes sampling arguments; agents send none
WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    model_file(MODEL)
    cache = tmp_path_factory.mktemp("prompt-cache")  # what earlier runs saved is not this run's
    with running(ARGS, env={"SPECLI_PROMPT_CACHE_DIR": str(cache)}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> Any:
    return anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0, timeout=600)


def events_of(raw: bytes) -> list[dict[str, Any]]:
    """The server-sent events of a stream, each checked to name its own type."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        head, data = block.split("\n", 1)
        obj = json.loads(data.removeprefix("data: "))
        assert head == f"event: {obj['type']}"
        out.append(obj)
    return out


def check_order(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic's stream grammar: message_start, then blocks numbered from 0 (start,
    deltas of the block's kind, stop), pings anywhere, one message_delta, message_stop.
    Returns the blocks as assembled."""
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    assert events[-2]["type"] == "message_delta"
    blocks: list[dict[str, Any]] = []
    open_index = None
    for ev in events[1:-2]:
        kind = ev["type"]
        if kind == "ping":
            continue
        if kind == "content_block_start":
            assert open_index is None and ev["index"] == len(blocks)
            blocks.append(dict(ev["content_block"], partial=""))
            open_index = ev["index"]
        elif kind == "content_block_delta":
            assert ev["index"] == open_index
            block, delta = blocks[-1], ev["delta"]
            want = {"text": "text_delta", "tool_use": "input_json_delta", "thinking": "thinking_delta"}[block["type"]]
            assert delta["type"] == want
            block["partial"] += delta.get("text", "") + delta.get("partial_json", "") + delta.get("thinking", "")
        else:
            assert kind == "content_block_stop" and ev["index"] == open_index
            open_index = None
    assert open_index is None
    return blocks


# -- the SDK, whole and streamed ------------------------------------------------------------


def test_greedy_message_equals_generate_streamed_and_whole(client: Any) -> None:
    from specli.cli import app

    # plain decoding, the reference greedy speculation must equal
    res = CliRunner().invoke(app, ["generate", "--target", MODEL, "--draft", "none", "--drafter", "none", "--ctx",
                                   CTX, "--json", "-n", "40", "--no-history", PROMPT])
    assert res.exit_code == 0, res.output
    expected = json.loads(res.stdout)
    kw: dict[str, Any] = {"model": "claude-haiku-4-5", "max_tokens": 40,
                          "messages": [{"role": "user", "content": PROMPT}],
                          "extra_body": {"temperature": 0, "specli": {"history": False}}}
    whole = client.messages.create(**kw)
    assert whole.content[0].type == "text" and whole.content[0].text == expected["text"]
    assert whole.model == "claude-haiku-4-5" and whole.role == "assistant" and whole.type == "message"
    assert whole.usage.output_tokens == expected["n_tokens"]
    assert whole.stop_reason in ("end_turn", "max_tokens")
    with client.messages.stream(**kw) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == expected["text"] and final.stop_reason == whole.stop_reason
    # the same prompt again: read from the cache but its last token
    assert final.usage.cache_read_input_tokens >= whole.usage.input_tokens + whole.usage.cache_read_input_tokens - 1


def test_a_tool_round_trip(client: Any) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    first = client.messages.create(model="any-name", max_tokens=100, messages=messages, tools=[WEATHER],
                                   tool_choice={"type": "any"}, extra_body=GREEDY)
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.id.startswith("toolu_") and call.input["city"]
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                               "content": json.dumps({"temperature": -7, "sky": "snow"})}]}]
    with client.messages.stream(model="any-name", max_tokens=80, messages=messages, tools=[WEATHER],
                                tool_choice={"type": "none"}, extra_body=GREEDY) as stream:
        second = stream.get_final_message()
    answer = "".join(b.text for b in second.content if b.type == "text")
    assert second.stop_reason == "end_turn" and ("-7" in answer or "snow" in answer.lower()), answer
    # streamed: the call as a tool_use block whose JSON deltas add up to its input
    status, _, raw = http("POST", client.base_url.__str__().rstrip("/") + "/v1/messages",
                          {"model": "x", "max_tokens": 100, "temperature": 0, "stream": True, "tools": [WEATHER],
                           "tool_choice": {"type": "tool", "name": "get_weather"},
                           "messages": [{"role": "user", "content": "Weather in Lima?"}]},
                          headers={"x-api-key": KEY}, timeout=300)
    blocks = check_order(events_of(raw))
    assert status == 200 and blocks[-1]["type"] == "tool_use" and json.loads(blocks[-1]["partial"])["city"]


def test_stop_sequences_and_count_tokens(client: Any) -> None:
    msg = client.messages.create(model="m", max_tokens=60, stop_sequences=["Mars"], extra_body=GREEDY,
                                 messages=[{"role": "user", "content": PROMPT}])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "Mars" and "Mars" not in msg.content[0].text
    counted = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": PROMPT}])
    assert counted.input_tokens == msg.usage.input_tokens + msg.usage.cache_read_input_tokens > 10


# -- names, keys, errors -----------------------------------------------------------------


def test_any_model_name_is_served_and_aliases_are_listed(client: Any, server: ServeProcess) -> None:
    ids = [m.id for m in client.models.list()]  # Anthropic's shape: the SDK sends anthropic-version
    assert ids == [MODEL, "claude-haiku-4-5"]
    status, _, data = http("GET", server.base + "/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(data)["data"]] == ids


@pytest.mark.parametrize("body,status,kind", [
    ({"max_tokens": 5}, 400, "invalid_request_error"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]},
     400, "invalid_request_error"),
    ({"max_tokens": 5, "temperature": 9, "messages": [{"role": "user", "content": "x"}]},
     400, "invalid_request_error"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "word " * 20000}]}, 400, "invalid_request_error"),
])
def test_bad_requests_get_anthropics_error_shape(server: ServeProcess, body: dict[str, Any], status: int,
                                                 kind: str) -> None:
    got, _, data = http("POST", server.base + "/v1/messages", body, headers={"x-api-key": KEY})
    err = json.loads(data)
    assert got == status and err["type"] == "error" and err["error"]["type"] == kind and err["error"]["message"]


def test_keys_routes_and_the_server_keeps_serving(client: Any, server: ServeProcess) -> None:
    bad = anthropic.Anthropic(base_url=server.base, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    status, _, data = http("POST", server.base + "/v1/messages/nothing", {}, headers={"x-api-key": KEY})
    assert status == 404 and json.loads(data)["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="m", max_tokens=5, messages=[])
    ok = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "Say hi."}])
    assert ok.usage.output_tokens >= 1


# -- what the agents really send ----------------------------------------------------------


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def test_claude_code_requests_replayed(server: ServeProcess) -> None:
    """Claude Code's first turn (12 tools, 3 system blocks, a system message after the
    user's, adaptive thinking, context_management, output_config, max_tokens 32000,
    streamed), then the same session's variants: the first prefill is shared by the rest."""
    for i, name in enumerate(["claude-code-1-messages.json", "claude-code-4-messages-max-output-4096.json"]):
        rec = _fixture(name)
        body = dict(rec["body"], max_tokens=12)  # the protocol is under test, not the model's answer
        headers = {k: v for k, v in rec["headers"].items() if k.startswith("anthropic-")}
        status, _, raw = http("POST", server.base + rec["path"], body,
                              headers={**headers, "Authorization": f"Bearer {KEY}"}, timeout=900)
        assert status == 200, raw[:500]
        events = events_of(raw)
        check_order(events)
        usage = events[-2]["usage"]
        assert events[-2]["delta"]["stop_reason"] in ("max_tokens", "end_turn", "tool_use")
        assert events[0]["message"]["model"] == body["model"]
        if i:  # the system prompt and tools came from the cache (the two differ from their git status on)
            total = usage["input_tokens"] + usage["cache_read_input_tokens"]
            assert usage["cache_read_input_tokens"] > 0.75 * total, (usage, server.log[-3000:])
        status, _, data = http("POST", server.base + "/v1/messages/count_tokens",
                               {k: v for k, v in body.items() if k not in ("max_tokens", "stream")},
                               headers={"x-api-key": KEY})
        assert status == 200 and json.loads(data)["input_tokens"] == usage["input_tokens"] + \
            usage["cache_read_input_tokens"]
    # the default model's body (model claude-opus-5-5, effort medium) renders the same way
    body = _fixture("claude-code-2-messages-default-model.json")["body"]
    status, _, data = http("POST", server.base + "/v1/messages/count_tokens",
                           {k: v for k, v in body.items() if k not in ("max_tokens", "stream")},
                           headers={"x-api-key": KEY})
    assert status == 200 and 11000 < json.loads(data)["input_tokens"] < 13000


def test_claude_code_2_1_197_requests_replayed(server: ServeProcess) -> None:
    """Claude Code 2.1.197, which exited 1 at its first request (a 400 for the
    propertyNames of its TaskCreate and TaskUpdate tools): its HEAD / probe, its whole
    turn counted (24 tools, 18.7k tokens: past this server's context), and the turn
    with those two tools and Bash answered, the keyword named in specli.notes."""
    status, _, _ = http("HEAD", server.base + _fixture("claude-code-2.1.197-1-head-root.json")["path"])
    assert status < 500
    rec = _fixture("claude-code-2.1.197-2-messages.json")
    headers = {**{k: v for k, v in rec["headers"].items() if k.startswith("anthropic-")},
               "Authorization": f"Bearer {KEY}"}
    body = rec["body"]
    status, _, data = http("POST", server.base + "/v1/messages/count_tokens",
                           {k: v for k, v in body.items() if k not in ("max_tokens", "stream")}, headers=headers)
    assert status == 200 and json.loads(data)["input_tokens"] > 15000, data[:300]
    tools = [t for t in body["tools"] if t["name"] in ("TaskCreate", "TaskUpdate", "Bash")]
    status, _, data = http("POST", server.base + rec["path"], dict(body, tools=tools, max_tokens=12, stream=False),
                           headers=headers, timeout=900)
    assert status == 200, data[:500]
    notes = json.loads(data)["specli"]["notes"]
    assert [n.split(":")[0] for n in notes if "propertyNames" in n] == ["tool TaskCreate", "tool TaskUpdate"], notes


@pytest.mark.parametrize("version", ["", "1.17.19-"])
def test_opencode_requests_replayed(server: ServeProcess, version: str) -> None:
    """opencode's title call and its agent turn (10 tools), streamed with usage (1.18.33
    and 1.17.19, which also sends top_p 1)."""
    for name in [f"opencode-{version}1-title.json", f"opencode-{version}2-agent-turn.json"]:
        rec = _fixture(name)
        body = dict(rec["body"], max_tokens=12)
        status, _, raw = http("POST", server.base + rec["path"], body, headers={"Authorization": f"Bearer {KEY}"},
                              timeout=900)
        assert status == 200, raw[:500]
        chunks = [json.loads(line.removeprefix("data: ")) for line in raw.decode().split("\n\n")
                  if line.startswith("data: {")]
        assert raw.decode().rstrip().endswith("data: [DONE]")
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
        assert chunks[-2]["choices"][0]["finish_reason"] in ("length", "stop", "tool_calls")
