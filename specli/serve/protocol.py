"""What a protocol module gives the routes: how its body becomes the one internal
`Request`, how a finished job becomes its whole answer, how a job's pushes become its
stream's frames, and the shape of its errors. The worker, slots, prompt cache and engine
know nothing of protocols."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from specli.serve.errors import ApiError
from specli.serve.requests import Request
from specli.serve.responses import Ids, Outcome
from specli.serve.worker import Pushed

Queue = asyncio.Queue[Pushed]


@dataclass(frozen=True)
class ErrorReply:
    """An error as one protocol answers it."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] | None = None


def openai_error(e: ApiError) -> ErrorReply:
    """OpenAI's (and llama-server's) `{"error": {message, type, param, code}}`."""
    return ErrorReply(e.status, e.body(), e.headers())


@dataclass(frozen=True)
class Protocol:
    endpoint: str  # the name in logs and /metrics
    id_prefix: str  # of the answer's id
    parse: Callable[[dict[str, Any]], Request]
    whole: Callable[[Ids, Request, Outcome], dict[str, Any]]
    events: Callable[[Ids, Request, Queue], AsyncIterator[bytes]]
    error: Callable[[ApiError], ErrorReply] = openai_error


def frame(obj: dict[str, Any]) -> bytes:
    """One event: its type as the event name, the object as data."""
    return f"event: {obj['type']}\ndata: ".encode() + json.dumps(obj, ensure_ascii=False,
                                                                   separators=(",", ":")).encode() + b"\n\n"
