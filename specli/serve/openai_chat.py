"""OpenAI's chat completions and completions: bodies checked by `requests`, answers and
chunks shaped by `responses`, streamed as `data:` events ending with [DONE]."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from specli.serve import responses
from specli.serve.errors import ApiError
from specli.serve.protocol import Protocol, Queue
from specli.serve.requests import Request, parse_request
from specli.serve.responses import Ids, Outcome
from specli.serve.worker import Delta


async def events(ids: Ids, req: Request, queue: Queue) -> AsyncIterator[bytes]:
    """The job's pushes as OpenAI chunks: text deltas (the first with the role), a last
    chunk with the finish reason and figures, the usage chunk if asked, then [DONE]. An
    error after the stream began is an `error` event."""
    first = True
    offset = 0  # of the text so far: the completions API's logprobs text_offset
    while True:
        item = await queue.get()
        if isinstance(item, ApiError):
            yield responses.sse(item.body())
            break
        if isinstance(item, Delta):
            text = item.text if item.text or not item.calls else None
            logprobs = responses.logprobs_object(req.kind, item.logprobs, offset)
            chunk = responses.chunk(ids, req.kind, text, first=first, include_usage=req.include_usage,
                                    calls=item.calls, logprobs=logprobs)
            if item.sources is not None:  # the web page's extension, asked for by specli.sources
                chunk["specli"] = item.sources
            yield responses.sse(chunk)
            offset += len(item.text)
            first = False
            continue
        if first and req.kind == "chat":
            yield responses.sse(responses.chunk(ids, req.kind, "", first=True, include_usage=req.include_usage))
        yield responses.sse(responses.chunk(ids, req.kind, None, out=item, include_usage=req.include_usage))
        if req.include_usage:
            yield responses.sse(responses.usage_chunk(ids, req.kind, item))
        break
    yield responses.SSE_DONE


def _chat(body: dict[str, Any]) -> Request:
    return parse_request(body, "chat")


def _completion(body: dict[str, Any]) -> Request:
    return parse_request(body, "completion")


def _chat_whole(ids: Ids, req: Request, out: Outcome) -> dict[str, Any]:
    return responses.chat_response(ids, out)


def _completion_whole(ids: Ids, req: Request, out: Outcome) -> dict[str, Any]:
    return responses.completion_response(ids, out)


CHAT = Protocol("chat", "chatcmpl-", _chat, _chat_whole, events)
COMPLETIONS = Protocol("completion", "cmpl-", _completion, _completion_whole, events)
