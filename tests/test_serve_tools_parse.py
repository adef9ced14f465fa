"""Tool calls parsed out of a model's text, whole and streamed (pure)."""

from __future__ import annotations

import json

import pytest

from specli.serve.errors import ApiError
from specli.serve.tools import CallStream, Structure, parse_calls, parse_structure, tool_grammar

CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'


def test_calls_are_parsed_and_the_rest_is_content() -> None:
    content, calls = parse_calls(f"{CALL}\n{CALL.replace('a.py', 'b.py')}\n", ["read_file"])
    assert content == "" and [json.loads(c.arguments)["path"] for c in calls] == ["a.py", "b.py"]
    assert calls[0].id != calls[1].id and calls[0].to_json(0)["function"]["name"] == "read_file"
    # an unknown tool or broken JSON is not a call: the text stays content
    for text in (CALL.replace("read_file", "rm_rf"), CALL.replace("}}", "}"), "just text"):
        assert parse_calls(text, ["read_file"]) == (text, [])


READ_FILE = Structure(tools=({"type": "function", "function": {"name": "read_file", "parameters": {}}},))


def test_a_stream_holds_back_what_may_open_a_call() -> None:
    s = CallStream(READ_FILE)
    pieces = ["<tool", "_call>\n{\"name\": \"read_file\", ", "\"arguments\": {\"path\": \"a.py\"}}\n</tool_", "call>\n"]
    out = [s.push(p) for p in pieces]
    assert all(text == "" for text, _ in out)
    assert [len(calls) for _, calls in out] == [0, 0, 0, 1] and s.calls[0].name == "read_file"
    plain = CallStream(READ_FILE)
    assert plain.push("<") == ("", []) and plain.push("b>hello") == ("<b>hello", [])
    assert plain.push(" world") == (" world", [])


def test_structure_and_its_grammar() -> None:
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
    s = parse_structure({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "read_file"}}})
    assert s.calls_tools and s.tool_choice == "read_file" and s.names == ["read_file"]
    assert tool_grammar(s, 7, 8) is not None
    assert tool_grammar(Structure(tools=s.tools, tool_choice="none"), 7, 8) is None
    strict = parse_structure({"response_format": {"type": "json_schema", "json_schema": {
        "strict": True, "schema": {"type": "object", "properties": {"a": {"type": "object"}}}}}})
    assert strict.response_format is not None and '"additionalProperties": false' in strict.response_format.source
    with pytest.raises(ApiError):
        parse_structure({"tools": [{"type": "function", "function": {"name": "bad name!"}}]})
