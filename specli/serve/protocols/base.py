"""The contract every protocol package declares (`WireProtocol`): how its body becomes the
one internal `Request`, how a finished job becomes its whole answer, how a job's pushes
become its stream's frames, and the shape of its errors. The worker, slots, rendering,
prompt cache and engine know nothing of protocols."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from specli.serve.errors import ApiError
from specli.serve.outcome import Outcome, Pushed
from specli.serve.request import Request

Queue = asyncio.Queue[Pushed]


@dataclass(frozen=True)
class Ids:
    """What every object of one answer shares."""

    id: str
    created: int
    model: str
    fingerprint: str
    n_prompt: int = 0  # the prompt's tokens


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
class WireProtocol:
    """One protocol as the route table serves it: POST `path` generates (whole or
    streamed), POST `count_path` answers the prompt's token count."""

    endpoint: str  # the name in logs and /metrics
    id_prefix: str  # of the answer's id
    path: str
    parse: Callable[[dict[str, Any]], Request]
    whole: Callable[[Ids, Request, Outcome], dict[str, Any]]
    events: Callable[[Ids, Request, Queue], AsyncIterator[bytes]]
    error: Callable[[ApiError], ErrorReply] = openai_error
    count_path: str | None = None
    count: Callable[[dict[str, Any]], Request] | None = None  # a count request's body checked
    count_reply: Callable[[int], dict[str, Any]] | None = None
