"""The HTTP routes (Starlette): they check the key and the body, turn a request into a
job for the generation thread, and translate what the job pushes into a JSON response or
server-sent events. They never touch llama.cpp or the engine's state themselves.

Each route is a handler function below, all listed in `ROUTES`; what they share (the
worker, the counters, the configuration) rides on the app as `app.state.served`."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from specli.runtime.prompt_cache import default_dir
from specli.serve import errors, llama_routes, messages, responses, responses_api, web
from specli.serve.context import AppConfig, Served, authorize, read_json, served_of
from specli.serve.errors import ApiError
from specli.serve.infill import INFILL
from specli.serve.messages_request import parse_messages
from specli.serve.metrics import ServerMetrics
from specli.serve.openai_chat import CHAT, COMPLETIONS
from specli.serve.prompts import request_tokens
from specli.serve.protocol import ErrorReply, Protocol
from specli.serve.response_store import ResponseStore
from specli.serve.responses import Ids, Outcome
from specli.serve.responses_api_request import parse_responses
from specli.serve.worker import Job, Pushed, Worker

__all__ = ["AppConfig", "create_app"]


def create_app(worker: Worker, stats: ServerMetrics, config: AppConfig) -> Starlette:
    app = Starlette(routes=ROUTES, exception_handlers=EXCEPTION_HANDLERS)
    names = frozenset({config.model_id, *config.aliases, *config.listed})
    cache = worker.cache_options
    folder = (cache.dir or default_dir()) / "responses" if cache is not None and cache.disk else None
    store = ResponseStore(folder)
    app.state.served = Served(worker, stats, config, names, responses_api.make_protocol(store), store)
    return app


# -- the routes ---------------------------------------------------------------------


async def chat(request: HttpRequest) -> Response:
    """POST /v1/chat/completions"""
    return await _generation(request, CHAT)


async def completions(request: HttpRequest) -> Response:
    """POST /v1/completions"""
    return await _generation(request, COMPLETIONS)


async def infill(request: HttpRequest) -> Response:
    """POST /infill (llama-server's fill-in-the-middle)"""
    return await _generation(request, INFILL)


async def anthropic_messages(request: HttpRequest) -> Response:
    """POST /v1/messages (Anthropic Messages)"""
    return await _generation(request, messages.MESSAGES)


async def count_tokens(request: HttpRequest) -> Response:
    """POST /v1/messages/count_tokens: the prompt's tokens as the Messages route renders it."""
    served = served_of(request)
    authorize(request, served.config.api_key)
    req = parse_messages(await read_json(request, served.config.max_body), count_only=True)
    _check_model(served, req.model)
    rt = served.worker.ready_runtime()
    prompt = await anyio.to_thread.run_sync(request_tokens, rt, req, served.worker.settings)
    return JSONResponse(messages.count_tokens_reply(len(prompt)))


async def models(request: HttpRequest) -> Response:
    """GET /v1/models: the one model served, under its id and any --alias; in Anthropic's
    shape when asked with an anthropic-version header."""
    config = served_of(request).config
    names = [config.model_id, *config.listed]
    if "anthropic-version" in request.headers:
        return JSONResponse(messages.models_list(names, config.created))
    return JSONResponse(responses.models_list(names, config.created))


async def health(request: HttpRequest) -> Response:
    """GET /health: 200 once the model is loaded and warm, 503 before and while stopping."""
    worker = served_of(request).worker
    if worker.state == "ready":  # llama-server's fields
        busy = worker.n_running
        return JSONResponse({"status": "ok", "slots_idle": worker.parallel - busy, "slots_processing": busy,
                             "requests_waiting": worker.n_waiting})
    return error_response(errors.health(worker.state))


async def prometheus(request: HttpRequest) -> Response:
    """GET /metrics: the counters as Prometheus text."""
    served = served_of(request)
    authorize(request, served.config.api_key)
    worker = served.worker
    cache = worker.cache.stats if worker.cache is not None else None
    slots = worker.slots.stats if worker.slots is not None else None
    text = served.stats.prometheus(running=worker.n_running, waiting=worker.n_waiting, cache=cache,
                                   slots=(worker.parallel, slots))
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


async def responses_create(request: HttpRequest) -> Response:
    """POST /v1/responses (OpenAI Responses)"""
    return await _generation(request, served_of(request).responses)


async def responses_input_tokens(request: HttpRequest) -> Response:
    """POST /v1/responses/input_tokens: the prompt's tokens as /v1/responses renders it."""
    served = served_of(request)
    authorize(request, served.config.api_key)
    req = parse_responses(await read_json(request, served.config.max_body), count_only=True)
    req = responses_api.after_previous(req, served.store)
    rt = served.worker.ready_runtime()
    prompt = await anyio.to_thread.run_sync(request_tokens, rt, req, served.worker.settings)
    return JSONResponse(responses_api.input_tokens_reply(len(prompt)))


async def stored_response(request: HttpRequest) -> Response:
    """GET and DELETE /v1/responses/{id}: a stored response (404 if not stored)."""
    served = served_of(request)
    authorize(request, served.config.api_key)
    rid = request.path_params["rid"]
    store = served.store
    if request.method == "DELETE":
        if not store.delete(rid):
            raise errors.not_found(f"no stored response {rid!r}")
        return JSONResponse(responses_api.deleted_reply(rid))
    stored = store.get(rid)
    if stored is None:
        raise errors.not_found(f"no stored response {rid!r} (never stored with store: true, deleted, or dropped "
                               "as the oldest)")
    return JSONResponse(stored.response)


ROUTES = [
    Route("/v1/chat/completions", chat, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/infill", infill, methods=["POST"]),
    Route("/v1/messages", anthropic_messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
    Route("/v1/responses", responses_create, methods=["POST"]),
    Route("/v1/responses/input_tokens", responses_input_tokens, methods=["POST"]),
    Route("/v1/responses/{rid}", stored_response, methods=["GET", "DELETE"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/health", health, methods=["GET"]),
    Route("/metrics", prometheus, methods=["GET"]),
    *llama_routes.ROUTES,
    *web.ROUTES,
]


async def _generation(request: HttpRequest, proto: Protocol) -> Response:
    """A request in `proto`'s shape checked, queued as a job, and answered as one JSON
    object or as that protocol's server-sent events."""
    served = served_of(request)
    worker, config = served.worker, served.config
    authorize(request, config.api_key)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Pushed] = asyncio.Queue()

    def push(item: Pushed) -> None:  # from the generation thread
        loop.call_soon_threadsafe(queue.put_nowait, item)

    with worker.arriving():
        req = proto.parse(await read_json(request, config.max_body))
        _check_model(served, req.model)
        rt = worker.ready_runtime()
        prompt = await anyio.to_thread.run_sync(request_tokens, rt, req, worker.settings)
        job = worker.new_job(req, prompt, push)
        worker.submit(job)
    # the name the client asked for: agents name models this server never heard of
    ids = Ids(proto.id_prefix + uuid.uuid4().hex[:24], int(time.time()), req.model or config.model_id,
              config.fingerprint, len(prompt))
    if req.stream:
        return EventStream(worker, job, lambda: proto.events(ids, req, queue))
    outcome = await _until_done(request, worker, job, queue)
    return JSONResponse(proto.whole(ids, req, outcome))


def _check_model(served: Served, model: str | None) -> None:
    """With --strict-model, 404 for a name this server does not answer to."""
    if served.config.strict_model and model is not None and model not in served.names:
        raise errors.unknown_model(model, served.config.model_id)


# -- errors -------------------------------------------------------------------------


def error_response(e: ApiError, path: str = "") -> JSONResponse:
    reply = error_shape(path)(e)
    return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)


def error_shape(path: str) -> Callable[[ApiError], ErrorReply]:
    """The shape of errors on `path`: its protocol's (Messages under /v1/messages, also for
    its unknown sub-routes), else OpenAI's."""
    return messages.MESSAGES.error if path.startswith("/v1/messages") else CHAT.error


async def on_api_error(request: HttpRequest, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc, request.url.path)


async def on_http_error(request: HttpRequest, exc: Exception) -> Response:
    """The router's 404 and 405 in the API's shape."""
    assert isinstance(exc, HTTPException)
    return error_response(errors.routing(exc.status_code, request.method, request.url.path), request.url.path)


async def on_error(request: HttpRequest, exc: Exception) -> Response:
    return error_response(errors.internal(exc), request.url.path)


EXCEPTION_HANDLERS = {ApiError: on_api_error, HTTPException: on_http_error, Exception: on_error}


# -- waiting for a job ------------------------------------------------------------------


async def _watch_disconnect(receive: Receive, on_gone: Callable[[], None]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    on_gone()


async def _until_done(request: HttpRequest, worker: Worker, job: Job, queue: asyncio.Queue[Pushed]) -> Outcome:
    """The job's outcome; a client that hangs up meanwhile cancels the job."""
    last: Pushed | None = None
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
    raise last if isinstance(last, ApiError) else errors.client_gone()


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
