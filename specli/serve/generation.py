"""The routes that generate, for any protocol: a body checked by the protocol, turned into
a job for the worker, and what the job pushes translated back by the protocol into one
JSON answer or its server-sent events; and the token-count route. A client that hangs up
cancels its job."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable

import anyio
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from specli.serve import errors
from specli.serve.jobs import Job
from specli.serve.outcome import Outcome, Pushed
from specli.serve.protocols.base import Ids, WireProtocol
from specli.serve.rendering import request_tokens
from specli.serve.served import Served, authorize, read_json, served_of
from specli.serve.worker import Worker


def routes(proto: WireProtocol) -> list[Route]:
    """`proto`'s generation route, and its token-count route if it has one."""

    async def generate(request: HttpRequest) -> Response:
        return await answer(request, proto)

    generate.__doc__ = f"POST {proto.path}"
    out = [Route(proto.path, generate, methods=["POST"])]
    if proto.count_path is not None:

        async def count(request: HttpRequest) -> Response:
            return await count_tokens(request, proto)

        count.__doc__ = f"POST {proto.count_path}: the prompt's tokens as {proto.path} renders it"
        out.append(Route(proto.count_path, count, methods=["POST"]))
    return out


async def answer(request: HttpRequest, proto: WireProtocol) -> Response:
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
        check_model(served, req.model)
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


async def count_tokens(request: HttpRequest, proto: WireProtocol) -> Response:
    """The prompt's tokens as `proto`'s generation route would render it."""
    assert proto.count is not None and proto.count_reply is not None
    served = served_of(request)
    authorize(request, served.config.api_key)
    req = proto.count(await read_json(request, served.config.max_body))
    check_model(served, req.model)
    rt = served.worker.ready_runtime()
    prompt = await anyio.to_thread.run_sync(request_tokens, rt, req, served.worker.settings)
    return JSONResponse(proto.count_reply(len(prompt)))


def check_model(served: Served, model: str | None) -> None:
    """With --strict-model, 404 for a name this server does not answer to."""
    if served.config.strict_model and model is not None and model not in served.names:
        raise errors.unknown_model(model, served.config.model_id)


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
        while not isinstance(last := await queue.get(), (Outcome, errors.ApiError)):
            pass
        tg.cancel_scope.cancel()
    if isinstance(last, Outcome):
        return last
    raise last if isinstance(last, errors.ApiError) else errors.client_gone()


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
