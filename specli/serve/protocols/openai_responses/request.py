"""OpenAI Responses request bodies (`POST /v1/responses`, `/v1/responses/input_tokens`)
checked into the one internal `Request`: `instructions` and input items into chat
messages as chat templates read them, function, namespace and custom tools into a
`Structure`, sampling into `Options`. Every problem is a 400 naming the field. Pure: the
stored conversation a `previous_response_id` names is looked up by the caller.

What the fields do here (docs/agents.md says it to users): `reasoning`, `include`,
`prompt_cache_key`, `metadata`, `user`, `safety_identifier`, `service_tier`,
`truncation` and `client_metadata` are accepted and change nothing but the echo;
`store` (default true, as OpenAI's) keeps the response for `previous_response_id`;
hosted tools (web_search and the like) are left out and named in the response's notes;
reasoning items in the input are dropped (an encrypted one cannot be read here)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from specli.engine.grammar import compile_grammar
from specli.serve.errors import invalid, kind_of
from specli.serve.protocols.fields import (
    MAX_MESSAGES,
    chosen_tool,
    format_grammar,
    function_tool,
    joined_text,
    needs_tools,
    opt_bool,
    parse_options,
    structure,
    template_call,
    typed_text,
)
from specli.serve.request import Fields, Request
from specli.serve.tools import CustomTool, Structure, custom_call_text

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
_HOSTED_TOOLS = frozenset({"web_search", "web_search_preview", "web_search_2025_08_26", "file_search", "computer_use",
                           "computer_use_preview", "code_interpreter", "image_generation", "local_shell", "mcp",
                           "shell", "apply_patch"})
_REFUSED = {"background": "background responses are not supported: this server answers while you wait",
            "conversation": "conversations are not supported: use previous_response_id",
            "prompt": "stored prompt templates are not supported: send the input itself"}


@dataclass(frozen=True)
class ResponsesCall:
    """What the Responses answer needs besides the generation: the echo of the request,
    where each flattened function came from, notes, and what to store."""

    input_messages: tuple[dict[str, Any], ...]  # this request's turns (instructions aside)
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)  # name as the model calls it -> (namespace, name)
    notes: tuple[str, ...] = ()
    echo: dict[str, Any] = field(default_factory=dict)


def parse_responses(body: dict[str, Any], *, count_only: bool = False) -> Request:
    """A Responses body checked into a chat request (a `previous_response_id`'s
    conversation goes in front with `with_previous`)."""
    for key, why in _REFUSED.items():
        if body.get(key) not in (None, False):
            raise invalid(key, f"{key} is not supported: {why}", "unsupported_parameter")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model", f"model must be a string, got {kind_of(model)}", "invalid_type")
    stream = False if count_only else bool(opt_bool(body, "stream"))
    store = opt_bool(body, "store") is not False
    sampling = {k: body.get(k) for k in ("temperature", "top_p", "top_k", "min_p", "seed", "specli")}
    sampling["max_output_tokens"] = None if count_only else body.get("max_output_tokens")
    options = parse_options(sampling, "chat", "max_output_tokens")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("instructions", f"instructions must be a string, got {kind_of(instructions)}", "invalid_type")
    notes: list[str] = []
    turns = tuple(_input(body.get("input"), notes))
    structure, namespaces = _structure(body, notes)
    head = ({"role": "system", "content": instructions},) if instructions else ()
    call = ResponsesCall(turns, instructions, _previous_id(body.get("previous_response_id")), store, namespaces,
                         tuple(notes), _echo(body))
    return Request("chat", model, options, messages=head + turns, stream=stream, structure=structure,
                   endpoint="responses", reasoning=True, reply=call, fields=Fields("input", "max_output_tokens"))


def _previous_id(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise invalid("previous_response_id", "previous_response_id must be a string", "invalid_type")
    return value


def _echo(body: dict[str, Any]) -> dict[str, Any]:
    """The request's fields a response object repeats."""
    keys = ("tool_choice", "parallel_tool_calls", "text", "reasoning", "max_output_tokens", "temperature", "top_p",
            "metadata", "user", "truncation", "prompt_cache_key", "tools")
    return {k: body[k] for k in keys if k in body}


def _input(value: Any, notes: list[str]) -> list[dict[str, Any]]:
    """Input items as chat messages: an assistant's text, calls and their outputs in order
    (consecutive calls joined into one assistant turn, as templates render them)."""
    if value is None:
        raise invalid("input", "input is required", "missing_required_parameter")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise invalid("input", f"input must be a string or an array of items, got {kind_of(value)}", "invalid_type")
    if len(value) > MAX_MESSAGES:
        raise invalid("input", f"input holds {len(value)} items; at most {MAX_MESSAGES} are allowed")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise invalid(where, f"{where} must be an object, got {kind_of(item)}", "invalid_type")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            _message(item, where, out)
        elif kind in ("function_call", "custom_tool_call"):
            _call(item, where, out, kind == "custom_tool_call")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out.append({"role": "tool", "tool_call_id": _str(item, "call_id", where),
                        "content": _text(item.get("output"), f"{where}.output")})
        elif kind == "reasoning":
            if item.get("encrypted_content") and "encrypted reasoning dropped" not in notes:
                notes.append("encrypted reasoning dropped: this server cannot read it")
        elif kind == "item_reference":
            raise invalid(where, f"{where}: item_reference is not supported: send the item itself, or continue with "
                                 "previous_response_id", "unsupported_parameter")
        else:
            raise invalid(f"{where}.type", f"{where}: input items of type {json.dumps(kind)} are not supported here "
                                           "(message, function_call, function_call_output, custom_tool_call, "
                                           "custom_tool_call_output, reasoning)", "unsupported_parameter")
    return out


def _str(item: dict[str, Any], key: str, where: str) -> str:
    v = item.get(key)
    if not isinstance(v, str):
        raise invalid(f"{where}.{key}", f"{where}.{key} must be a string", "invalid_type")
    return v


def _text(value: Any, where: str) -> str:
    """A string, or text parts run together (images and files: 400)."""
    return joined_text(value, where, _text_part)


def _text_part(part: Any, where: str) -> str:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return str(part["refusal"])
    if kind in ("input_image", "input_file", "input_audio"):
        raise invalid(where, f"{where}: {kind} parts are not supported: this server's model reads text only",
                      "unsupported_content")
    if kind not in _TEXT_PARTS:
        raise invalid(where, f"{where} must be a text part ({{\"type\": \"input_text\", \"text\": ...}})", "invalid_type")
    return typed_text(part, where, _TEXT_PARTS)


def _message(item: dict[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    role = _ROLES.get(item.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise invalid(f"{where}.role", f"{where}.role must be user, assistant, system or developer, "
                                       f"got {json.dumps(item.get('role'))}")
    text = _text(item.get("content"), f"{where}.content")
    last = out[-1] if out else None
    if role == "assistant" and last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
        last["content"] = "\n\n".join(p for p in (last["content"], text) if p)
        return
    out.append({"role": role, "content": text})


def _call(item: dict[str, Any], where: str, out: list[dict[str, Any]], custom: bool) -> None:
    """An earlier call joins the assistant turn before it (or opens one)."""
    name, call_id = _str(item, "name", where), _str(item, "call_id", where)
    last = out[-1] if out and out[-1]["role"] == "assistant" else None
    if last is None:
        last = {"role": "assistant", "content": ""}
        out.append(last)
    if custom:  # as the model wrote it: its name line, then the input
        text = custom_call_text(name, _str(item, "input", where))
        last["content"] = "\n".join(p for p in (last["content"], text) if p)
        return
    last.setdefault("tool_calls", []).append(template_call(call_id, name, item.get("arguments", "{}"),
                                                           f"{where}.arguments"))


def _tools(value: Any, notes: list[str]) -> tuple[list[dict[str, Any]], list[CustomTool], dict[str, tuple[str, str]]]:
    """(function tools, custom tools, flattened names -> (namespace, name))."""
    if value is None:
        return [], [], {}
    if not isinstance(value, list):
        raise invalid("tools", f"tools must be an array, got {kind_of(value)}", "invalid_type")
    functions: list[dict[str, Any]] = []
    custom: list[CustomTool] = []
    spaces: dict[str, tuple[str, str]] = {}
    seen: set[str] = set()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            functions.append(_function(tool, seen, where))
        elif kind == "namespace":
            ns = _str(tool, "name", where)
            for j, fn in enumerate(tool.get("tools") or []):
                at = f"{where}.tools[{j}]"
                if not isinstance(fn, dict) or fn.get("type", "function") != "function":
                    raise invalid(at, f"{at} must be a function tool", "invalid_type")
                name = _str(fn, "name", at)
                flat = name if name not in seen else f"{ns}.{name}"
                functions.append(_function(dict(fn, name=flat), seen, at))
                spaces[flat] = (ns, name)
        elif kind == "custom":
            custom.append(_custom(tool, seen, where))
        elif kind in _HOSTED_TOOLS or (isinstance(kind, str) and kind.startswith("web_search")):
            notes.append(f"tool {kind} left out: it runs on OpenAI's servers")
        else:
            raise invalid(f"{where}.type", f"{where}.type must be function, custom or namespace, got {json.dumps(kind)}",
                          "invalid_type")
    return functions, custom, spaces


def _function(tool: dict[str, Any], seen: set[str], where: str) -> dict[str, Any]:
    # served leniently even with strict: true (an agent's tool is never refused for a
    # keyword the grammar cannot enforce; tools.Structure.notes names it)
    params = tool.get("parameters") or {"type": "object", "properties": {}}
    fn = {"name": tool.get("name"), "description": tool.get("description") or ""}
    return function_tool(fn, params, seen, f"{where}.name", f"{where}.parameters")


def _custom(tool: dict[str, Any], seen: set[str], where: str) -> CustomTool:
    name = _str(tool, "name", where)
    function_tool({"name": name}, {"type": "object"}, seen, f"{where}.name", where)  # the name's checks
    fmt = tool.get("format") or {"type": "text"}
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
        raise invalid(f"{where}.format", f'{where}.format must be {{"type": "text"}} or {{"type": "grammar", '
                                         '"syntax": "lark" | "regex", "definition": ...}', "invalid_type")
    description = tool.get("description") or ""
    if fmt["type"] == "text":
        return CustomTool(name, description)
    syntax, definition = fmt.get("syntax"), fmt.get("definition")
    if syntax not in ("lark", "regex") or not isinstance(definition, str):
        raise invalid(f"{where}.format", f"{where}.format.syntax must be lark or regex, with a definition string",
                      "invalid_type")
    try:  # checked on its own: its errors then name its own lines
        compile_grammar(syntax, definition)
    except Exception as e:
        raise invalid(f"{where}.format.definition", getattr(e, "message", str(e))) from None
    return CustomTool(name, description, syntax, definition)


def _choice(value: Any, names: list[str], spaces: dict[str, tuple[str, str]]) -> str:
    if value is None or value == "auto":
        return "auto"
    if value in ("none", "required"):
        return needs_tools("required", names, "required") if value == "required" else "none"
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "allowed_tools":
        return "required" if value.get("mode") == "required" and names else "auto"
    if kind in ("function", "custom") and isinstance(value.get("name"), str):
        name = value["name"]
        flat = next((f for f, (_, n) in spaces.items() if n == name), name) if name not in names else name
        return flat if flat in names else chosen_tool(name, names)
    raise invalid("tool_choice", 'tool_choice must be auto, none, required, {"type": "function", "name": ...} or '
                                 '{"type": "custom", "name": ...}', "invalid_type")


def _format(value: Any) -> Any:
    """`text.format` as a grammar (json_schema, json_object) or None (text)."""
    if value is None:
        return None
    fmt = value.get("format") if isinstance(value, dict) else None
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in ("text", "json_object") or kind == "json_schema" and isinstance(fmt.get("schema"), dict):
        return format_grammar(kind, fmt.get("schema"), bool(fmt.get("strict")), "text.format.schema")
    raise invalid("text.format", 'text.format must be {"type": "text"}, {"type": "json_object"} or '
                                 '{"type": "json_schema", "name": ..., "schema": {...}}', "invalid_type")


def _structure(body: dict[str, Any], notes: list[str]) -> tuple[Structure | None, dict[str, tuple[str, str]]]:
    functions, custom, spaces = _tools(body.get("tools"), notes)
    names = [f["function"]["name"] for f in functions] + [c.name for c in custom]
    choice = _choice(body.get("tool_choice"), names, spaces)
    parallel = opt_bool(body, "parallel_tool_calls") is not False
    grammar = _format(body.get("text"))
    return structure(grammar, functions, choice, parallel, custom, "text.format"), spaces


def with_previous(req: Request, previous: tuple[dict[str, Any], ...]) -> Request:
    """`req` after a stored conversation (instructions stay this request's)."""
    call: ResponsesCall = req.reply
    head = ({"role": "system", "content": call.instructions},) if call.instructions else ()
    return replace(req, messages=head + previous + call.input_messages)
