"""Server-sent events: the two framings (OpenAI's and llama-server's bare `data:` lines,
Anthropic's and the Responses API's named events) and the one pump every stream reads a
job's pushes through."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from specli.serve.outcome import Delta, Pushed
from specli.serve.protocols.base import Queue

# with keep-alives, something is sent after this many seconds of silence (a long prefill),
# so that clients and proxies see a live stream
KEEPALIVE_S = 10.0
DONE = b"data: [DONE]\n\n"  # OpenAI's end of a stream


def data(obj: Any) -> bytes:
    """`obj` as one unnamed event: compact JSON, UTF-8 left as it is."""
    return b"data: " + _json(obj) + b"\n\n"


def named(obj: dict[str, Any]) -> bytes:
    """One event named by its `type`, the object as data."""
    return f"event: {obj['type']}\ndata: ".encode() + _json(obj) + b"\n\n"


def _json(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


async def pushes(queue: Queue, keepalive: bool = False) -> AsyncIterator[Pushed | None]:
    """A job's pushes in order, the last its Outcome or ApiError; with `keepalive`, None
    after each KEEPALIVE_S seconds of silence (the protocol sends its keep-alive then)."""
    while True:
        if keepalive:
            try:
                item = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except asyncio.TimeoutError:
                yield None
                continue
        else:
            item = await queue.get()
        yield item
        if not isinstance(item, Delta):
            return
