"""The Responses API without a server: request bodies (Codex's as recorded) checked into
the internal request, custom tools held to their grammar on Qwen's real vocabulary,
the answer's output items, and the store of responses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specli.engine import metrics
from specli.engine.grammar import Constraint
from specli.serve.errors import ApiError
from specli.serve.outcome import Outcome
from specli.serve.protocols.base import Ids
from specli.serve.protocols.openai_responses.reply import after_previous, protocol
from specli.serve.protocols.openai_responses.request import ResponsesCall, parse_responses
from specli.serve.protocols.openai_responses.store import ResponseStore, Stored
from specli.serve.tools import CallStream, ToolCall, parse_calls, tool_grammar

FIXTURES = Path(__file__).parent / "fixtures" / "agents"


def codex(n: int) -> dict[str, Any]:
    path = next(FIXTURES.glob(f"codex-{n}-*.json"))
    body: dict[str, Any] = json.loads(path.read_text())["body"]
    return body


def patch_grammar() -> str:
    return str(next(t for t in codex(2)["tools"] if t["type"] == "custom")["format"]["definition"])


PATCH = "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return a - b\n+    return a + b\n*** End Patch"


def test_codexs_requests_become_chat_requests() -> None:
    for n in (1, 2):
        body = codex(n)
        req = parse_responses(body)
        call: ResponsesCall = req.reply
        assert req.kind == "chat" and req.stream and req.endpoint == "responses" and not call.store
        assert req.messages[0]["role"] == "system"  # Codex's developer message
        assert req.messages[-1]["role"] == "user" and "calc.py" in json.dumps(req.messages)
        assert req.structure is not None and req.structure.tool_choice == "auto" and req.structure.parallel
        # the namespace's functions flattened, named back by their namespace
        assert call.namespaces["close_agent"] == ("multi_agent_v1", "close_agent")
        assert "close_agent" in req.structure.names and "exec_command" in req.structure.names
        assert any("web_search" in note for note in call.notes)
        assert call.echo["prompt_cache_key"] == body["prompt_cache_key"]
    custom = parse_responses(codex(2)).structure
    assert custom is not None and custom.custom_names == ["apply_patch"] and custom.custom[0].syntax == "lark"
    assert "apply_patch" in [t["function"]["name"] for t in custom.template_tools]


def test_input_items_become_turns_in_order() -> None:
    req = parse_responses({"instructions": "Be brief.", "input": [
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAA..."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"path": "a.py"}'},
        {"type": "function_call", "call_id": "c2", "name": "read", "arguments": '{"path": "b.py"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
        {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "c3", "output": "Done"},
    ]})
    roles = [m["role"] for m in req.messages]
    assert roles == ["system", "system", "user", "assistant", "tool", "tool", "assistant", "tool"]
    assistant = req.messages[3]
    assert assistant["content"] == "Looking." and [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert assistant["tool_calls"][1]["function"]["arguments"] == {"path": "b.py"}
    assert req.messages[5]["content"] == "two"
    assert req.messages[6]["content"] == f'<tool_call>\n{{"name": "apply_patch"}}\n{PATCH}\n</tool_call>'
    assert req.reply.notes == ("encrypted reasoning dropped: this server cannot read it",)
    assert parse_responses({"input": "hi"}).messages == ({"role": "user", "content": "hi"},)


@pytest.mark.parametrize(("body", "param"), [
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "web_search_call"}]}, "input[0].type"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "tools": [{"type": "hologram"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "custom", "name": "p", "format": {
        "type": "grammar", "syntax": "lark", "definition": "start: ("}}]}, "tools[0].format.definition"),
    ({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {}}],
      "tool_choice": {"type": "function", "name": "g"}}, "tool_choice"),
    ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format"),
    ({"input": "x", "previous_response_id": 7}, "previous_response_id"),
])
def test_bad_bodies_are_400s_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_responses(body)
    assert e.value.status == 400 and e.value.param == param, e.value.message


def test_a_missing_previous_response_is_a_404() -> None:
    req = parse_responses({"input": "x", "previous_response_id": "resp_nothere"})
    with pytest.raises(ApiError) as e:
        after_previous(req, ResponseStore())
    assert e.value.status == 404 and e.value.code == "previous_response_not_found"


def test_a_custom_tools_input_follows_its_grammar(qwen_draft: Any) -> None:
    """Codex's apply_patch grammar on Qwen's vocabulary: a patch call is taken whole,
    parsed back to the exact input; a call that breaks the grammar is refused where it
    breaks; after the tool's name the grammar forces the patch's first line."""
    structure = parse_responses({"input": "x", "tools": [t for t in codex(2)["tools"] if t["type"] != "namespace"],
                                 "tool_choice": "required"}).structure
    assert structure is not None
    m = qwen_draft
    open_tag, close_tag = (m.tokenize(t, add_special=False, parse_special=True)[0]
                           for t in ("<tool_call>", "</tool_call>"))
    grammar = tool_grammar(structure, open_tag, close_tag)
    assert grammar is not None
    text = f'<tool_call>\n{{"name": "apply_patch"}}\n{PATCH}\n</tool_call>'
    tokens = m.tokenize(text, add_special=False, parse_special=True)
    c = Constraint(grammar, m.vocab)
    assert c.valid_prefix(tokens) == len(tokens)
    bad = m.tokenize(text.replace("*** Update File", "*** Patch File"), add_special=False, parse_special=True)
    assert c.valid_prefix(bad) < len(bad)
    head = m.tokenize('<tool_call>\n{"name": "apply_patch"', add_special=False, parse_special=True)
    c.advance(head)
    assert m.detokenize(c.forced()).startswith('}\n*** Begin Patch\n')
    content, calls = parse_calls(text, structure.names, structure.custom_names)
    assert content == "" and len(calls) == 1 and calls[0].custom and calls[0].arguments == PATCH
    stream = CallStream(structure)
    assert [len(stream.push(p)[1]) for p in (text[:30], text[30:])] == [0, 1] and stream.calls[0].arguments == PATCH


def _outcome(text: str, calls: list[ToolCall] | None = None, finish: str = "stop") -> Outcome:
    return Outcome(text, "tool_call" if calls else {"stop": "end"}.get(finish, finish), metrics.Counters(n_prompt=10, n_prompt_reused=4,
                                                                              n_generated=3), "stop",
                   tool_calls=calls or [])


def test_output_items_and_what_is_stored(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path)
    proto = protocol(store)
    req = proto.parse({"instructions": "Be brief.", "input": "Fix it", "tools": [
        {"type": "namespace", "name": "agents", "tools": [{"type": "function", "name": "spawn", "parameters": {}}]},
        {"type": "custom", "name": "apply_patch"}]})
    calls = [ToolCall("spawn", '{"task": "x"}'), ToolCall("apply_patch", PATCH, custom=True)]
    ids = Ids("resp_abc123", 1, "m", "specli", 10)
    obj = proto.whole(ids, req, _outcome("<think>Plan.</think>\n\nOn it.", calls))
    assert [o["type"] for o in obj["output"]] == ["reasoning", "message", "function_call", "custom_tool_call"]
    assert obj["output"][0]["content"][0]["text"] == "Plan." and obj["output"][1]["content"][0]["text"] == "On it."
    assert obj["output"][2]["namespace"] == "agents" and obj["output"][2]["name"] == "spawn"
    assert obj["output"][3]["input"] == PATCH and obj["output"][3]["call_id"] == calls[1].id
    assert obj["usage"]["input_tokens_details"]["cached_tokens"] == 4 and obj["status"] == "completed"
    assert obj["instructions"] == "Be brief." and obj["store"] is True
    stored = ResponseStore(tmp_path).get("resp_abc123")  # from disk
    assert stored is not None and stored.response == obj
    turn = stored.messages[-1]
    assert stored.messages[0] == {"role": "user", "content": "Fix it"}  # instructions are not carried on
    assert turn["reasoning_content"] == "Plan." and turn["tool_calls"][0]["function"]["name"] == "spawn"
    assert turn["content"].startswith("On it.\n<tool_call>\n{\"name\": \"apply_patch\"}")
    nxt = proto.parse({"input": [{"type": "function_call_output", "call_id": calls[0].id, "output": "ok"}],
                       "previous_response_id": "resp_abc123"})
    assert [m["role"] for m in nxt.messages] == ["user", "assistant", "tool"]
    cut = proto.whole(ids, req, _outcome("Half", finish="length"))
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    empty = proto.whole(ids, parse_responses({"input": "x", "store": False}), _outcome(""))
    assert [o["type"] for o in empty["output"]] == ["message"]


def test_the_store_is_bounded_and_deletes(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, capacity=3)
    for i in range(5):
        store.put(f"resp_{i}", Stored({"id": f"resp_{i}"}, ({"role": "user", "content": str(i)},)))
    assert [store.get(f"resp_{i}") is not None for i in range(5)] == [False, False, True, True, True]
    assert len(list(tmp_path.glob("resp_*.json"))) == 3
    assert store.delete("resp_4") and store.get("resp_4") is None and not store.delete("resp_4")
    assert store.get("../etc/passwd") is None and not store.delete("resp_../../x")
    memory = ResponseStore(None, capacity=1)
    memory.put("resp_a", Stored({}, ()))
    memory.put("resp_b", Stored({}, ()))
    assert memory.get("resp_a") is None and memory.get("resp_b") is not None
