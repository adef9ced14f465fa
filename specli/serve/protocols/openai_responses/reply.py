"""OpenAI Responses answers: the response object with its output items (reasoning,
message, function_call, custom_tool_call), the stream's events in their order with
their sequence numbers, usage with the prompt cache's share, and stored responses for
`previous_response_id`. Bodies are checked in `request`."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from specli.engine import metrics
from specli.serve import errors
from specli.serve.errors import ApiError
from specli.serve.figures import with_figures
from specli.serve.outcome import Outcome
from specli.serve.protocols.base import Ids, Queue, WireProtocol
from specli.serve.protocols.openai_responses.request import ResponsesCall, parse_responses, with_previous
from specli.serve.protocols.openai_responses.store import ResponseStore, Stored
from specli.serve.protocols.reasoning import ReasoningStream, content_frames, split_reasoning
from specli.serve.protocols.sse import named, pushes
from specli.serve.request import Request
from specli.serve.tools import ToolCall, custom_call_text


def usage(c: metrics.Counters) -> dict[str, Any]:
    return {"input_tokens": c.n_prompt, "input_tokens_details": {"cached_tokens": c.n_prompt_reused},
            "output_tokens": c.n_generated, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": c.n_prompt + c.n_generated}


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def response_object(ids: Ids, req: Request, status: str, output: list[dict[str, Any]],
                    out: Outcome | None = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
    """The response as OpenAI's API shapes it, the request's settings echoed."""
    call: ResponsesCall = req.reply
    echo = call.echo
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    obj: dict[str, Any] = {
        "id": ids.id, "object": "response", "created_at": ids.created, "status": status, "error": error,
        "incomplete_details": incomplete, "instructions": call.instructions,
        "max_output_tokens": echo.get("max_output_tokens"), "model": ids.model, "output": output,
        "parallel_tool_calls": echo.get("parallel_tool_calls", True),
        "previous_response_id": call.previous_response_id,
        "reasoning": echo.get("reasoning") or {"effort": None, "summary": None}, "store": call.store,
        "temperature": echo.get("temperature"), "text": echo.get("text") or {"format": {"type": "text"}},
        "tool_choice": echo.get("tool_choice", "auto"), "tools": echo.get("tools", []), "top_p": echo.get("top_p"),
        "truncation": echo.get("truncation", "disabled"), "usage": usage(out.counters) if out is not None else None,
        "user": echo.get("user"), "metadata": echo.get("metadata") or {},
    }
    if "prompt_cache_key" in echo:
        obj["prompt_cache_key"] = echo["prompt_cache_key"]
    if out is not None:
        with_figures(obj, out, list(call.notes) + out.notes)
    return obj


def status_of(out: Outcome) -> str:
    return "incomplete" if out.finish in ("length", "cancelled") else "completed"


class OutputItems:
    """The output items of one response, built piece by piece; each step returns the
    stream's events for it (numbered when `numbered`)."""

    def __init__(self, call: ResponsesCall) -> None:
        self.call = call
        self.items: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the reasoning or message item being written
        self.seq = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        data = named({"type": kind, "sequence_number": self.seq, **fields})
        self.seq += 1
        return data

    def text(self, kind: str, piece: str) -> Iterator[bytes]:
        """Reasoning or answer text: opens its item (closing any other) and adds `piece`."""
        item_type = "reasoning" if kind == "thinking" else "message"
        if self.open is None or self.open["type"] != item_type:
            yield from self.close()
            yield from self._open(item_type)
        assert self.open is not None
        index = len(self.items)
        part = self.open["content"][0]
        part["text"] += piece
        name = "response.reasoning_text.delta" if item_type == "reasoning" else "response.output_text.delta"
        extra: dict[str, Any] = {} if item_type == "reasoning" else {"logprobs": []}
        yield self.event(name, item_id=self.open["id"], output_index=index, content_index=0, delta=piece, **extra)

    def _open(self, item_type: str) -> Iterator[bytes]:
        if item_type == "reasoning":
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
            self.open = {"type": "reasoning", "id": _item_id("rs"), "summary": [], "content": [part]}
        else:
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            self.open = {"type": "message", "id": _item_id("msg"), "status": "in_progress", "role": "assistant",
                         "content": [part]}
        index = len(self.items)
        shell = {**self.open, "content": []}
        yield self.event("response.output_item.added", output_index=index, item=shell)
        yield self.event("response.content_part.added", item_id=self.open["id"], output_index=index, content_index=0,
                         part={**part, "text": ""})

    def close(self) -> Iterator[bytes]:
        if self.open is None:
            return
        item, index = self.open, len(self.items)
        part = item["content"][0]
        if item["type"] == "reasoning":
            yield self.event("response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0,
                             text=part["text"])
        else:
            item["status"] = "completed"
            yield self.event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                             text=part["text"], logprobs=[])
        yield self.event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                         part=part)
        yield self.event("response.output_item.done", output_index=index, item=item)
        self.items.append(item)
        self.open = None

    def tool_call(self, call: ToolCall) -> Iterator[bytes]:
        yield from self.close()
        index = len(self.items)
        if call.custom:
            item: dict[str, Any] = {"type": "custom_tool_call", "id": _item_id("ctc"), "call_id": call.id,
                                    "name": call.name, "input": call.arguments, "status": "completed"}
            added = {**item, "input": "", "status": "in_progress"}
            deltas = [("response.custom_tool_call_input.delta", {"delta": call.arguments}),
                      ("response.custom_tool_call_input.done", {"input": call.arguments})]
        else:
            namespace, name = self.call.namespaces.get(call.name, (None, call.name))
            item = {"type": "function_call", "id": _item_id("fc"), "call_id": call.id, "name": name,
                    "arguments": call.arguments, "status": "completed"}
            if namespace is not None:
                item["namespace"] = namespace
            added = {**item, "arguments": "", "status": "in_progress"}
            deltas = [("response.function_call_arguments.delta", {"delta": call.arguments}),
                      ("response.function_call_arguments.done", {"arguments": call.arguments, "name": name})]
        yield self.event("response.output_item.added", output_index=index, item=added)
        for kind, fields in deltas:
            yield self.event(kind, item_id=item["id"], output_index=index, **fields)
        yield self.event("response.output_item.done", output_index=index, item=item)
        self.items.append(item)

    def finish(self) -> Iterator[bytes]:
        """Close the last item; a whole answer with no item gets an empty message."""
        yield from self.close()
        if not self.items:
            yield from self._open("message")
            yield from self.close()


def _assistant_turn(out: Outcome) -> dict[str, Any]:
    """The output as the next request's chat template reads it (a custom call as the
    model wrote it, function calls under the names the model called them by)."""
    thinking, text = split_reasoning(out.text)
    custom = [custom_call_text(c.name, c.arguments) for c in out.tool_calls if c.custom]
    msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(t for t in (text, *custom) if t)}
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.loads(c.arguments)}}
             for c in out.tool_calls if not c.custom]
    if calls:
        msg["tool_calls"] = calls
    if thinking:
        msg["reasoning_content"] = thinking
    return msg


def after_previous(req: Request, store: ResponseStore) -> Request:
    """`req` after the stored conversation its previous_response_id names (404 if none)."""
    call: ResponsesCall = req.reply
    if call.previous_response_id is None:
        return req
    stored = store.get(call.previous_response_id)
    if stored is None:
        raise errors.not_found(f"no stored response {call.previous_response_id!r} (never stored with store: true, "
                               "deleted, or dropped as the oldest)", "previous_response_id", "previous_response_not_found")
    return with_previous(req, stored.messages)


def protocol(store: ResponseStore) -> WireProtocol:
    """The Responses API over `store`: stored responses are read when a request names one
    and written when a response with store: true finishes."""

    def parse(body: dict[str, Any]) -> Request:
        return after_previous(parse_responses(body), store)

    def keep(ids: Ids, req: Request, obj: dict[str, Any], out: Outcome) -> None:
        call: ResponsesCall = req.reply
        if call.store:
            said = req.messages[1:] if call.instructions else req.messages
            store.put(ids.id, Stored(obj, (*said, _assistant_turn(out))))

    def whole(ids: Ids, req: Request, out: Outcome) -> dict[str, Any]:
        items = OutputItems(req.reply)  # the stream's steps, their events unsent
        thinking, text = split_reasoning(out.text)
        for kind, piece in (("thinking", thinking), ("text", text)):
            if piece:
                list(items.text(kind, piece))
        for call in out.tool_calls:
            list(items.tool_call(call))
        list(items.finish())
        obj = response_object(ids, req, status_of(out), items.items, out)
        keep(ids, req, obj, out)
        return obj

    async def events(ids: Ids, req: Request, queue: Queue) -> AsyncIterator[bytes]:
        items = OutputItems(req.reply)
        started = response_object(ids, req, "in_progress", [])
        yield items.event("response.created", response=started)
        yield items.event("response.in_progress", response=started)
        reasoning = ReasoningStream(True)
        async for item in pushes(queue, keepalive=True):
            if item is None:  # a long prefill: the client sees the response still in progress
                yield items.event("response.in_progress", response=started)
            elif isinstance(item, ApiError):
                failed = response_object(ids, req, "failed", items.items,
                                         error={"code": item.code or item.kind.name, "message": item.message})
                yield items.event("response.failed", response=failed)
            else:
                for data in content_frames(item, reasoning, items):
                    yield data
                if isinstance(item, Outcome):
                    for data in items.finish():
                        yield data
                    status = status_of(item)
                    obj = response_object(ids, req, status, items.items, item)
                    keep(ids, req, obj, item)
                    yield items.event(f"response.{status}", response=obj)

    def count(body: dict[str, Any]) -> Request:
        return after_previous(parse_responses(body, count_only=True), store)

    return WireProtocol("responses", "resp_", "/v1/responses", parse, whole, events, count_path="/v1/responses/input_tokens",
                        count=count, count_reply=input_tokens_reply)


def input_tokens_reply(n_tokens: int) -> dict[str, Any]:
    return {"object": "response.input_tokens", "input_tokens": n_tokens}


