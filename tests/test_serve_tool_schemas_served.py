"""Schemas nobody here wrote, as tools of a real `specli serve` (Qwen2.5-Coder 0.5B) through
the official `openai` and `anthropic` clients: every one served, what the grammar leaves
out named in specli.notes, every call the model makes checked against its whole schema.
The parsers' side of every schema in every protocol is tests/test_serve_tool_schemas.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from conftest import QWEN_DRAFT, model_file
from test_serve_tool_schemas import suite_groups

from harness.processes import ServeProcess, running
from specli.serve.schemas import served_arguments

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

MODEL = QWEN_DRAFT
PER_REQUEST = 12  # tools a request; about 1.5k prompt tokens at most
# all 361 schemas take 31 requests and 2.5 minutes here (run with SPECLI_TEST_ALL_SCHEMAS=1);
# the suite sends each keyword file's first schema and its first the grammar cannot wholly enforce
ALL = os.environ.get("SPECLI_TEST_ALL_SCHEMAS") == "1"


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    model_file(MODEL)
    with running(["--target", MODEL, "--draft", "none", "--ctx", "8192"]) as srv:
        yield srv


def _as_object(schema: Any) -> dict[str, Any]:
    return schema if isinstance(schema, dict) else {} if schema else {"not": {}}


def _chat(server: ServeProcess, tools: dict[str, Any]) -> tuple[list[tuple[str, Any]], list[str]]:
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=300)
    res = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Call one of the tools."}], temperature=0, max_tokens=40,
        tool_choice="required", tools=[{"type": "function", "function": {"name": n, "parameters": s}}
                                       for n, s in tools.items()])
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in res.choices[0].message.tool_calls or []]
    return calls, res.specli["notes"]  # type: ignore[attr-defined]


def _messages(server: ServeProcess, tools: dict[str, Any]) -> tuple[list[tuple[str, Any]], list[str]]:
    client = anthropic.Anthropic(base_url=server.base, api_key="none", max_retries=0, timeout=300)
    msg = client.messages.create(
        model=MODEL, messages=[{"role": "user", "content": "Call one of the tools."}], max_tokens=40,
        extra_body={"temperature": 0}, tool_choice={"type": "any"}, tools=[{"name": n, "input_schema": s} for n, s in tools.items()])
    calls = [(b.name, b.input) for b in msg.content if b.type == "tool_use"]
    return calls, msg.specli["notes"]  # type: ignore[attr-defined]


def _responses(server: ServeProcess, tools: dict[str, Any]) -> tuple[list[tuple[str, Any]], list[str]]:
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=300)
    res = client.responses.create(
        model=MODEL, input="Call one of the tools.", temperature=0, max_output_tokens=40, tool_choice="required",
        tools=[{"type": "function", "name": n, "parameters": s, "strict": False} for n, s in tools.items()])
    calls = [(i.name, json.loads(i.arguments)) for i in res.output if i.type == "function_call"]
    return calls, res.specli["notes"]  # type: ignore[attr-defined]


PROTOCOLS = [_chat, _messages, _responses]


def test_every_test_suite_schema_is_served_by_a_real_server(server: ServeProcess) -> None:
    """The suite's schemas in requests of up to 12 tools, the protocols in turn, each
    request requiring a call (so a call's arguments are written under the lenient grammar)."""
    groups = suite_groups() if ALL else _sample(suite_groups())
    chunks = [groups[i:i + PER_REQUEST] for i in range(0, len(groups), PER_REQUEST)]
    n_calls = n_unfit = 0
    for k, chunk in enumerate(chunks):
        tools = {f"t{k}_{j}": _as_object(g["schema"]) for j, (_, _, g) in enumerate(chunk)}
        calls, notes = PROTOCOLS[k % len(PROTOCOLS)](server, tools)
        for name, schema in tools.items():  # what the grammar left out is named
            for keyword in served_arguments(schema).unenforced:
                assert any(n.startswith(f"tool {name}:") and keyword in n for n in notes), (name, keyword, notes)
        for name, arguments in calls:  # a call that fails its whole schema is reported
            assert isinstance(arguments, dict), (name, arguments)
            fits = jsonschema.validators.validator_for(tools[name])(tools[name]).is_valid(arguments)
            reported = any(n.startswith(f"tool {name}: the call does not fit") for n in notes)
            assert fits != reported or "\\p{" in json.dumps(tools[name]), (name, arguments, notes)
            n_calls, n_unfit = n_calls + 1, n_unfit + (not fits)
    assert n_calls >= max(1, len(chunks) // 4), (n_calls, len(chunks))  # 40 tokens hold the short calls
    assert "not enforced while it is written" in server.log  # the server's log line names them too
    print(f"{len(groups)} schemas in {len(chunks)} requests: {n_calls} calls, {n_unfit} reported unfit")


def _sample(groups: list[tuple[str, int, dict[str, Any]]]) -> list[tuple[str, int, dict[str, Any]]]:
    """Each keyword file's first schema, and its first the grammar does not wholly enforce."""
    out: dict[tuple[str, int], tuple[str, int, dict[str, Any]]] = {}
    for name, i, g in groups:
        if not any(n == name for n, _ in out):
            out[name, i] = (name, i, g)
    for name, i, g in groups:
        if served_arguments(_as_object(g["schema"])).unenforced and not any(
                n == name and served_arguments(_as_object(out[n, j][2]["schema"])).unenforced for n, j in out):
            out[name, i] = (name, i, g)
    return sorted(out.values(), key=lambda t: (t[0], t[1]))
