"""`POST /v1/responses` (OpenAI Responses) and llama-server's helper routes on a real
`specli serve` process (Qwen2.5-Coder 0.5B) through the official `openai` client and
plain HTTP, and the body Codex really sent (tests/fixtures/agents) replayed against it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import QWEN_DRAFT, model_file

from harness.processes import ServeProcess, http, running

openai = pytest.importorskip("openai")

MODEL = QWEN_DRAFT
KEY = "responses-key"
ARGS = ["--target", MODEL, "--draft", "none", "--ctx", "12288", "--parallel", "2", "--api-key", KEY]
FIXTURES = Path(__file__).parent / "fixtures" / "agents"
AUTH = {"Authorization": f"Bearer {KEY}"}
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SUM = r"[0-9]{1,4} [+*-] [0-9]{1,4}"
CALC = {"type": "custom", "name": "calc", "description": "Evaluates one arithmetic expression, like 12 * 7.",
        "format": {"type": "grammar", "syntax": "regex", "definition": SUM}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    model_file(MODEL)
    cache = tmp_path_factory.mktemp("prompt-cache")
    with running(ARGS, env={"SPECLI_PROMPT_CACHE_DIR": str(cache)}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> Any:
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=900)


def post(server: ServeProcess, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    status, _, raw = http("POST", server.base + path, body, headers=AUTH if headers is None else headers, timeout=900)
    return status, raw


def check_events(raw: bytes) -> dict[str, Any]:
    """The Responses stream grammar: numbered events, created and in_progress first, each
    output item added, its parts and deltas, done, in turn; one final event whose
    response's output is what the events built. Returns that response."""
    events = []
    for block in raw.decode().split("\n\n"):
        if block.strip():
            head, data = block.split("\n", 1)
            obj = json.loads(data.removeprefix("data: "))
            assert head == f"event: {obj['type']}"
            events.append(obj)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created" and events[1]["type"] == "response.in_progress"
    final = events[-1]
    assert final["type"] in ("response.completed", "response.incomplete")
    items: list[dict[str, Any]] = []
    open_item: dict[str, Any] | None = None
    text = ""
    for ev in events[2:-1]:
        kind = ev["type"]
        if kind == "response.in_progress":
            assert open_item is None
        elif kind == "response.output_item.added":
            assert open_item is None and ev["output_index"] == len(items)
            open_item, text = ev["item"], ""
        elif kind in ("response.output_text.delta", "response.reasoning_text.delta",
                      "response.function_call_arguments.delta", "response.custom_tool_call_input.delta"):
            assert open_item is not None and ev["item_id"] == open_item["id"]
            text += ev["delta"]
        elif kind == "response.output_item.done":
            assert open_item is not None and ev["item"]["id"] == open_item["id"]
            done = ev["item"]
            assert _written(done) == text
            items.append(done)
            open_item = None
        else:
            assert open_item is not None, kind
    assert open_item is None and final["response"]["output"] == items
    response: dict[str, Any] = final["response"]
    return response


def _written(item: dict[str, Any]) -> str:
    """What an output item's deltas spell: its text, arguments or input."""
    if item["type"] in ("message", "reasoning"):
        return str(item["content"][0]["text"])
    return str(item["arguments"] if item["type"] == "function_call" else item["input"])


def test_whole_and_streamed_answers_are_the_same_and_equal_chat_completions(client: Any, server: ServeProcess) -> None:
    prompt = "List the first five planets of the solar system, one per line."
    whole = client.responses.create(model="gpt-5-codex", input=prompt, temperature=0, max_output_tokens=60)
    assert whole.status == "completed" and whole.output_text and whole.model == "gpt-5-codex"
    with client.responses.stream(model="m", input=prompt, temperature=0, max_output_tokens=60) as stream:
        deltas = "".join(ev.delta for ev in stream if ev.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas == final.output_text == whole.output_text
    status, raw = post(server, "/v1/responses", {"input": prompt, "temperature": 0, "max_output_tokens": 60,
                                                 "stream": True})
    assert status == 200 and check_events(raw)["output"][0]["content"][0]["text"] == whole.output_text
    chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}], temperature=0,
                                          max_tokens=60)
    assert chat.choices[0].message.content == whole.output_text
    assert whole.usage.input_tokens == chat.usage.prompt_tokens


def test_a_function_tool_round_trip_goes_on_from_the_stored_response(client: Any) -> None:
    first = client.responses.create(model="m", input="What is the weather in Paris?", tools=[WEATHER],
                                    tool_choice="required", temperature=0)
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "get_weather" and json.loads(call.arguments)["city"]
    assert client.responses.retrieve(first.id).output[-1].call_id == call.call_id
    second = client.responses.create(model="m", previous_response_id=first.id, tools=[WEATHER], temperature=0,
                                     max_output_tokens=40, tool_choice="none",
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "Sunny, 21 C"}])
    assert second.output_text and second.previous_response_id == first.id
    # going on prefills only what is new: the stored conversation is in the cache
    new = second.usage.input_tokens - second.usage.input_tokens_details.cached_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens and new < 40, second.usage
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="m", previous_response_id=first.id, input="And tomorrow?")


def test_a_custom_tools_input_always_parses_under_its_grammar(client: Any, server: ServeProcess) -> None:
    for question in ("What is 12 times 7?", "Add 400 and 38.", "Subtract 9 from 1000."):
        r = client.responses.create(model="m", input=question, tools=[CALC], temperature=0,
                                    tool_choice={"type": "custom", "name": "calc"})
        call = r.output[-1]
        assert call.type == "custom_tool_call" and call.name == "calc" and re.fullmatch(SUM, call.input), call
    status, raw = post(server, "/v1/responses", {"input": "What is 12 times 7?", "tools": [CALC], "stream": True,
                                                 "temperature": 0, "tool_choice": "required"})
    streamed = check_events(raw)["output"][-1]
    assert streamed["type"] == "custom_tool_call" and re.fullmatch(SUM, streamed["input"])
    answer = client.responses.create(model="m", previous_response_id=r.id, tools=[CALC], tool_choice="none",
                                     temperature=0, max_output_tokens=30,
                                     input=[{"type": "custom_tool_call_output", "call_id": call.call_id,
                                             "output": "962"}])
    assert answer.output[0].type == "message" and answer.status in ("completed", "incomplete")


@pytest.mark.parametrize("version", ["", "0.169.1-"])
def test_codexs_request_replayed(server: ServeProcess, version: str) -> None:
    """What Codex 0.171 and 0.169.1 sent (40 KB: developer messages, namespace, custom
    apply_patch and web_search tools, store false), streamed; and its input tokens counted alike."""
    body = json.loads(next(FIXTURES.glob(f"codex-{version}2-*.json")).read_text())["body"]
    status, raw = post(server, "/v1/responses", {**body, "temperature": 0, "max_output_tokens": 12})
    assert status == 200, raw[:300]
    response = check_events(raw)
    assert response["status"] in ("completed", "incomplete") and response["store"] is False
    assert any("web_search" in note for note in response["specli"]["notes"])
    status, counted = post(server, "/v1/responses/input_tokens", body)
    assert status == 200 and json.loads(counted)["input_tokens"] == response["usage"]["input_tokens"] > 8000
    status, _, gone = http("GET", f"{server.base}/v1/responses/{response['id']}", headers=AUTH)
    assert status == 404 and json.loads(gone)["error"]["type"] == "not_found_error"  # store: false


def test_bad_requests_get_openais_error_shape_and_the_server_serves_on(server: ServeProcess) -> None:
    cases = [({"input": [{"type": "message", "role": "user", "content": [{"type": "input_image"}]}]}, 400),
             ({"input": "x", "tools": [{"type": "custom", "name": "p", "format": {
                 "type": "grammar", "syntax": "lark", "definition": "start: ("}}]}, 400),
             ({"input": "x", "previous_response_id": "resp_gone"}, 404)]
    for body, want in cases:
        status, raw = post(server, "/v1/responses", body)
        err = json.loads(raw)["error"]
        assert status == want and err["message"] and set(err) == {"message", "type", "param", "code"}
    assert post(server, "/v1/responses", {"input": "x"}, headers={})[0] == 401
    status, raw = post(server, "/v1/responses", {"input": "Say OK.", "max_output_tokens": 3, "temperature": 0})
    assert status == 200 and json.loads(raw)["status"] in ("completed", "incomplete")


def test_llama_servers_helper_routes(server: ServeProcess) -> None:
    text = "<|im_start|>user\nnaïve café 🚀<|im_end|>"
    status, raw = post(server, "/tokenize", {"content": text, "with_pieces": True})
    pieces = json.loads(raw)["tokens"]
    assert status == 200 and pieces[0] == {"id": 151644, "piece": "<|im_start|>"}
    ids = [p["id"] for p in pieces]
    assert json.loads(post(server, "/tokenize", {"content": text})[1])["tokens"] == ids
    assert json.loads(post(server, "/tokenize", {"content": text, "parse_special": False})[1])["tokens"] != ids
    assert json.loads(post(server, "/detokenize", {"tokens": ids})[1]) == {"content": text}
    assert post(server, "/detokenize", {"tokens": [-1]})[0] == 400
    prompt = json.loads(post(server, "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})[1])["prompt"]
    assert prompt.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    status, _, props = http("GET", f"{server.base}/props")
    info = json.loads(props)
    assert status == 200 and info["default_generation_settings"]["n_ctx"] == 12288 and info["total_slots"] == 2
    assert "<tool_call>" in info["chat_template"] and info["eos_token"] == "<|im_end|>"
    assert http("GET", f"{server.base}/slots")[0] == 401
    status, _, slots = http("GET", f"{server.base}/slots", headers=AUTH)
    assert status == 200 and [s["id"] for s in json.loads(slots)] == [0, 1]
