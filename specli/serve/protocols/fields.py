"""Field checks every protocol's parser shares: optional fields of a type, text parts,
the sampling options, stop strings, `messages` as a list, llama-server's editor limits.
Every problem is a 400 that names the field as the client sent it. Pure: no models, no HTTP."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

from specli.engine.grammar import Grammar, compile_grammar
from specli.profiles import SPECS
from specli.profiles.spec import Bad
from specli.serve.errors import invalid, kind_of
from specli.serve.fim import EditorStops, FimFields, first_code_line
from specli.serve.request import Options
from specli.serve.schemas import NotASchema, served, served_arguments
from specli.serve.tools import CustomTool, Structure

# caps on what one request may list: each stop string is looked for in every piece of
# text generated, and every message is rendered and tokenized before the request queues
MAX_STOP = 16


MAX_MESSAGES = 4096


MAX_TOP_LOGPROBS = {"chat": 20, "completion": 5}  # OpenAI's caps


_SPECLI_KEYS = ("drafter", "draft_max", "exact", "history", "return_tokens", "grammar_drafts", "suffix_stop",
               "sources")


def editor_stops(body: dict[str, Any], fim: FimFields | None, options: Options) -> EditorStops:
    """llama-server's `n_indent` and `t_max_predict_ms`, and (unless `specli.suffix_stop`
    is false) a fill-in-the-middle completion's stop at the suffix's first line of code."""
    n_indent, t_max = opt_int(body, "n_indent") or 0, opt_int(body, "t_max_predict_ms") or 0
    for key, v in (("n_indent", n_indent), ("t_max_predict_ms", t_max)):
        if v < 0:
            raise invalid(key, f"{key} must be 0 (off) or more, got {v}")
    line = first_code_line(fim.suffix) if fim is not None and options.suffix_stop else None
    return EditorStops(n_indent, t_max, line)


def parse_options(body: dict[str, Any], kind: str, limit: str = "max_tokens") -> Options:
    """The sampling fields, the token limit (`limit`: its field's name in this protocol),
    stop strings, logprobs, logit bias, penalties, a predicted output and specli's own."""
    max_tokens = opt_int(body, limit)
    if max_tokens is not None and max_tokens < 1:
        raise invalid(limit, f"{limit} must be at least 1, got {max_tokens}")
    temperature = opt_num(body, "temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        raise invalid("temperature", f"temperature must be between 0 and 2, got {temperature}")
    top_p = opt_num(body, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise invalid("top_p", f"top_p must be in (0, 1], got {top_p}")
    top_k = opt_int(body, "top_k")
    if top_k is not None and top_k < 0:
        raise invalid("top_k", f"top_k must be 0 (off) or more, got {top_k}")
    min_p = opt_num(body, "min_p")
    if min_p is not None and not 0 <= min_p < 1:
        raise invalid("min_p", f"min_p must be in [0, 1), got {min_p}")
    seed = opt_int(body, "seed")
    if seed is not None and not 0 <= seed < 2**63:
        raise invalid("seed", f"seed must be a non-negative 64-bit integer, got {seed}")
    spec = _specli(body.get("specli"))
    return Options(max_tokens, temperature, top_p, top_k, min_p, seed, parse_stop(body.get("stop")), **spec,
                   prediction=_prediction(body.get("prediction")), logprobs=_logprobs(body, kind),
                   logit_bias=_logit_bias(body.get("logit_bias")), presence_penalty=_penalty(body, "presence_penalty"),
                   frequency_penalty=_penalty(body, "frequency_penalty"))


def _penalty(body: dict[str, Any], key: str) -> float:
    v = opt_num(body, key)
    if v is not None and not -2 <= v <= 2:
        raise invalid(key, f"{key} must be between -2 and 2, got {v}")
    return v or 0.0


def _logprobs(body: dict[str, Any], kind: str) -> int | None:
    """Chat: logprobs true, top_logprobs 0-20. Completions: logprobs 0-5 alternatives."""
    cap = MAX_TOP_LOGPROBS[kind]
    if kind == "completion":
        n = opt_int(body, "logprobs")
        if n is not None and not 0 <= n <= cap:
            raise invalid("logprobs", f"logprobs must be between 0 and {cap}, got {n}")
        return n
    top = opt_int(body, "top_logprobs")
    if top is not None and not 0 <= top <= cap:
        raise invalid("top_logprobs", f"top_logprobs must be between 0 and {cap}, got {top}")
    if not opt_bool(body, "logprobs"):
        if top:
            raise invalid("top_logprobs", "top_logprobs needs logprobs: true")
        return None
    return top or 0


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """{"token id": bias in [-100, 100]}; whether the ids exist is the worker's check."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise invalid("logit_bias", f"logit_bias must be an object of token ids to numbers, got {kind_of(value)}",
                      "invalid_type")
    out = []
    for key, v in value.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise invalid("logit_bias", f"logit_bias keys must be token ids (digits), got {key!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -100 <= v <= 100:
            raise invalid("logit_bias", f"logit_bias[{key}] must be a number between -100 and 100, got {json.dumps(v)}")
        out.append((int(key), float(v)))
    return tuple(out)


def _prediction(value: Any) -> str | None:
    """OpenAI's `prediction`: {"type": "content", "content": str | [text parts]}."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "content":
        raise invalid("prediction", 'prediction must be {"type": "content", "content": ...}', "invalid_type")
    return text_content(value.get("content"), "prediction.content") or None


def _specli(value: Any) -> dict[str, Any]:
    """specli's own request options: {drafter, draft_max, exact, history, return_tokens, grammar_drafts,
    suffix_stop, sources}."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid("specli", f"specli must be an object, got {kind_of(value)}", "invalid_type")
    out: dict[str, Any] = {}
    for key, v in value.items():
        param = f"specli.{key}"
        if key not in _SPECLI_KEYS:
            raise invalid(param, f"unknown specli option {key!r} (known: {', '.join(_SPECLI_KEYS)})", "unknown_parameter")
        if v is None:
            continue
        if key in ("drafter", "draft_max"):
            try:
                out[key] = SPECS[key].check(v)
            except Bad:
                raise invalid(param, f"{param} must be {SPECS[key].expected()}, got {json.dumps(v)}") from None
        else:
            out[key] = opt_bool(value, key, param)
    return out


def parse_stop(value: Any, param: str = "stop") -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise invalid(param, f"{param} must be a string or an array of strings, got {kind_of(value)}", "invalid_type")
    if len(items) > MAX_STOP:
        raise invalid(param, f"{param} has {len(items)} strings; at most {MAX_STOP} are allowed")
    return tuple(s for s in items if s)


def joined_text(value: Any, where: str, part_text: Callable[[Any, str], str], sep: str = "") -> str:
    """A content: a string, or an array of parts, each read by `part_text` (a 400 for a
    part it refuses), joined by `sep` (each protocol's own: OpenAI's parts run on,
    Anthropic's blocks are paragraphs)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise invalid(where, f"{where} must be a string or an array of content parts, got {kind_of(value)}",
                      "invalid_type")
    return sep.join(part_text(part, f"{where}[{i}]") for i, part in enumerate(value))


def typed_text(part: Any, where: str, kinds: Collection[str] = ("text",)) -> str:
    """A text part (`{"type": one of kinds, "text": str}`): its text, else a 400."""
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise invalid(where, f"{where} must be an object with a type", "invalid_type")
    if part["type"] not in kinds:
        raise invalid(where, f"{where}: content parts of type {part['type']!r} are not supported (text only)",
                      "unsupported_parameter")
    if not isinstance(part.get("text"), str):
        raise invalid(f"{where}.text", f"{where}.text must be a string", "invalid_type")
    text: str = part["text"]
    return text


def text_content(value: Any, where: str) -> str:
    """OpenAI's message content: a string, or text parts run together."""
    return joined_text(value, where, typed_text)


def message_list(value: Any) -> list[dict[str, Any]]:
    """`messages` checked as a list of objects (any protocol's): 400 if missing, not an
    array, empty, longer than MAX_MESSAGES, or holding anything but objects."""
    if value is None:
        raise invalid("messages", "messages is required", "missing_required_parameter")
    if not isinstance(value, list):
        raise invalid("messages", f"messages must be an array, got {kind_of(value)}", "invalid_type")
    if not value:
        raise invalid("messages", "messages must hold at least one message")
    if len(value) > MAX_MESSAGES:
        raise invalid("messages", f"messages holds {len(value)} messages; at most {MAX_MESSAGES} are allowed")
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise invalid(f"messages[{i}]", f"messages[{i}] must be an object, got {kind_of(m)}", "invalid_type")
    return value


def opt_str(body: dict[str, Any], key: str) -> str | None:
    v = body.get(key)
    if v is not None and not isinstance(v, str):
        raise invalid(key, f"{key} must be a string, got {kind_of(v)}", "invalid_type")
    return v


def opt_bool(body: dict[str, Any], key: str, param: str | None = None) -> bool | None:
    v = body.get(key)
    if v is not None and not isinstance(v, bool):
        raise invalid(param or key, f"{param or key} must be true or false, got {kind_of(v)}", "invalid_type")
    return v


def opt_int(body: dict[str, Any], key: str) -> int | None:
    v = body.get(key)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise invalid(key, f"{key} must be an integer, got {kind_of(v)}", "invalid_type")
    return v


def opt_num(body: dict[str, Any], key: str) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise invalid(key, f"{key} must be a number, got {kind_of(v)}", "invalid_type")
    return float(v)


def schema_grammar(schema: dict[str, Any], where: str, strict: bool = False) -> Grammar:
    """The grammar of a response format's JSON schema; a 400 naming `where` where it is not
    JSON Schema. `strict` (OpenAI's strict mode): no property beyond those listed, and a
    keyword the grammar engine cannot enforce is refused by name; otherwise lenient, as
    for tools (schemas.served)."""
    try:
        if strict:
            return compile_grammar("json_schema", json.dumps(_strict(schema)))
        return served(schema).grammar
    except NotASchema as e:
        raise invalid(where, f"{where}: {e}") from None
    except Exception as e:  # a UsageError: its message names the problem
        message = getattr(e, "message", str(e))
        if strict and "cannot enforce" in message:
            message += "; strict: true needs every keyword enforced (send strict: false to have it checked after)"
        raise invalid(where, f"{where}: {message}") from None


def _strict(schema: Any) -> Any:
    """OpenAI's strict: every object closed unless it says otherwise."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def function_tool(fn: dict[str, Any], params: Any, seen: set[str], name_at: str, params_at: str) -> dict[str, Any]:
    """One function tool checked (its name new in `seen`, its parameters a schema the
    grammar engine compiles), as chat templates read it; `*_at` name the fields in 400s."""
    name = fn.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", name):
        raise invalid(name_at, f"{name_at} must be 1-128 letters, digits, _ . or -")
    if name in seen:
        raise invalid(name_at, f"two tools are named {name!r}")
    seen.add(name)
    if isinstance(params, bool):  # JSON Schema's true (any arguments) and false (none), as objects
        params = {} if params else {"not": {}}
    if not isinstance(params, dict):
        raise invalid(params_at, f"{params_at} (tool {name!r}) must be a JSON schema object, got "
                                 f"{type(params).__name__}", "invalid_type")
    try:
        served_arguments(params)  # what the grammar cannot enforce is checked after (Structure.notes)
    except NotASchema as e:
        raise invalid(params_at, f"{params_at} (tool {name!r}): {e}") from None
    return {"type": "function", "function": {**fn, "parameters": params}}


def structure(grammar: Grammar | None, tools: Sequence[dict[str, Any]], choice: str, parallel: bool,
              custom: Sequence[CustomTool] = (), where: str = "response_format") -> Structure | None:
    """A request's structured output: an answer format (`where` names its field) or tools,
    not both unless tool_choice is none; None when it asks for neither."""
    if grammar is not None and (tools or custom) and choice != "none":
        raise invalid(where, f"{where} with tools is not supported: give tools, or a format, or tool_choice none",
                      "unsupported_parameter")
    if grammar is None and not tools and not custom:
        return None
    return Structure(grammar, tuple(tools), choice, parallel, tuple(custom))


def template_call(call_id: str, name: str, arguments: Any, where: str) -> dict[str, Any]:
    """An earlier tool call as chat templates read it, its arguments an object (a JSON
    string parsed: a 400 naming `where` if it is not JSON)."""
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        raise invalid(where, f"{where} is not valid JSON") from None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": parsed}}


def chosen_tool(name: Any, names: Sequence[str], where: str = "tool_choice") -> str:
    """A tool_choice naming one tool: a 400 unless it is among the tools given."""
    if not isinstance(name, str) or name not in names:
        raise invalid(where, f"{where} names {name!r}, which is not among the tools")
    return name


def needs_tools(choice: str, names: Sequence[Any], as_sent: str) -> str:
    """A tool_choice that asks for a call (`as_sent`: its value as the client wrote it)
    given no tools: a 400."""
    if not names:
        raise invalid("tool_choice", f"tool_choice {as_sent} needs tools")
    return choice


def format_grammar(kind: str, schema: Any, strict: bool, where: str) -> Grammar | None:
    """An answer format as a grammar: text (none), any JSON object, or a JSON schema's."""
    if kind == "text":
        return None
    if kind == "json_object":
        return compile_grammar("json_object", "{}")
    return schema_grammar(schema, where, strict)
