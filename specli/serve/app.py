"""The HTTP routes (Starlette): they check the key and the body, turn a request into a
job for the generation thread, and translate what the job pushes into a JSON response or
server-sent events. They never touch llama.cpp or the engine's state themselves."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from specli.serve import DEFAULT_MAX_BODY_MIB, schema
from specli.serve.metrics import ServerMetrics
from specli.serve.schema import ApiError, Ids, Outcome
from specli.serve.worker import Delta, Job, Worker, prompt_tokens

DRAIN_FACTOR = 8


@dataclass
class AppConfig:
    model_id: str
    aliases: frozenset[str] = frozenset()
    api_key: str | None = None
    max_body: int = int(DEFAULT_MAX_BODY_MIB * 2**20)
    created: int = field(default_factory=lambda: int(time.time()))
    fingerprint: str = "specli"


def error_response(e: ApiError) -> JSONResponse:
    headers = {"Retry-After": str(e.retry_after)} if e.retry_after is not None else None
    if e.status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


def create_app(worker: Worker, stats: ServerMetrics, config: AppConfig) -> Starlette:
    names = {config.model_id, *config.aliases}

    def authorize(request: HttpRequest) -> None:
        if config.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if not given:
            raise ApiError(401, "no API key given: send the header Authorization: Bearer KEY", None,
                           "missing_api_key")
        # digests of equal length: the comparison takes the same time whatever the key given
        ok = hmac.compare_digest(hashlib.sha256(token.strip().encode()).digest(),
                                 hashlib.sha256(config.api_key.encode()).digest())
        if scheme.lower() != "bearer" or not ok:
            raise ApiError(401, "incorrect API key", None, "invalid_api_key")

    async def read_json(request: HttpRequest) -> dict[str, Any]:
        """The body as a JSON object; 413 past the cap. A body up to DRAIN_FACTOR times the
        cap is read to its end first, so that the client can read the answer (a server that
        answers mid-upload resets the connection under the client's feet)."""
        length = request.headers.get("content-length")
        declared = int(length) if length is not None and length.isdigit() else None
        if declared is not None and declared > DRAIN_FACTOR * config.max_body:
            raise _too_large(declared, config.max_body)
        body = bytearray()
        size = 0
        async for part in request.stream():
            size += len(part)
            if size > DRAIN_FACTOR * config.max_body:
                raise _too_large(size, config.max_body)
            if size <= config.max_body:
                body += part
        if size > config.max_body:
            raise _too_large(size, config.max_body)
        return schema.parse_body(bytes(body))

    async def generation(request: HttpRequest, kind: Literal["chat", "completion"]) -> Response:
        authorize(request)
        req = schema.parse_request(await read_json(request), kind)
        if req.model is not None and req.model not in names:
            raise ApiError(404, f"the model {req.model!r} does not exist here: this server serves "
                                f"{config.model_id!r} (GET /v1/models)", "model", "model_not_found")
        rt = worker.ready_runtime()
        prompt = await anyio.to_thread.run_sync(prompt_tokens, rt, req, worker.settings)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Delta | Outcome | ApiError] = asyncio.Queue()

        def push(item: Delta | Outcome | ApiError) -> None:  # from the generation thread
            loop.call_soon_threadsafe(queue.put_nowait, item)

        job = worker.new_job(req, prompt, push)
        worker.submit(job)
        ids = Ids(("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24], int(time.time()),
                  config.model_id, config.fingerprint)
        if req.stream:
            return EventStream(worker, job, lambda: _events(ids, req, queue))
        outcome = await _until_done(request, worker, job, queue)
        build = schema.chat_response if kind == "chat" else schema.completion_response
        return JSONResponse(build(ids, outcome))

    async def chat(request: HttpRequest) -> Response:
        return await generation(request, "chat")

    async def completions(request: HttpRequest) -> Response:
        return await generation(request, "completion")

    async def models(request: HttpRequest) -> Response:
        return JSONResponse(schema.models_list(config.model_id, config.created))

    async def health(request: HttpRequest) -> Response:
        if worker.state == "ready":
            return JSONResponse({"status": "ok"})
        return error_response(ApiError(503, {"loading": "Loading model", "stopping": "Shutting down",
                                             "failed": "The model failed to load"}[worker.state], None,
                                       "unavailable"))

    async def prometheus(request: HttpRequest) -> Response:
        authorize(request)
        text = stats.prometheus(running=int(worker.running is not None), waiting=worker.n_waiting)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def on_api_error(request: HttpRequest, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc)

    async def on_http_error(request: HttpRequest, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            return error_response(ApiError(405, f"{request.method} is not allowed on {request.url.path}", None,
                                           "method_not_allowed"))
        return error_response(ApiError(exc.status_code, f"no route {request.method} {request.url.path} "
                                                        "(see GET /v1/models)", None, "not_found"))

    async def on_error(request: HttpRequest, exc: Exception) -> Response:
        return error_response(ApiError(500, f"internal error: {type(exc).__name__}: {exc}", None, "internal_error"))

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={ApiError: on_api_error, HTTPException: on_http_error,
                                                        Exception: on_error})


def _too_large(size: int, cap: int) -> ApiError:
    return ApiError(413, f"the request body is {size} bytes or more; this server takes at most {cap} "
                         "(start it with a larger --max-body)", None, "request_too_large")


async def _watch_disconnect(receive: Receive, on_gone: Callable[[], None]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    on_gone()


async def _until_done(request: HttpRequest, worker: Worker, job: Job,
                      queue: asyncio.Queue[Delta | Outcome | ApiError]) -> Outcome:
    """The job's outcome; a client that hangs up meanwhile cancels the job."""
    last: Delta | Outcome | ApiError | None = None
    async with anyio.create_task_group() as tg:

        def gone() -> None:
            worker.cancel(job)
            tg.cancel_scope.cancel()

        tg.start_soon(_watch_disconnect, request.receive, gone)
        while not isinstance(last := await queue.get(), (Outcome, ApiError)):
            pass
        tg.cancel_scope.cancel()
    if isinstance(last, Outcome):
        return last
    raise last if isinstance(last, ApiError) else ApiError(499, "the client closed the connection", None, "client_gone")


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def _events(ids: Ids, req: schema.Request, queue: asyncio.Queue[Delta | Outcome | ApiError]) -> AsyncIterator[bytes]:
    """The job's pushes as OpenAI chunks: text deltas (the first with the role), a last
    chunk with the finish reason and figures, the usage chunk if asked, then [DONE]. An
    error after the stream began is an `error` event."""
    first = True
    while True:
        item = await queue.get()
        if isinstance(item, ApiError):
            yield _sse(item.body())
            break
        if isinstance(item, Delta):
            yield _sse(schema.chunk(ids, req.kind, item.text if item.text or not item.calls else None, first=first,
                                    include_usage=req.include_usage, calls=item.calls))
            first = False
            continue
        if first and req.kind == "chat":
            yield _sse(schema.chunk(ids, req.kind, "", first=True, include_usage=req.include_usage))
        yield _sse(schema.chunk(ids, req.kind, None, out=item, include_usage=req.include_usage))
        if req.include_usage:
            yield _sse(schema.usage_chunk(ids, req.kind, item))
        break
    yield b"data: [DONE]\n\n"


class EventStream(Response):
    """Server-sent events from a job. A client that hangs up (seen by a receive watcher,
    or as a failed send) cancels the job: the generation stops at its next step."""

    media_type = "text/event-stream"

    def __init__(self, worker: Worker, job: Job, events: Callable[[], AsyncIterator[bytes]]) -> None:
        self.status_code = 200
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no")]
        self.background = None
        self.worker, self.job, self.events = worker, job, events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        done = False
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async with anyio.create_task_group() as tg:
                tg.start_soon(_watch_disconnect, receive, tg.cancel_scope.cancel)
                done = await self._pump(send)
                tg.cancel_scope.cancel()
        except OSError:  # the client went away before the first byte
            pass
        finally:
            if not done:
                self.worker.cancel(self.job)

    async def _pump(self, send: Send) -> bool:
        """Send every event; False if the client went away first."""
        try:
            async for data in self.events():
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            return False
        return True
