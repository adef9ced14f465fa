"""Request bodies checked into records: every problem is a 400 that names the parameter
at fault and what it may be. Pure: no models, no HTTP."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, Literal

from specli.profiles import SPECS
from specli.profiles.spec import Bad
from specli.runtime.fim import EditorStops, FimFields, first_code_line
from specli.serve.errors import invalid
from specli.serve.tools import Structure, parse_structure

# caps on what one request may list: each stop string is looked for in every piece of
# text generated, and every message is rendered and tokenized before the request queues
MAX_STOP = 16
MAX_MESSAGES = 4096


@dataclass(frozen=True)
class Options:
    """What a request asks of the generation; None = the server's setting."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    drafter: str | None = None  # specli: {...}
    draft_max: int | None = None
    exact: bool | None = None
    history: bool = True  # False: this request's output stays out of the history store
    return_tokens: bool = False
    grammar_drafts: bool | None = None  # under a grammar, draft the tokens it forces
    prediction: str | None = None  # OpenAI's predicted output: a draft source
    suffix_stop: bool = True  # a fill-in-the-middle completion ends where it writes the suffix's first line
    logprobs: int | None = None  # None: none returned; else the emitted tokens' and this many alternatives
    logit_bias: tuple[tuple[int, float], ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    editor: EditorStops = EditorStops()  # llama-server's n_indent and t_max_predict_ms, a FIM's suffix stop
    sources: bool = False  # stream each token's source, the steps and live figures (the web page)


@dataclass(frozen=True)
class Request:
    """One checked request: a chat (`messages`) or a completion (`prompt`)."""

    kind: Literal["chat", "completion"]
    model: str | None
    options: Options
    messages: tuple[dict[str, str], ...] = ()
    prompt: str = ""
    stream: bool = False
    include_usage: bool = False
    structure: Structure | None = None  # response_format, tools, tool_choice
    endpoint: str = ""  # the route's name in logs and /metrics (default: kind)
    reasoning: bool = False  # a leading <think>...</think> of the answer is reasoning, apart from the text
    protocol_data: Any = None  # what a protocol keeps for its own answer (the Responses API's echo)
    fim: FimFields | None = None  # a fill-in-the-middle completion: its prompt comes from these


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
MAX_TOP_LOGPROBS = {"chat": 20, "completion": 5}  # OpenAI's caps
_CHAT_ONLY = frozenset({"messages", "max_completion_tokens", "stream_options", "tools", "tool_choice",
                        "parallel_tool_calls", "functions", "function_call", "response_format", "modalities",
                        "audio", "reasoning_effort", "web_search_options", "top_logprobs"})
_COMPLETION_ONLY = frozenset({"prompt", "echo", "suffix", "best_of", "n_indent", "t_max_predict_ms"})
_COMMON = frozenset({"model", "prediction", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "seed",
                     "max_tokens", "stop", "n", "logprobs", "logit_bias", "frequency_penalty",
                     "presence_penalty", "user", "metadata", "store", "service_tier", "cache_prompt", "specli"})
_SPECLI_KEYS = ("drafter", "draft_max", "exact", "history", "return_tokens", "grammar_drafts", "suffix_stop",
               "sources")


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object in `raw`: 400 for invalid UTF-8, malformed JSON or not an object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise invalid(None, f"the request body is not valid UTF-8 (byte {e.start})", "invalid_encoding") from None
    try:
        body = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise invalid(None, f"the request body is not valid JSON ({e})", "invalid_json") from None
    if not isinstance(body, dict):
        raise invalid(None, f"the request body must be a JSON object, got {kind_of(body)}", "invalid_json")
    if (where := _lone_surrogate(body, "")) is not None:
        raise invalid(where or None, f"{where or 'a key'} holds a lone UTF-16 surrogate (\\ud800-\\udfff escape "
                                     "without its pair), which is not text", "invalid_encoding")
    return body


def _lone_surrogate(value: Any, where: str) -> str | None:
    """The path of the first string holding a lone surrogate (JSON allows the escape;
    UTF-8 has no such character), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, v in items:
        if isinstance(key, str) and _lone_surrogate(key, where) is not None:
            return where
        path = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
        if (found := _lone_surrogate(v, path)) is not None:
            return found
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def kind_of(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null", int: "a number", float: "a number"}.get(type(value), type(value).__name__)


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
    model = _opt_str(body, "model")
    stream = _opt_bool(body, "stream") or False
    include_usage = False
    if (so := body.get("stream_options")) is not None:
        if not isinstance(so, dict):
            raise invalid("stream_options", f"stream_options must be an object, got {kind_of(so)}", "invalid_type")
        if not stream:
            raise invalid("stream_options", "stream_options is only allowed with stream: true")
        include_usage = _opt_bool(so, "include_usage", "stream_options.include_usage") or False
    options = parse_options(body, kind)
    if kind == "chat":
        return Request(kind, model, options, messages=_messages(body.get("messages")), stream=stream,
                       include_usage=include_usage, structure=parse_structure(body))
    prompt = _prompt(body.get("prompt"))
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise invalid("suffix", f"suffix must be a string, got {kind_of(suffix)}", "invalid_type")
    fim = FimFields(prompt, suffix) if suffix else None
    if fim is not None:
        options = replace(options, editor=editor_stops(body, fim, options))
    return Request(kind, model, options, prompt=prompt, stream=stream, include_usage=include_usage, fim=fim)


def editor_stops(body: dict[str, Any], fim: FimFields | None, options: Options) -> EditorStops:
    """llama-server's `n_indent` and `t_max_predict_ms`, and (unless `specli.suffix_stop`
    is false) a fill-in-the-middle completion's stop at the suffix's first line of code."""
    n_indent, t_max = _opt_int(body, "n_indent") or 0, _opt_int(body, "t_max_predict_ms") or 0
    for key, v in (("n_indent", n_indent), ("t_max_predict_ms", t_max)):
        if v < 0:
            raise invalid(key, f"{key} must be 0 (off) or more, got {v}")
    line = first_code_line(fim.suffix) if fim is not None and options.suffix_stop else None
    return EditorStops(n_indent, t_max, line)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and not isinstance(a, bool)
                                             and isinstance(b, (int, float)) and a == b)


def parse_options(body: dict[str, Any], kind: str) -> Options:
    max_tokens = _opt_int(body, "max_tokens")
    if kind == "chat" and body.get("max_completion_tokens") is not None:
        max_tokens = _opt_int(body, "max_completion_tokens")
    param = "max_completion_tokens" if kind == "chat" and body.get("max_completion_tokens") is not None \
        else "max_tokens"
    if max_tokens is not None and max_tokens < 1:
        raise invalid(param, f"{param} must be at least 1, got {max_tokens}")
    temperature = _opt_num(body, "temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        raise invalid("temperature", f"temperature must be between 0 and 2, got {temperature}")
    top_p = _opt_num(body, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise invalid("top_p", f"top_p must be in (0, 1], got {top_p}")
    top_k = _opt_int(body, "top_k")
    if top_k is not None and top_k < 0:
        raise invalid("top_k", f"top_k must be 0 (off) or more, got {top_k}")
    min_p = _opt_num(body, "min_p")
    if min_p is not None and not 0 <= min_p < 1:
        raise invalid("min_p", f"min_p must be in [0, 1), got {min_p}")
    seed = _opt_int(body, "seed")
    if seed is not None and not 0 <= seed < 2**63:
        raise invalid("seed", f"seed must be a non-negative 64-bit integer, got {seed}")
    spec = _specli(body.get("specli"))
    return Options(max_tokens, temperature, top_p, top_k, min_p, seed, parse_stop(body.get("stop")), **spec,
                   prediction=_prediction(body.get("prediction")), logprobs=_logprobs(body, kind),
                   logit_bias=_logit_bias(body.get("logit_bias")), presence_penalty=_penalty(body, "presence_penalty"),
                   frequency_penalty=_penalty(body, "frequency_penalty"))


def _penalty(body: dict[str, Any], key: str) -> float:
    v = _opt_num(body, key)
    if v is not None and not -2 <= v <= 2:
        raise invalid(key, f"{key} must be between -2 and 2, got {v}")
    return v or 0.0


def _logprobs(body: dict[str, Any], kind: str) -> int | None:
    """Chat: logprobs true, top_logprobs 0-20. Completions: logprobs 0-5 alternatives."""
    cap = MAX_TOP_LOGPROBS[kind]
    if kind == "completion":
        n = _opt_int(body, "logprobs")
        if n is not None and not 0 <= n <= cap:
            raise invalid("logprobs", f"logprobs must be between 0 and {cap}, got {n}")
        return n
    top = _opt_int(body, "top_logprobs")
    if top is not None and not 0 <= top <= cap:
        raise invalid("top_logprobs", f"top_logprobs must be between 0 and {cap}, got {top}")
    if not _opt_bool(body, "logprobs"):
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
    return _content(value.get("content"), "prediction.content") or None


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
            out[key] = _opt_bool(value, key, param)
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


def _content(value: Any, where: str) -> str:
    """A message's content: a string, or an array of text parts joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts: list[str] = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise invalid(f"{where}[{i}]", f"{where}[{i}] must be an object with a type", "invalid_type")
            if part["type"] != "text":
                raise invalid(f"{where}[{i}]", f"content parts of type {part['type']!r} are not supported (text only)",
                              "unsupported_parameter")
            if not isinstance(part.get("text"), str):
                raise invalid(f"{where}[{i}].text", f"{where}[{i}].text must be a string", "invalid_type")
            parts.append(part["text"])
        return "".join(parts)
    raise invalid(where, f"{where} must be a string or an array of text parts, got {kind_of(value)}", "invalid_type")


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
                               "content": _content(content, f"{where}.content")}
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
        args = fn.get("arguments", "{}")
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            raise invalid(f"{where}[{i}].function.arguments", f"{where}[{i}].function.arguments is not valid JSON") from None
        out.append({"id": call.get("id", ""), "type": "function",
                    "function": {"name": fn["name"], "arguments": parsed}})
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


def _opt_str(body: dict[str, Any], key: str) -> str | None:
    v = body.get(key)
    if v is not None and not isinstance(v, str):
        raise invalid(key, f"{key} must be a string, got {kind_of(v)}", "invalid_type")
    return v


def _opt_bool(body: dict[str, Any], key: str, param: str | None = None) -> bool | None:
    v = body.get(key)
    if v is not None and not isinstance(v, bool):
        raise invalid(param or key, f"{param or key} must be true or false, got {kind_of(v)}", "invalid_type")
    return v


def _opt_int(body: dict[str, Any], key: str) -> int | None:
    v = body.get(key)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise invalid(key, f"{key} must be an integer, got {kind_of(v)}", "invalid_type")
    return v


def _opt_num(body: dict[str, Any], key: str) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise invalid(key, f"{key} must be a number, got {kind_of(v)}", "invalid_type")
    return float(v)


def fold_system(messages: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    """The messages with every system message but a leading one folded into the next
    user message (else the one before, else the leading system message): for chat
    templates that refuse a system message anywhere but first."""
    out = [dict(m) for m in messages]
    keep = [i == 0 or m["role"] != "system" for i, m in enumerate(out)]
    for i, m in enumerate(out):
        if keep[i]:
            continue
        users = [j for j in range(i + 1, len(out)) if out[j]["role"] == "user"][:1] or \
            [j for j in range(i - 1, -1, -1) if out[j]["role"] == "user"][:1]
        if users:
            j = users[0]
            joined = (m["content"], out[j]["content"]) if j > i else (out[j]["content"], m["content"])
            out[j]["content"] = "\n\n".join(p for p in joined if p)
        elif out[0]["role"] == "system":
            out[0]["content"] = "\n\n".join(p for p in (out[0]["content"], m["content"]) if p)
        else:
            keep[i] = True  # nowhere else to go: the template decides
    return tuple(m for m, k in zip(out, keep) if k)
