"""llama-server's own routes that tools call besides the generation APIs: `/tokenize`,
`/detokenize`, `/apply-template` and `/props` answer as llama-server does for the same
input; `/slots` lists each slot's state (behind the key, like /metrics)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

import anyio
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from specli.runtime import Runtime
from specli.serve.errors import invalid
from specli.serve.protocols.fields import opt_bool
from specli.serve.protocols.openai_completions.request import parse_chat
from specli.serve.served import authorize, read_json, served_of


def _piece(raw: bytes) -> str | list[int]:
    """A token's text, or its bytes where they are not whole UTF-8 (llama-server's rule)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def tokenize_reply(rt: Runtime, body: dict[str, Any]) -> dict[str, Any]:
    """`content` (a string, or strings and token ids mixed) as token ids; special-token
    text parsed unless parse_special is false; BOS only with add_special."""
    content = body.get("content")
    if content is None:
        return {"tokens": []}
    add_special, parse_special = bool(opt_bool(body, "add_special")), opt_bool(body, "parse_special") is not False
    items = content if isinstance(content, list) else [content]
    tokens: list[int] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            tokens += rt.target.tokenize(item, add_special=add_special and i == 0, parse_special=parse_special)
        elif isinstance(item, int) and not isinstance(item, bool) and 0 <= item < rt.target.n_vocab:
            tokens.append(item)
        else:
            raise invalid("content", "content must be a string, or an array of strings and token ids", "invalid_type")
    if not opt_bool(body, "with_pieces"):
        return {"tokens": tokens}
    vocab = rt.target.vocab
    return {"tokens": [{"id": t, "piece": _piece(vocab.spelled(t))} for t in tokens]}


def detokenize_reply(rt: Runtime, body: dict[str, Any]) -> dict[str, Any]:
    tokens = body.get("tokens", [])
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                                and 0 <= t < rt.target.n_vocab for t in tokens):
        raise invalid("tokens", f"tokens must be an array of token ids below {rt.target.n_vocab}", "invalid_type")
    return {"content": rt.target.vocab.detokenize(tokens, special=True)}


def apply_template_reply(rt: Runtime, body: dict[str, Any]) -> dict[str, Any]:
    """A chat completions body's messages (and tools) rendered by the model's template,
    ready for the assistant's turn, as the text a completion would be given."""
    if not rt.target.chat_template:
        raise invalid("messages", "this model has no chat template", "unsupported_parameter")
    req = parse_chat({k: v for k, v in body.items() if k in ("messages", "tools", "tool_choice", "model")})
    tools = req.structure.template_tools if req.structure is not None else ()
    return {"prompt": rt.target.apply_chat_template(list(req.messages), True, tools)}


async def _reply(request: HttpRequest, answer: Callable[[Runtime, dict[str, Any]], dict[str, Any]]) -> Response:
    """A POST route's answer to its body, worked out off the event loop (tokenizing a long
    text takes a while)."""
    served = served_of(request)
    authorize(request, served.config.api_key)
    body = await read_json(request, served.config.max_body)
    rt = served.worker.ready_runtime()
    return JSONResponse(await anyio.to_thread.run_sync(answer, rt, body))


async def tokenize(request: HttpRequest) -> Response:
    """POST /tokenize"""
    return await _reply(request, tokenize_reply)


async def detokenize(request: HttpRequest) -> Response:
    """POST /detokenize"""
    return await _reply(request, detokenize_reply)


async def apply_template(request: HttpRequest) -> Response:
    """POST /apply-template"""
    return await _reply(request, apply_template_reply)


async def props(request: HttpRequest) -> Response:
    """GET /props: context size, template, model and build, in llama-server's fields."""
    served = served_of(request)
    worker, config = served.worker, served.config
    rt = worker.ready_runtime()
    s = worker.settings
    vocab = rt.target.vocab
    info = vocab.info()
    params = {"temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p, "seed": s.seed,
              "n_predict": worker.max_tokens_cap or -1}
    return JSONResponse({
        "default_generation_settings": {"n_ctx": rt.target.n_ctx, "params": params},
        "total_slots": worker.parallel, "model_alias": config.model_id, "model_path": str(rt.target.path),
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": True, "endpoint_props": False, "endpoint_metrics": True,
        # as Jinja reads it (and llama-server shows it): one trailing newline dropped
        "chat_template": (rt.target.chat_template or "").removesuffix("\n"),
        "bos_token": vocab.detokenize([info.bos], special=True) if info.bos >= 0 else "",
        "eos_token": vocab.detokenize([info.eos], special=True) if info.eos >= 0 else "",
        "build_info": _build_info(), "is_sleeping": False,
        "specli": {"draft": str(rt.draft.path) if rt.draft is not None else None, "drafter": s.drafter},
    })


def _build_info() -> str:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "unknown"

    return f"specli {version('specli')} (llama-cpp-python {version('llama_cpp_python')})"


async def slots(request: HttpRequest) -> Response:
    """GET /slots: each slot's state (its request while it serves one)."""
    served = served_of(request)
    authorize(request, served.config.api_key)
    worker = served.worker
    rt = worker.ready_runtime()
    out = []
    for view in worker.slot_views:
        state: dict[str, Any] = {"id": view.index, "n_ctx": rt.target.n_ctx, "speculative": worker.settings.drafter
                                 != "none", "is_processing": view.job_id is not None, "n_cached_tokens": view.n_cached}
        if view.job_id is not None:
            state.update({"id_task": view.job_id, "n_prompt_tokens": view.n_prompt, "endpoint": view.endpoint})
        out.append(state)
    return JSONResponse(out)


ROUTES = [
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/detokenize", detokenize, methods=["POST"]),
    Route("/apply-template", apply_template, methods=["POST"]),
    Route("/props", props, methods=["GET"]),
    Route("/slots", slots, methods=["GET"]),
]
