"""llama-server's `POST /infill` bodies (what editor plugins such as llama.vscode send):
the code before and after the cursor, other files' chunks, and llama-server's sampling
and stop fields, into the one internal request. Unknown fields are ignored, as
llama-server does."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specli.serve.errors import invalid, kind_of
from specli.serve.fim import FimFields
from specli.serve.protocols.fields import editor_stops, opt_bool, opt_str, parse_options
from specli.serve.request import Fields, Request

_SAMPLING = ("temperature", "top_k", "top_p", "min_p", "seed", "stop", "specli", "presence_penalty",
             "frequency_penalty")


def parse_infill(body: dict[str, Any]) -> Request:
    prefix, suffix = _text(body, "input_prefix"), _text(body, "input_suffix")
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise invalid("prompt", '"prompt" must be a string', "invalid_type")
    fields = FimFields(prefix, suffix, _extra(body.get("input_extra")), prompt)
    sampling = {k: body.get(k) for k in _SAMPLING}
    limit = "n_predict" if "n_predict" in body or "max_tokens" not in body else "max_tokens"
    sampling[limit] = None if body.get(limit) == -1 else body.get(limit)
    options = parse_options(sampling, "completion", limit)
    options = replace(options, editor=editor_stops(body, fields, options))
    stream = bool(opt_bool(body, "stream"))
    return Request("completion", opt_str(body, "model"), options, prompt=prefix, stream=stream, endpoint="infill",
                   fim=fields, fields=Fields("input_prefix", limit, "input_suffix"))


def _text(body: dict[str, Any], key: str) -> str:
    if key not in body:
        raise invalid(key, f'"{key}" is required', "missing_required_parameter")
    value = body[key]
    if not isinstance(value, str):
        raise invalid(key, f'"{key}" must be a string, got {kind_of(value)}', "invalid_type")
    return value


def _extra(value: Any) -> tuple[tuple[str, str], ...]:
    """`input_extra`: [{"filename": str (optional), "text": str}] -> ((filename, text), ...)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid("input_extra", '"input_extra" must be an array of {"filename": string, "text": string}',
                      "invalid_type")
    out = []
    for i, chunk in enumerate(value):
        where = f"input_extra[{i}]"
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise invalid(where, f'{where} must contain a "text" field with a string value', "invalid_type")
        filename = chunk.get("filename", "tmp")
        if not isinstance(filename, str):
            raise invalid(f"{where}.filename", f"{where}'s \"filename\" field must be a string", "invalid_type")
        out.append((filename, chunk["text"]))
    return tuple(out)
