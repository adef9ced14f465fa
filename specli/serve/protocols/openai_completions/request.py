"""OpenAI's chat completions and completions bodies checked into the one `Request`: every
problem is a 400 that names the parameter at fault and what it may be. Pure: no models,
no HTTP."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from specli.engine.grammar import Grammar
from specli.serve.errors import invalid, kind_of
from specli.serve.fim import FimFields
from specli.serve.protocols.fields import (
    chosen_tool,
    editor_stops,
    format_grammar,
    function_tool,
    message_list,
    needs_tools,
    opt_bool,
    opt_str,
    parse_options,
    structure,
    template_call,
    text_content,
)
from specli.serve.request import Fields, Request
from specli.serve.tools import Structure


@dataclass(frozen=True)
class StreamOptions:
    """What OpenAI's answer needs besides the generation: `stream_options`."""

    include_usage: bool = False


# parameters specli cannot honour: accepted only at the value that asks for nothing
_UNSUPPORTED_UNLESS: dict[str, tuple[Any, ...]] = {
    "n": (1,), "best_of": (1,), "echo": (False,),
    "functions": ([],), "function_call": ("none",), "modalities": (["text"],),
    "audio": (), "reasoning_effort": (), "web_search_options": (),
}
_WHY = {
    "functions": "the deprecated functions API is not supported (use tools)",
    "function_call": "the deprecated functions API is not supported (use tool_choice)",
    "n": "one choice per request only", "best_of": "one choice per request only",
}
_CHAT_ONLY = frozenset({"messages", "max_completion_tokens", "stream_options", "tools", "tool_choice",
                        "parallel_tool_calls", "functions", "function_call", "response_format", "modalities",
                        "audio", "reasoning_effort", "web_search_options", "top_logprobs"})
_COMPLETION_ONLY = frozenset({"prompt", "echo", "suffix", "best_of", "n_indent", "t_max_predict_ms"})
_COMMON = frozenset({"model", "prediction", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "seed",
                     "max_tokens", "stop", "n", "logprobs", "logit_bias", "frequency_penalty",
                     "presence_penalty", "user", "metadata", "store", "service_tier", "cache_prompt", "specli"})


def parse_chat(body: dict[str, Any]) -> Request:
    return parse_request(body, "chat")


def parse_completion(body: dict[str, Any]) -> Request:
    return parse_request(body, "completion")


def parse_request(body: dict[str, Any], kind: Literal["chat", "completion"]) -> Request:
    """A chat or completion body checked: every problem is a 400 naming the parameter."""
    allowed = _COMMON | (_CHAT_ONLY if kind == "chat" else _COMPLETION_ONLY)
    for key in body:
        if key not in allowed:
            raise invalid(key, f"unrecognized request argument supplied: {key}", "unknown_parameter")
    for key, ok in _UNSUPPORTED_UNLESS.items():
        if key in body and body[key] is not None and not any(_same(body[key], v) for v in ok):
            why = _WHY.get(key, "specli does not support it")
            raise invalid(key, f"{key}={json.dumps(body[key])[:60]} is not supported: {why}", "unsupported_parameter")
    model = opt_str(body, "model")
    stream = opt_bool(body, "stream") or False
    include_usage = False
    if (so := body.get("stream_options")) is not None:
        if not isinstance(so, dict):
            raise invalid("stream_options", f"stream_options must be an object, got {kind_of(so)}", "invalid_type")
        if not stream:
            raise invalid("stream_options", "stream_options is only allowed with stream: true")
        include_usage = opt_bool(so, "include_usage", "stream_options.include_usage") or False
    limit = "max_completion_tokens" if kind == "chat" and body.get("max_completion_tokens") is not None \
        else "max_tokens"
    options = parse_options(body, kind, limit)
    if kind == "chat":
        return Request(kind, model, options, messages=_messages(body.get("messages")), stream=stream,
                       reply=StreamOptions(include_usage), structure=parse_structure(body), fields=Fields("messages", limit))
    prompt = _prompt(body.get("prompt"))
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise invalid("suffix", f"suffix must be a string, got {kind_of(suffix)}", "invalid_type")
    fim = FimFields(prompt, suffix) if suffix else None
    if fim is not None:
        options = replace(options, editor=editor_stops(body, fim, options))
    return Request(kind, model, options, prompt=prompt, stream=stream, reply=StreamOptions(include_usage), fim=fim,
                   fields=Fields("prompt", limit, "suffix"))


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and not isinstance(a, bool)
                                             and isinstance(b, (int, float)) and a == b)


def _messages(value: Any) -> tuple[dict[str, Any], ...]:
    out: list[dict[str, Any]] = []
    for i, m in enumerate(message_list(value)):
        where = f"messages[{i}]"
        role = m.get("role")
        if role == "function" or m.get("function_call"):
            raise invalid(f"{where}.role", f"{where}: function messages (the deprecated functions API) are not "
                                           "supported; use tool messages", "unsupported_parameter")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise invalid(f"{where}.role", f"{where}.role must be system, developer, user, assistant or tool, "
                                           f"got {json.dumps(role)}")
        content = m.get("content")
        if content is None and role == "assistant":
            content = ""
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": text_content(content, f"{where}.content")}
        if role == "tool" and isinstance(m.get("tool_call_id"), str):
            msg["tool_call_id"] = m["tool_call_id"]
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = _tool_calls(m["tool_calls"], f"{where}.tool_calls")
        out.append(msg)
    return tuple(out)


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    """An assistant's earlier calls, their arguments as objects (what chat templates render)."""
    if not isinstance(value, list):
        raise invalid(where, f"{where} must be an array", "invalid_type")
    out = []
    for i, call in enumerate(value):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise invalid(f"{where}[{i}]", f'{where}[{i}] must be {{"type": "function", "function": {{"name": ..., '
                                           '"arguments": ...}}}}', "invalid_type")
        out.append(template_call(call.get("id", ""), fn["name"], fn.get("arguments", "{}"),
                                 f"{where}[{i}].function.arguments"))
    return out


def _prompt(value: Any) -> str:
    if value is None:
        raise invalid("prompt", "prompt is required", "missing_required_parameter")
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    if not isinstance(value, str):
        raise invalid("prompt", f"prompt must be a string (one prompt per request), got {kind_of(value)}", "invalid_type")
    if not value:
        raise invalid("prompt", "prompt is empty")
    return value


def parse_structure(body: dict[str, Any]) -> Structure | None:
    """`response_format`, `tools`, `tool_choice`, `parallel_tool_calls` checked (400s name the parameter)."""
    grammar = _response_format(body.get("response_format"))
    tools = _tools(body.get("tools"))
    choice = _tool_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise invalid("parallel_tool_calls", "parallel_tool_calls must be true or false", "invalid_type")
    return structure(grammar, tools, choice, parallel)


def _response_format(value: Any) -> Grammar | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise invalid("response_format", "response_format must be an object with a type", "invalid_type")
    kind = value["type"]
    if kind not in ("text", "json_object", "json_schema"):
        raise invalid("response_format.type", f"response_format.type must be text, json_object or json_schema, "
                                              f"got {json.dumps(kind)}")
    if kind != "json_schema":
        return format_grammar(kind, None, False, "response_format")
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
        raise invalid("response_format.json_schema", "response_format.json_schema must be an object with a schema "
                                                     "object", "invalid_type")
    return format_grammar(kind, spec.get("schema", {}), bool(spec.get("strict")), "response_format.json_schema.schema")


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid("tools", "tools must be an array", "invalid_type")
    out = []
    seen: set[str] = set()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise invalid(where, f'{where} must be {{"type": "function", "function": {{...}}}}', "invalid_type")
        fn = tool["function"]
        params = fn.get("parameters", {"type": "object", "properties": {}})
        out.append(function_tool(fn, params, seen, f"{where}.function.name", f"{where}.function.parameters"))
    return tuple(out)


def _tool_choice(value: Any, tools: Sequence[dict[str, Any]]) -> str:
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise invalid("tool_choice", f"tool_choice must be auto, none, required or a function, got {json.dumps(value)}")
        return needs_tools(value, tools, value) if value == "required" else value
    fn = value.get("function") if isinstance(value, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise invalid("tool_choice", 'tool_choice must be auto, none, required or {"type": "function", '
                                     '"function": {"name": ...}}', "invalid_type")
    return chosen_tool(name, [t["function"]["name"] for t in tools])
