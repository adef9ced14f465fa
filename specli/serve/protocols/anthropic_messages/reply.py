"""Anthropic Messages answers: the whole message, the stream's events in their order
(message_start, content_block_start, ping, content_block_delta, content_block_stop,
message_delta, message_stop), usage with the prompt cache's share, errors in Anthropic's
shape and statuses, and the model list as the `anthropic` SDK reads it. Bodies are
checked in `request`. Pure but for the queue it reads."""

from __future__ import annotations

import datetime
import json
from collections.abc import AsyncIterator
from typing import Any

from specli.engine import metrics
from specli.serve.errors import ApiError
from specli.serve.figures import with_figures
from specli.serve.outcome import Outcome
from specli.serve.protocols.base import ErrorReply, Ids, Queue
from specli.serve.protocols.reasoning import ReasoningStream, content_frames, split_reasoning
from specli.serve.protocols.sse import named, pushes
from specli.serve.request import Request
from specli.serve.tools import ToolCall

# Anthropic's error types by status; a full queue is its 529 "overloaded", which its SDKs retry
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large", 415: "invalid_request_error",
                429: "rate_limit_error", 499: "api_error", 500: "api_error", 503: "overloaded_error",
                529: "overloaded_error"}
OVERLOADED = 529


def error(e: ApiError) -> ErrorReply:
    """`{"type": "error", "error": {"type", "message"}}` with Anthropic's status."""
    status = OVERLOADED if e.code == "queue_full" else e.status
    kind = _ERROR_TYPES.get(status, "api_error")
    return ErrorReply(status, {"type": "error", "error": {"type": kind, "message": e.message}}, e.headers())


def usage(c: metrics.Counters) -> dict[str, Any]:
    """Input tokens prefilled now, read from the cache (a slot's or the prompt cache's),
    and written to it (0: every prompt is kept, at no extra cost; its tokens count as input)."""
    return {"input_tokens": c.n_prompt - c.n_prompt_reused, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": c.n_prompt_reused, "output_tokens": c.n_generated}


def stop_reason(out: Outcome) -> str:
    if out.finish == "tool_call":
        return "tool_use"
    if out.specli_finish == "context":
        return "model_context_window_exceeded"
    if out.finish in ("length", "cancelled"):
        return "max_tokens"
    return "stop_sequence" if out.stop_string is not None else "end_turn"


def tool_use_id(call: ToolCall) -> str:
    return "toolu_" + call.id.removeprefix("call_")


def tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id(call), "name": call.name, "input": json.loads(call.arguments)}


def whole(ids: Ids, req: Request, out: Outcome) -> dict[str, Any]:
    thinking, text = split_reasoning(out.text) if req.reasoning else ("", out.text)
    content: list[dict[str, Any]] = []
    if thinking:
        content.append({"type": "thinking", "thinking": thinking, "signature": ""})
    if text or not (thinking or out.tool_calls):
        content.append({"type": "text", "text": text})
    content += [tool_use(c) for c in out.tool_calls]
    return with_figures({"id": ids.id, "type": "message", "role": "assistant", "model": ids.model,
                         "content": content, "stop_reason": stop_reason(out), "stop_sequence": out.stop_string,
                         "usage": usage(out.counters)}, out)


class _Blocks:
    """The content blocks of a streamed message: one open at a time, numbered in order."""

    def __init__(self) -> None:
        self.index, self.open_kind, self.pinged = -1, "", False

    def close(self) -> list[bytes]:
        if not self.open_kind:
            return []
        self.open_kind = ""
        return [named({"type": "content_block_stop", "index": self.index})]

    def start(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        out = self.close()
        self.index += 1
        self.open_kind = kind
        out.append(named({"type": "content_block_start", "index": self.index, "content_block": block}))
        if not self.pinged:  # Anthropic's order: a ping after the first block opens
            self.pinged = True
            out.append(named({"type": "ping"}))
        return out

    def text(self, kind: str, piece: str) -> list[bytes]:
        out: list[bytes] = []
        if self.open_kind != kind:
            block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" \
                else {"type": "text", "text": ""}
            out += self.start(kind, block)
        delta = {"type": "thinking_delta", "thinking": piece} if kind == "thinking" \
            else {"type": "text_delta", "text": piece}
        out.append(named({"type": "content_block_delta", "index": self.index, "delta": delta}))
        return out

    def tool_call(self, call: ToolCall) -> list[bytes]:
        out = self.start("tool_use", {"type": "tool_use", "id": tool_use_id(call), "name": call.name, "input": {}})
        out.append(named({"type": "content_block_delta", "index": self.index,
                          "delta": {"type": "input_json_delta", "partial_json": call.arguments}}))
        return out + self.close()


async def events(ids: Ids, req: Request, queue: Queue) -> AsyncIterator[bytes]:
    """The job's pushes as Anthropic's stream; a ping after each KEEPALIVE_S seconds of silence."""
    yield named({"type": "message_start", "message": {
        "id": ids.id, "type": "message", "role": "assistant", "model": ids.model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": ids.n_prompt, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 0}}})
    blocks, reasoning = _Blocks(), ReasoningStream(req.reasoning)
    async for item in pushes(queue, keepalive=True):
        if item is None:
            yield named({"type": "ping"})
        elif isinstance(item, ApiError):
            yield named(error(item).body)
        else:
            for data in content_frames(item, reasoning, blocks):
                yield data
            if isinstance(item, Outcome):
                for data in blocks.close():
                    yield data
                yield named(with_figures({"type": "message_delta", "delta": {
                    "stop_reason": stop_reason(item), "stop_sequence": item.stop_string},
                    "usage": usage(item.counters)}, item))
                yield named({"type": "message_stop"})


def count_tokens_reply(n_tokens: int) -> dict[str, Any]:
    return {"input_tokens": n_tokens}


def models_list(names: list[str], created: int) -> dict[str, Any]:
    """GET /v1/models as Anthropic's API answers it (asked with an anthropic-version header)."""
    at = datetime.datetime.fromtimestamp(created, datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    data = [{"type": "model", "id": n, "display_name": n, "created_at": at} for n in names]
    return {"data": data, "has_more": False, "first_id": names[0] if names else None,
            "last_id": names[-1] if names else None}

