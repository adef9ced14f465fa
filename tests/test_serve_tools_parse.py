"""Tool calls parsed out of a model's text, whole and streamed (pure)."""

from __future__ import annotations

import json

import pytest

from specli.serve.errors import ApiError
from specli.serve.protocols.openai_completions.request import parse_structure
from specli.serve.tools import CallStream, Structure, fenced_calls, parse_calls, tool_grammar

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


WRITE = parse_structure({"tools": [{"type": "function", "function": {"name": "Write", "parameters": {
    "type": "object", "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["file_path", "content"], "additionalProperties": False}}}]})
FENCED = '```json\n{\n  "name": "Write",\n  "arguments": {"content": "def add(a, b):\\n    return a + b\\n", ' \
         '"file_path": "calc.py"}\n}\n```'


def test_an_answer_of_fenced_json_calls_is_its_calls() -> None:
    """What Qwen2.5-Coder 1.5B writes under Claude Code: a given function and arguments
    its schema accepts (keys in any order), in a fenced block or bare; two blocks are two
    calls where calls may be parallel."""
    calls = fenced_calls(f"\n{FENCED}\n", WRITE)
    assert [(c.name, json.loads(c.arguments)["file_path"]) for c in calls] == [("Write", "calc.py")]
    bare = FENCED.removeprefix("```json\n").removesuffix("\n```")
    assert len(fenced_calls(bare, WRITE)) == 1 and len(fenced_calls(f"{FENCED}\n\n{FENCED}", WRITE)) == 2
    single = Structure(tools=WRITE.tools, parallel=False)
    assert fenced_calls(f"{FENCED}\n{FENCED}", single) == []


@pytest.mark.parametrize("text", [
    f"I will write the file:\n{FENCED}",  # prose around it: text
    FENCED.replace('"Write"', '"Delete"'),  # not a given tool
    FENCED.replace('"file_path": "calc.py"', '"path": "calc.py"'),  # arguments its schema refuses
    FENCED.replace('"file_path": "calc.py"', '"file_path": 7'),
    FENCED.replace('"arguments"', '"parameters"'),
    '```json\n{"name": "Write"\n```',  # broken JSON
    "```python\nprint(1)\n```",
    "",
])
def test_anything_else_stays_text(text: str) -> None:
    assert fenced_calls(text, WRITE) == []


def test_a_stream_holds_an_answer_that_may_be_fenced_calls_to_its_end() -> None:
    s = CallStream(WRITE)
    for i in range(0, len(FENCED), 7):
        assert s.push(FENCED[i:i + 7]) == ("", [])
    content, calls = s.finish()
    assert content == "" and [c.name for c in calls] == ["Write"]
    assert s.outcome(FENCED) == ("", calls)  # the ids streamed
    code = CallStream(WRITE)  # a code block of another language goes out as it comes
    assert code.push("```") == ("", []) and code.push("python\nprint(1)") == ("```python\nprint(1)", [])
    other = CallStream(WRITE)  # JSON that is not a call: held, then content at the end
    assert other.push('```json\n{"name": "x", "version": 1}\n```') == ("", [])
    assert other.finish() == ('```json\n{"name": "x", "version": 1}\n```', [])
    config = CallStream(WRITE)  # JSON whose first key is not "name": out at once
    assert config.push('```json\n{"version"') == ('```json\n{"version"', [])
