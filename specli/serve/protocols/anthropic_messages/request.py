"""Anthropic Messages request bodies (`POST /v1/messages`, `/v1/messages/count_tokens`)
checked into the one internal `Request`: the system prompt and content blocks into chat
messages as chat templates read them, tools and tool_choice into a `Structure`, sampling
into `Options`. Every problem is a 400 naming the field. Pure: no models, no HTTP.

What the fields do here (docs/agents.md says it to users): `metadata`, `cache_control`
(every prompt is cached anyway), `context_management`, `service_tier`, `container` and
`output_config.effort` are accepted and change nothing; `thinking` decides whether a
reasoning model's `<think>` text comes back as thinking blocks; `output_config.format`
(json_schema) constrains the answer like OpenAI's response_format; top-level fields
this server does not know are ignored, as new agent versions add them before any
server knows them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from specli.serve.errors import invalid, kind_of
from specli.serve.protocols.fields import (
    chosen_tool,
    function_tool,
    joined_text,
    message_list,
    needs_tools,
    parse_options,
    parse_stop,
    schema_grammar,
    structure,
    template_call,
)
from specli.serve.request import Fields, Request
from specli.serve.tools import Structure

# Anthropic-defined tools (bash_20250124, web_search_..., text_editor_...) carry no schema:
# their behaviour lives in Anthropic's servers or in its own client code
CUSTOM_TOOL_TYPES = (None, "custom")
# Claude Code's attribution line, first in its system prompt: "x-anthropic-billing-header:
# cc_version=2.1.332.642; cc_entrypoint=cli; cch=a5145;" (the version's last three digits
# hash the conversation's first prompt, cch= each request). Meant for Anthropic's billing,
# not the model; kept, it would end the cached prefix at its first dozen tokens.
_BILLING_HEADER = re.compile(r"x-anthropic-billing-header:(?:[ \t]*[\w.-]+=[^;\n]*;)*[ \t]*\n?")
_IGNORED_BLOCKS = frozenset({"redacted_thinking"})
_UNSUPPORTED_INPUT = frozenset({"image", "document", "search_result", "container_upload"})


def parse_messages(body: dict[str, Any], *, count_only: bool = False) -> Request:
    """A Messages body checked into a chat request (`count_only`: for count_tokens, which
    takes no max_tokens and never streams)."""
    if body.get("mcp_servers"):
        raise invalid("mcp_servers", "mcp_servers is not supported: this server connects to no MCP server "
                                     "(give their tools as tools, and run them in the client)", "unsupported_parameter")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model", f"model must be a string, got {kind_of(model)}", "invalid_type")
    stream = body.get("stream", False) if not count_only else False
    if not isinstance(stream, bool):
        raise invalid("stream", f"stream must be true or false, got {kind_of(stream)}", "invalid_type")
    sampling = {k: body.get(k) for k in ("max_tokens", "temperature", "top_p", "top_k", "specli")}
    if count_only:
        sampling["max_tokens"] = None
    options = parse_options(sampling, "chat")
    options = replace(options, stop=parse_stop(body.get("stop_sequences"), "stop_sequences"))
    messages = [*_system(body.get("system")), *_conversation(body.get("messages"))]
    return Request("chat", model, options, messages=tuple(messages), stream=stream, structure=_structure(body),
                   endpoint="messages", reasoning=_thinking(body.get("thinking")), fields=Fields("messages", "max_tokens"))


def _blocks(value: Any, where: str) -> list[Any]:
    """A content that is not a string: its array of blocks (400 if it is not one)."""
    if not isinstance(value, list):
        raise invalid(where, f"{where} must be a string or an array of content blocks, got {kind_of(value)}",
                      "invalid_type")
    return value


def _text_blocks(value: Any, where: str) -> str:
    """A string, or an array of text blocks as paragraphs (other blocks: 400)."""
    return joined_text(value, where, _text_block, "\n\n")


def _text_block(block: Any, where: str) -> str:
    kind = _block_type(block, where)
    if kind != "text":
        raise _unsupported(kind, where)
    return _text(block, where)


def _system(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    blocks = [{"type": "text", "text": value}] if isinstance(value, str) else value
    if isinstance(blocks, list):
        blocks = [b for b in map(_without_billing_header, blocks) if b is not None]
    text = _text_blocks(blocks, "system")
    return [{"role": "system", "content": text}] if text else []


def _without_billing_header(block: Any) -> Any:
    """A system block with Claude Code's attribution line taken off its start (None where
    the block held only that line); any other block as it is."""
    if isinstance(block, dict) and isinstance(block.get("text"), str):
        m = _BILLING_HEADER.match(block["text"])
        if m:
            return dict(block, text=block["text"][m.end():]) if m.end() < len(block["text"]) else None
    return block


def _typed_blocks(content: Any, where: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(where, type, block) of each block of a content that is not a string."""
    for i, block in enumerate(_blocks(content, where)):
        at = f"{where}[{i}]"
        yield at, _block_type(block, at), block


def _block_type(block: Any, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise invalid(where, f"{where} must be a content block: an object with a type", "invalid_type")
    kind: str = block["type"]
    return kind


def _text(block: dict[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise invalid(f"{where}.text", f"{where}.text must be a string", "invalid_type")
    return text


def _unsupported(kind: str, where: str) -> Exception:
    if kind in _UNSUPPORTED_INPUT:
        return invalid(where, f"{where}: {kind} blocks are not supported: this server's model reads text only "
                              "(send the content as text)", "unsupported_content")
    return invalid(where, f"{where}: content blocks of type {kind!r} are not supported here", "unsupported_content")


def _conversation(value: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, m in enumerate(message_list(value)):
        where = f"messages[{i}]"
        role = m.get("role")
        content = m.get("content")
        if role == "user":
            out += _user(content, f"{where}.content")
        elif role == "assistant":
            out.append(_assistant(content, f"{where}.content"))
        elif role == "system":  # not in Anthropic's schema, but agents send it mid-conversation
            out.append({"role": "system", "content": _text_blocks(content, f"{where}.content")})
        else:
            raise invalid(f"{where}.role", f"{where}.role must be user or assistant, got {json.dumps(role)}")
    return out


def _user(content: Any, where: str) -> list[dict[str, Any]]:
    """A user turn: its tool results as tool messages (in their order), its text as one
    user message."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[dict[str, Any]] = []
    text: list[str] = []
    for at, kind, block in _typed_blocks(content, where):
        if kind == "text":
            text.append(_text(block, at))
        elif kind == "tool_result":
            if text:
                out.append({"role": "user", "content": "\n\n".join(text)})
                text = []
            out.append(_tool_result(block, at))
        else:
            raise _unsupported(kind, at)
    if text or not out:
        out.append({"role": "user", "content": "\n\n".join(text)})
    return out


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise invalid(f"{where}.tool_use_id", f"{where}.tool_use_id must be a string", "invalid_type")
    content = block.get("content", "")
    text = _text_blocks(content, f"{where}.content")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise invalid(f"{where}.is_error", f"{where}.is_error must be true or false", "invalid_type")
    if is_error:  # the model reads that its call failed
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _assistant(content: Any, where: str) -> dict[str, Any]:
    """An assistant turn: text, tool calls (their input as objects, as templates render
    them), its reasoning (thinking blocks) as `reasoning_content` where a template uses it."""
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    text, calls, thinking = [], [], []
    for at, kind, block in _typed_blocks(content, where):
        if kind == "text":
            text.append(_text(block, at))
        elif kind == "tool_use":
            calls.append(_tool_use(block, at))
        elif kind == "thinking":
            if isinstance(block.get("thinking"), str):
                thinking.append(block["thinking"])
        elif kind not in _IGNORED_BLOCKS:
            raise _unsupported(kind, at)
    msg: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(text)}
    if calls:
        msg["tool_calls"] = calls
    if thinking:
        msg["reasoning_content"] = "\n\n".join(thinking)
    return msg


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    name, call_id, args = block.get("name"), block.get("id", ""), block.get("input", {})
    if not isinstance(name, str):
        raise invalid(f"{where}.name", f"{where}.name must be a string", "invalid_type")
    if not isinstance(args, dict):
        raise invalid(f"{where}.input", f"{where}.input must be an object", "invalid_type")
    return template_call(call_id if isinstance(call_id, str) else "", name, args, f"{where}.input")


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    """Custom tools as function tools; Anthropic-defined ones (no schema) are left out."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid("tools", f"tools must be an array, got {kind_of(value)}", "invalid_type")
    out = []
    seen: set[str] = set()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid(where, f"{where} must be an object", "invalid_type")
        if tool.get("type") not in CUSTOM_TOOL_TYPES:
            continue
        schema = tool.get("input_schema")
        if schema is None:
            raise invalid(f"{where}.input_schema", f"{where}.input_schema: field required", "missing_required_parameter")
        fn = {"name": tool.get("name"), "description": tool.get("description", "")}
        out.append(function_tool(fn, schema, seen, f"{where}.name", f"{where}.input_schema"))
    return tuple(out)


def _tool_choice(value: Any, names: list[str]) -> tuple[str, bool]:
    """(choice as the internal Structure has it, parallel calls allowed)."""
    if value is None:
        return "auto", True
    if not isinstance(value, dict) or value.get("type") not in ("auto", "any", "tool", "none"):
        raise invalid("tool_choice", 'tool_choice must be {"type": "auto" | "any" | "tool" | "none"}', "invalid_type")
    parallel = not value.get("disable_parallel_tool_use", False)
    kind = value["type"]
    if kind == "tool":
        name = value.get("name")
        return chosen_tool(name, names, "tool_choice.name"), parallel
    if kind == "any":
        return needs_tools("required", names, "any"), parallel
    return {"auto": "auto", "none": "none"}[kind], parallel


def _structure(body: dict[str, Any]) -> Structure | None:
    tools = _tools(body.get("tools"))
    choice, parallel = _tool_choice(body.get("tool_choice"), [t["function"]["name"] for t in tools])
    grammar = None
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    fmt = fmt if fmt is not None else body.get("output_format")
    where = "output_config.format" if isinstance(config, dict) and config.get("format") is not None else "output_format"
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
            raise invalid(where, f'{where} must be {{"type": "json_schema", "schema": {{...}}}}', "invalid_type")
        grammar = schema_grammar(fmt["schema"], f"{where}.schema")
    return structure(grammar, tools, choice, parallel, where=where)


def _thinking(value: Any) -> bool:
    """Whether a reasoning model's thinking comes back as thinking blocks: unless disabled."""
    if value is None:
        return True
    if not isinstance(value, dict) or value.get("type") not in ("enabled", "adaptive", "disabled"):
        raise invalid("thinking", 'thinking must be {"type": "enabled", "budget_tokens": N}, {"type": "adaptive"} '
                                  'or {"type": "disabled"}', "invalid_type")
    budget = value.get("budget_tokens")
    if value["type"] == "enabled" and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise invalid("thinking.budget_tokens", "thinking.budget_tokens must be a positive integer")
    return bool(value["type"] != "disabled")
