"""The route table (Starlette): every protocol package's routes, one line each, beside the
protocol-free ones (/v1/models, /health, /metrics, the web page), and the error handlers
that answer in the shape of the protocol a path belongs to. What the routes share (the
worker, the counters, the configuration) rides on the app as `app.state.served`.

A new protocol: a package under serve/protocols/ declaring its `WireProtocol`, and one
line in `_routes`.

Around the routes, `security.SecurityMiddleware` refuses foreign Hosts and Origins and
bodies that are not JSON, and answers CORS preflights, with `config.security`."""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from specli.runtime.kv.prompt_cache import default_dir
from specli.serve import errors, generation, web
from specli.serve.errors import ApiError
from specli.serve.protocols import anthropic_messages, llama_server, openai_completions, openai_responses
from specli.serve.protocols.base import ErrorReply
from specli.serve.security import SecurityMiddleware
from specli.serve.served import AppConfig, Served, authorize, served_of
from specli.serve.stats import ServerMetrics
from specli.serve.worker import Worker

__all__ = ["AppConfig", "create_app"]


def create_app(worker: Worker, stats: ServerMetrics, config: AppConfig) -> Starlette:
    cache = worker.cache_options
    folder = (cache.dir or default_dir()) / "responses" if cache is not None and cache.disk else None
    routes = _routes(openai_responses.ResponseStore(folder))
    guard = Middleware(SecurityMiddleware, policy=config.security, routes=routes, refuse=error_response)
    app = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS, middleware=[guard])
    names = frozenset({config.model_id, *config.aliases, *config.listed})
    app.state.served = Served(worker, stats, config, names)
    return app


def _routes(store: openai_responses.ResponseStore) -> list[BaseRoute]:
    return [
        *generation.routes(openai_completions.CHAT),
        *generation.routes(openai_completions.COMPLETIONS),
        *generation.routes(anthropic_messages.MESSAGES),
        *generation.routes(openai_responses.protocol(store)), *openai_responses.store_routes(store),
        *generation.routes(llama_server.INFILL), *llama_server.ROUTES,
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        *web.ROUTES,
    ]


async def models(request: HttpRequest) -> Response:
    """GET /v1/models: the one model served, under its id and any --alias; in Anthropic's
    shape when asked with an anthropic-version header."""
    config = served_of(request).config
    names = [config.model_id, *config.listed]
    if "anthropic-version" in request.headers:
        return JSONResponse(anthropic_messages.models_list(names, config.created))
    return JSONResponse(openai_completions.models_list(names, config.created))


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
                                   slots=(worker.parallel, slots), online=worker.online)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


# -- errors -------------------------------------------------------------------------


def error_response(e: ApiError, path: str = "", headers: dict[str, str] | None = None) -> JSONResponse:
    reply = error_shape(path)(e)
    return JSONResponse(reply.body, status_code=reply.status, headers={**(reply.headers or {}), **(headers or {})})


def error_shape(path: str) -> Callable[[ApiError], ErrorReply]:
    """The shape of errors on `path`: its protocol's (Messages under /v1/messages, also for
    its unknown sub-routes), else OpenAI's."""
    messages = anthropic_messages.MESSAGES
    return messages.error if path.startswith(messages.path) else openai_completions.CHAT.error


async def on_api_error(request: HttpRequest, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc, request.url.path)


async def on_http_error(request: HttpRequest, exc: Exception) -> Response:
    """The router's 404 and 405 (with its Allow header) in the API's shape."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    return error_response(errors.routing(exc.status_code, request.method, path), path, dict(exc.headers or {}))


async def on_error(request: HttpRequest, exc: Exception) -> Response:
    return error_response(errors.internal(exc), request.url.path)


EXCEPTION_HANDLERS = {ApiError: on_api_error, HTTPException: on_http_error, Exception: on_error}
