"""llama-server's `POST /infill` (what editor plugins such as llama.vscode send): the
code before and after the cursor, other files' chunks, and llama-server's sampling and
stop fields, into the one internal request; the answer and its stream in llama-server's
/completion shape (`content`, `tokens_predicted`, `stop_type`, `timings`), no [DONE].
Unknown fields are ignored, as llama-server does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from specli.runtime.fim import FimFields
from specli.serve import responses
from specli.serve.errors import ApiError, invalid
from specli.serve.protocol import Protocol, Queue
from specli.serve.requests import Request, editor_stops, kind_of, parse_options
from specli.serve.responses import Ids, Outcome
from specli.serve.worker import Delta

_SAMPLING = ("temperature", "top_k", "top_p", "min_p", "seed", "stop", "specli", "presence_penalty",
             "frequency_penalty")


def parse_infill(body: dict[str, Any]) -> Request:
    prefix, suffix = _text(body, "input_prefix"), _text(body, "input_suffix")
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise invalid("prompt", '"prompt" must be a string', "invalid_type")
    fields = FimFields(prefix, suffix, _extra(body.get("input_extra")), prompt)
    sampling = {k: body.get(k) for k in _SAMPLING}
    n_predict = body.get("n_predict", body.get("max_tokens"))
    sampling["max_tokens"] = None if n_predict in (None, -1) else n_predict
    options = parse_options(sampling, "completion")
    options = replace(options, editor=editor_stops(body, fields, options))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid("stream", f"stream must be true or false, got {kind_of(stream)}", "invalid_type")
    model = body.get("model")
    return Request("completion", model if isinstance(model, str) else None, options, prompt=prefix, stream=stream,
                   endpoint="infill", fim=fields)


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


def stop_type(out: Outcome) -> str:
    """llama-server's: eos (the model ended), word (a stop string, or the suffix's first
    line), limit (n_predict, n_indent, t_max_predict_ms, the context)."""
    if out.stop_string is not None or out.specli_finish == "suffix":
        return "word"
    return "eos" if out.finish_reason == "stop" else "limit"


def _partial(ids: Ids, content: str, n_predicted: int) -> dict[str, Any]:
    return {"index": 0, "content": content, "tokens": [], "stop": False, "id_slot": -1,
            "tokens_predicted": n_predicted, "tokens_evaluated": ids.n_prompt}


def whole(ids: Ids, req: Request, out: Outcome) -> dict[str, Any]:
    c = out.counters
    o = req.options
    settings = {"n_predict": o.max_tokens or -1, "temperature": o.temperature, "top_k": o.top_k, "top_p": o.top_p,
                "min_p": o.min_p, "seed": o.seed, "n_indent": o.editor.n_indent,
                "t_max_predict_ms": o.editor.t_max_ms, "stop": list(o.stop)}
    return {"index": 0, "content": out.text, "tokens": out.tokens or [], "id_slot": -1, "stop": True,
            "model": ids.model, "tokens_predicted": c.n_generated, "tokens_evaluated": c.n_prompt,
            "generation_settings": settings, "prompt": "", "has_new_line": "\n" in out.text, "truncated": False,
            "stop_type": stop_type(out), "stopping_word": out.stop_string or "",
            "tokens_cached": c.n_prompt + c.n_generated, "timings": responses.timings(c),
            "specli": responses.specli_figures(out)}


async def events(ids: Ids, req: Request, queue: Queue) -> AsyncIterator[bytes]:
    """Each piece as llama-server streams /completion (`data: {content, stop: false}`),
    then the whole answer's fields with empty content and `stop: true`."""
    n = 0
    while True:
        item = await queue.get()
        if isinstance(item, ApiError):
            yield responses.sse(item.body())
            return
        if isinstance(item, Delta):
            n += 1
            yield responses.sse(_partial(ids, item.text, n))
            continue
        yield responses.sse({**whole(ids, req, item), "content": ""})
        return


INFILL = Protocol("infill", "infill-", parse_infill, whole, events)
