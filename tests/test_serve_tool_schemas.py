"""Any JSON Schema a client sends as a tool is served, through each protocol's parser: what
the grammar cannot enforce is named and checked after; what is not JSON Schema is a 400
naming the tool (pure: parsers, the call grammar, the checks after; the real server's
side is tests/test_serve_tools.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specli.serve.errors import ApiError
from specli.serve.protocols.anthropic_messages.request import parse_messages
from specli.serve.protocols.openai_completions.request import parse_request
from specli.serve.protocols.openai_responses.request import parse_responses
from specli.serve.schemas import served
from specli.serve.tools import Structure, ToolCall, fenced_calls, tool_grammar

SCHEMAS = Path(__file__).parent / "fixtures" / "schemas"
AGENTS = Path(__file__).parent / "fixtures" / "agents"

# the shape of Claude Code 2.1.197's tool that got a 400 ("Unimplemented keys: ["propertyNames"]")
PROPERTY_NAMES = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {
    "env": {"type": "object", "propertyNames": {"pattern": "^[A-Z_][A-Z0-9_]*$"},
            "additionalProperties": {"type": "string"}}}, "additionalProperties": False}


def _chat(name: str, schema: Any) -> Structure | None:
    return parse_request({"messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "function", "function": {"name": name, "parameters": schema}}]}, "chat").structure


def _messages(name: str, schema: Any) -> Structure | None:
    return parse_messages({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                           "tools": [{"name": name, "input_schema": schema}]}).structure


def _responses(name: str, schema: Any) -> Structure | None:
    """As Codex sends them: a function and the same inside a namespace."""
    return parse_responses({"model": "m", "input": "hi", "tools": [
        {"type": "function", "name": name, "parameters": schema, "strict": True},
        {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": f"{name}_2",
                                                       "parameters": schema}]}]}).structure


PROTOCOLS: dict[str, Callable[[str, Any], Structure | None]] = {
    "chat": _chat, "messages": _messages, "responses": _responses}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_keyword_the_grammar_cannot_enforce_is_served_and_named(protocol: str) -> None:
    s = PROTOCOLS[protocol]("Bash", PROPERTY_NAMES)
    assert s is not None and "Bash" in s.names
    assert any("Bash" in n and "propertyNames" in n for n in s.notes), s.notes
    assert tool_grammar(s, 7, 8) is not None  # the call grammar compiles with it left out


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("schema,problem", [
    ({"type": "object", "properties": {"a": {"type": "bogus"}}}, "bogus"),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": "three"}}}, "three"),
    (["not", "an", "object"], "list"),
])
def test_what_is_not_json_schema_is_a_400_naming_the_tool(protocol: str, schema: Any, problem: str) -> None:
    with pytest.raises(ApiError) as e:
        PROTOCOLS[protocol]("Bash", schema)
    assert e.value.status == 400 and "Bash" in e.value.message and problem in e.value.message, e.value.message


def test_a_call_that_fails_the_whole_schema_is_reported() -> None:
    s = _chat("Bash", PROPERTY_NAMES)
    assert s is not None
    good = ToolCall("Bash", json.dumps({"env": {"HOME_DIR": "/x"}}))
    bad = ToolCall("Bash", json.dumps({"env": {"lower": "/x"}}))
    assert s.problems("", [good]) == []
    [note] = s.problems("", [bad])
    assert "Bash" in note and "lower" in note, note
    # a fenced call is still read where the grammar's part of the schema accepts it
    assert [c.name for c in fenced_calls('{"name": "Bash", "arguments": {"env": {"lower": "x"}}}', s)] == ["Bash"]


def test_formats_strict_refuse_by_name_and_lenient_check_after() -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                        "contains": {"const": "x"}}}}
    body = {"messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": schema}}}
    with pytest.raises(ApiError) as e:
        parse_request(body, "chat")
    assert e.value.status == 400 and "contains" in e.value.message and "strict" in e.value.message, e.value.message
    with pytest.raises(ApiError) as e:
        parse_responses({"model": "m", "input": "hi", "text": {"format": {
            "type": "json_schema", "name": "t", "strict": True, "schema": schema}}})
    assert "contains" in e.value.message and e.value.param == "text.format.schema"
    body["response_format"]["json_schema"]["strict"] = False  # type: ignore[index]
    s = parse_request(body, "chat").structure
    assert s is not None and any("contains" in n for n in s.notes)
    assert s.problems('{"tags": ["x"]}', []) == []
    assert "does not contain" in s.problems('{"tags": ["y"]}', [])[0]


def test_a_schema_the_engine_cannot_compile_constrains_to_any_object() -> None:
    """Valid JSON Schema llguidance refuses (here: no instance at all): served, any
    object written, the whole schema named and checked after."""
    never = {"allOf": [{"type": "object"}, {"type": "integer"}]}
    s = _chat("never", never)
    assert s is not None and served(never).constraint == {"type": "object"}
    assert any("whole schema" in n for n in s.notes)
    assert s.problems("", [ToolCall("never", "{}")])


def _agent_tools(path: Path) -> list[tuple[str, dict[str, Any]]]:
    body = json.loads(path.read_text()).get("body") or {}
    out = []
    for tool in body.get("tools") or []:
        for t in tool.get("tools") or [tool]:  # Codex's namespaces
            schema = t.get("input_schema") or t.get("parameters") or (t.get("function") or {}).get("parameters")
            if isinstance(schema, dict):
                out.append((t.get("name") or t["function"]["name"], schema))
    return out


@pytest.mark.parametrize("path", sorted(AGENTS.glob("*.json")), ids=lambda p: p.stem)
def test_every_recorded_agents_tools_are_served_in_every_protocol(path: Path) -> None:
    for name, schema in _agent_tools(path):
        for protocol, parse in PROTOCOLS.items():
            assert parse(name, schema) is not None, (protocol, name)


def test_a_pattern_the_engine_cannot_read_is_left_out_alone() -> None:
    """ECMA look-ahead, which Rust's regex dialect lacks: that pattern alone is left out."""
    schema = {"type": "object", "properties": {"branch": {"type": "string", "pattern": "^(?!-).+$"},
                                               "n": {"type": "integer", "maximum": 3}}, "required": ["n"]}
    s = served(schema)
    assert s.unenforced == ('pattern "^(?!-).+$"',) and s.constraint["properties"]["n"] == {"type": "integer",
                                                                                            "maximum": 3}
    assert s.problem({"n": 1, "branch": "-x"}) and s.problem({"n": 1, "branch": "x"}) is None


# -- schemas nobody here wrote ---------------------------------------------------------------


def suite_groups() -> list[tuple[str, int, dict[str, Any]]]:
    """(keyword file, index, group) of the JSON-Schema-Test-Suite's draft 2020-12 schemas."""
    data = json.loads((SCHEMAS / "json-schema-test-suite" / "draft2020-12.json").read_text())
    return [(name, i, g) for name, groups in data["files"].items() for i, g in enumerate(groups)]


def mcp_tools() -> dict[str, list[dict[str, Any]]]:
    """Real tool definitions by source (tests/fixtures/schemas/mcp-tools/README.md)."""
    return {p.stem: json.loads(p.read_text())["tools"] for p in sorted((SCHEMAS / "mcp-tools").glob("*.json"))}


def test_every_test_suite_schema_is_served_as_a_tool_in_every_protocol() -> None:
    groups = suite_groups()
    assert len(groups) > 300
    not_enforced = 0
    for name, i, group in groups:
        tool = f"{name.replace('-', '_')}_{i}"[:64]
        for protocol, parse in PROTOCOLS.items():
            s = parse(tool, group["schema"])
            assert s is not None and tool in s.names, (protocol, name, group["description"])
            assert tool_grammar(s, 7, 8) is not None
        not_enforced += bool(s.notes)
    assert 50 < not_enforced < len(groups)  # many leave keywords out; the rest are enforced whole


def test_what_is_left_out_is_checked_after_as_the_suite_says() -> None:
    """Each schema the grammar does not wholly enforce: the suite's own instances are
    reported as not fitting exactly where the suite says they are invalid."""
    checked = 0
    for name, _, group in suite_groups():
        schema = group["schema"] if isinstance(group["schema"], dict) else {} if group["schema"] else {"not": {}}
        s = served(schema)
        if not s.unenforced:
            continue
        for case in group["tests"]:
            if "\\p{" in json.dumps(schema):
                continue  # Python's re has no Unicode classes: the one place jsonschema cannot judge
            assert (s.problem(case["data"]) is None) == case["valid"], (name, group["description"], case)
            checked += 1
    assert checked > 300


@pytest.mark.parametrize("source", sorted(mcp_tools()))
def test_real_mcp_and_agent_tools_are_served_in_every_protocol(source: str) -> None:
    tools = mcp_tools()[source]
    chat = parse_request({"messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                          "parameters": t["inputSchema"]}} for t in tools]}, "chat").structure
    messages = parse_messages({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                               "tools": [{"name": t["name"], "input_schema": t["inputSchema"]} for t in tools]})
    responses = parse_responses({"model": "m", "input": "hi", "tools": [
        {"type": "function", "name": t["name"], "parameters": t["inputSchema"]} for t in tools]})
    for s in (chat, messages.structure, responses.structure):
        assert s is not None and s.names == [t["name"] for t in tools]
        assert tool_grammar(s, 7, 8) is not None  # one grammar over all of a server's tools
