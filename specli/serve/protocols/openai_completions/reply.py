"""OpenAI's answer shapes: the chat completion and completion objects, their chunks, usage
and model list, built from a generation's outcome, and its stream: `data:` events ending
with [DONE]. Pure: no models, no HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from specli.drafters.ngram import PREDICTION
from specli.engine import metrics
from specli.serve.errors import ApiError
from specli.serve.figures import with_figures
from specli.serve.outcome import Delta, Finish, Outcome
from specli.serve.protocols import sse
from specli.serve.protocols.base import Ids, Queue
from specli.serve.protocols.openai_completions.request import StreamOptions
from specli.serve.request import Request
from specli.serve.tools import ToolCall

OpenAIFinish = Literal["stop", "length", "tool_calls"]
_FINISH: dict[Finish, OpenAIFinish] = {"end": "stop", "stop_string": "stop", "tool_call": "tool_calls",
                                       "length": "length", "cancelled": "length"}


def finish_reason(out: Outcome) -> OpenAIFinish:
    return _FINISH[out.finish]


def logprobs_object(kind: str, entries: list[dict[str, Any]] | None, offset: int = 0) -> dict[str, Any] | None:
    """A choice's `logprobs`: chat's {"content": entries}, or the completions API's
    {"tokens", "token_logprobs", "top_logprobs", "text_offset"} (offsets from `offset`)."""
    if entries is None:
        return None
    if kind == "chat":
        return {"content": entries, "refusal": None}
    offsets, at = [], offset
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}


def usage(c: metrics.Counters) -> dict[str, Any]:
    """OpenAI's usage. Of a predicted output (a draft source here): its tokens drafted and
    accepted, and those drafted and rejected."""
    accepted = c.accepted_by.get(PREDICTION, 0)
    return {"prompt_tokens": c.n_prompt, "completion_tokens": c.n_generated,
            "total_tokens": c.n_prompt + c.n_generated,
            "prompt_tokens_details": {"cached_tokens": c.n_prompt_reused},
            "completion_tokens_details": {"accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": c.drafted_by.get(PREDICTION, 0) - accepted}}


def chat_response(ids: Ids, out: Outcome) -> dict[str, Any]:
    return with_figures({"id": ids.id, "object": "chat.completion", "created": ids.created, "model": ids.model,
            "system_fingerprint": ids.fingerprint,
            "choices": [{"index": 0, "message": _message(out), "logprobs": logprobs_object("chat", out.logprobs),
                         "finish_reason": finish_reason(out)}],
            "usage": usage(out.counters)}, out)


def _message(out: Outcome) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": out.text if out.text or not out.tool_calls else None,
                           "refusal": None}
    if out.tool_calls:
        msg["tool_calls"] = [c.to_json() for c in out.tool_calls]
    return msg


def completion_response(ids: Ids, out: Outcome) -> dict[str, Any]:
    return with_figures({"id": ids.id, "object": "text_completion", "created": ids.created, "model": ids.model,
                         "system_fingerprint": ids.fingerprint,
                         "choices": [{"index": 0, "text": out.text,
                                      "logprobs": logprobs_object("completion", out.logprobs),
                                      "finish_reason": finish_reason(out)}],
                         "usage": usage(out.counters)}, out)


def chunk(ids: Ids, kind: str, text: str | None, *, first: bool = False, out: Outcome | None = None,
          include_usage: bool = False, calls: Sequence[tuple[int, ToolCall]] = (),
          logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One streamed chunk: text (`first` adds the assistant role), finished tool calls
    (`calls`: (index, ToolCall)), or the last one (`out`: its finish reason, timings and
    specli figures)."""
    choice: dict[str, Any] = {"index": 0}
    if kind == "chat":
        delta: dict[str, Any] = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        if calls:
            delta["tool_calls"] = [call.to_json(index) for index, call in calls]
        choice["delta"] = delta
    else:
        choice["text"] = text or ""
    choice["logprobs"] = logprobs
    choice["finish_reason"] = finish_reason(out) if out is not None else None
    obj: dict[str, Any] = {"id": ids.id, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
                           "created": ids.created, "model": ids.model, "system_fingerprint": ids.fingerprint,
                           "choices": [choice]}
    if include_usage:
        obj["usage"] = None
    return with_figures(obj, out) if out is not None else obj


def usage_chunk(ids: Ids, kind: str, out: Outcome) -> dict[str, Any]:
    """stream_options.include_usage: a last chunk with no choices and the usage."""
    return {"id": ids.id, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
            "created": ids.created, "model": ids.model, "system_fingerprint": ids.fingerprint, "choices": [],
            "usage": usage(out.counters)}


def models_list(names: Sequence[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": n, "object": "model", "created": created, "owned_by": "specli"}
                                       for n in names]}


async def events(ids: Ids, req: Request, queue: Queue) -> AsyncIterator[bytes]:
    """The job's pushes as OpenAI chunks: text deltas (the first with the role), a last
    chunk with the finish reason and figures, the usage chunk if asked, then [DONE]. An
    error after the stream began is an `error` event."""
    first = True
    offset = 0  # of the text so far: the completions API's logprobs text_offset
    include_usage = isinstance(req.reply, StreamOptions) and req.reply.include_usage
    async for item in sse.pushes(queue):
        if isinstance(item, ApiError):
            yield sse.data(item.body())
        elif isinstance(item, Delta):
            text = item.text if item.text or not item.calls else None
            logprobs = logprobs_object(req.kind, item.logprobs, offset)
            obj = chunk(ids, req.kind, text, first=first, include_usage=include_usage, calls=item.calls,
                        logprobs=logprobs)
            if item.sources is not None:  # the web page's extension, asked for by specli.sources
                obj["specli"] = item.sources
            yield sse.data(obj)
            offset += len(item.text)
            first = False
        elif isinstance(item, Outcome):
            if first and req.kind == "chat":
                yield sse.data(chunk(ids, req.kind, "", first=True, include_usage=include_usage))
            yield sse.data(chunk(ids, req.kind, None, out=item, include_usage=include_usage))
            if include_usage:
                yield sse.data(usage_chunk(ids, req.kind, item))
    yield sse.DONE
