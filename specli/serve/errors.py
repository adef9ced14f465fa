"""The errors a client gets, in one place (llama-server's `format_error_response` shape):
each constructor names its kind of error, the kind carries the HTTP status and the
body's `type`, and each message is written here once. The body is OpenAI's
`{"error": {message, type, param, code}}`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specli.errors import BackendError, ContextError, RpcError, SpecliError, UsageError


@dataclass(frozen=True)
class ErrorType:
    """A kind of error: its HTTP status and the body's `type` (llama-server's, OpenAI's
    where it has one)."""

    status: int
    name: str


INVALID_REQUEST = ErrorType(400, "invalid_request_error")
AUTHENTICATION = ErrorType(401, "authentication_error")
FORBIDDEN = ErrorType(403, "permission_error")  # a Host or Origin this server does not serve
NOT_FOUND = ErrorType(404, "not_found_error")
NOT_ALLOWED = ErrorType(405, "invalid_request_error")
TOO_LARGE = ErrorType(413, "invalid_request_error")
UNSUPPORTED_MEDIA = ErrorType(415, "invalid_request_error")
CLIENT_GONE = ErrorType(499, "server_error")  # nginx's "client closed request": seen only in the log and /metrics
SERVER = ErrorType(500, "server_error")
UNAVAILABLE = ErrorType(503, "unavailable_error")

# why a request cannot be served now (a 503), and /health's own words for it (llama-server's)
_NOT_READY = {"loading": "the model is still loading", "stopping": "the server is shutting down",
              "failed": "the model failed to load"}
_HEALTH = {"loading": "Loading model", "stopping": "Shutting down", "failed": "The model failed to load"}
LOADING_RETRY_S = 5  # Retry-After while the model loads: short, so clients poll rather than give up


class ApiError(Exception):
    """An error a client gets: its type (hence its status), a message naming the problem
    and the fix, the parameter at fault, a machine-readable code; `retry_after` seconds
    for a 503."""

    def __init__(self, kind: ErrorType, message: str, param: str | None = None, code: str | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.param, self.code = kind, message, param, code
        self.retry_after = retry_after

    @property
    def status(self) -> int:
        return self.kind.status

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind.name, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str] | None:
        """WWW-Authenticate on a 401, Retry-After where the client may retry."""
        if self.kind is AUTHENTICATION:
            return {"WWW-Authenticate": "Bearer"}
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None


# -- 400 ------------------------------------------------------------------------------


def invalid(param: str | None, message: str, code: str = "invalid_value") -> ApiError:
    """A request the server will not take as it is: `param` names what to change."""
    return ApiError(INVALID_REQUEST, message, param, code)


def context_exceeded(message: str, param: str | None = None) -> ApiError:
    return ApiError(INVALID_REQUEST, message, param, "context_length_exceeded")


def prompt_too_long(n_prompt: int, n_ctx: int, param: str) -> ApiError:
    return context_exceeded(f"{param}: the prompt is {n_prompt} tokens but the context holds {n_ctx} "
                            f"(shorten {param}, or start the server with a larger --ctx)", param)


# -- 401, 403, 404, 405, 413, 415, 499 ---------------------------------------------------------


def no_api_key() -> ApiError:
    return ApiError(AUTHENTICATION, "no API key given: send the header Authorization: Bearer KEY (or x-api-key: KEY)", None,
                    "missing_api_key")


def wrong_api_key() -> ApiError:
    return ApiError(AUTHENTICATION, "incorrect API key", None, "invalid_api_key")


def foreign_host(host: str, names: list[str]) -> ApiError:
    """A Host header that is none of the server's names: a page on a rebound domain."""
    return ApiError(FORBIDDEN, f"the Host {host!r} is not a name of this server ({', '.join(names)}): a web page on "
                               f"another domain may be rebinding it to this address. If you reach the server by this "
                               f"name, start it with --allowed-hosts {host}", None, "host_not_allowed")


def foreign_origin(origin: str, local: bool) -> ApiError:
    """A browser request from a page of another origin that --cors-origins does not allow
    (`local`: a page on this machine, on another port)."""
    every = " (or --cors-origins localhost for every page on this machine)" if local else ""
    return ApiError(FORBIDDEN, f"requests from web pages of the origin {origin!r} are not allowed here; start the "
                               f"server with --cors-origins {origin} to allow them{every}", None, "origin_not_allowed")


def not_json(given: str | None) -> ApiError:
    """A body that is not declared JSON: a form or a text/plain fetch, which browsers send
    from any page without asking the server first."""
    what = f"Content-Type {given!r}" if given else "no Content-Type"
    return ApiError(UNSUPPORTED_MEDIA, f"the request has {what}; send the JSON body with the header Content-Type: "
                                       "application/json (curl: -H 'Content-Type: application/json')", None,
                    "unsupported_media_type")


def unknown_model(model: str, served: str) -> ApiError:
    return ApiError(NOT_FOUND, f"the model {model!r} does not exist here: this server serves {served!r} "
                               "(GET /v1/models)", "model", "model_not_found")


def routing(status: int, method: str, path: str) -> ApiError:
    """The router's own refusals: 405 for a known path with the wrong method, else 404."""
    if status == NOT_ALLOWED.status:
        return ApiError(NOT_ALLOWED, f"{method} is not allowed on {path}", None, "method_not_allowed")
    return ApiError(NOT_FOUND, f"no route {method} {path} (see GET /v1/models)", None, "not_found")


def not_found(message: str, param: str | None = None, code: str = "not_found") -> ApiError:
    return ApiError(NOT_FOUND, message, param, code)


def too_large(size: int, cap: int) -> ApiError:
    return ApiError(TOO_LARGE, f"the request body is {size} bytes or more; this server takes at most {cap} "
                               "(start it with a larger --max-body)", None, "request_too_large")


def client_gone() -> ApiError:
    return ApiError(CLIENT_GONE, "the client closed the connection", None, "client_gone")


# -- 500, 503 -------------------------------------------------------------------------


def internal(e: BaseException) -> ApiError:
    """An exception nothing expected: one request fails, the server goes on."""
    return ApiError(SERVER, f"internal error: {describe(e)}", None, "internal_error")


def describe(e: BaseException) -> str:
    """An unexpected exception in one line, for the message and the log."""
    return f"{type(e).__name__}: {e}"


def unavailable(state: str) -> ApiError:
    """No model to serve with: still loading (retry in a few seconds), shutting down, failed."""
    return ApiError(UNAVAILABLE, f"{_NOT_READY[state]}; try again shortly", None, "unavailable",
                    retry_after=LOADING_RETRY_S if state == "loading" else None)


def health(state: str) -> ApiError:
    """/health's 503 while the model is not ready."""
    return ApiError(UNAVAILABLE, _HEALTH[state], None, "unavailable")


def shutting_down() -> ApiError:
    """To a job still waiting when the server stops."""
    return ApiError(UNAVAILABLE, _NOT_READY["stopping"], None, "shutting_down")


def busy(n_waiting: int, queue_max: int, retry_after: int) -> ApiError:
    return ApiError(UNAVAILABLE, f"the server is busy: {n_waiting} requests are waiting (at most {queue_max}); "
                                 "retry later", None, "queue_full", retry_after=retry_after)


def from_specli(e: SpecliError) -> ApiError:
    """An engine or model error as the client's error."""
    if isinstance(e, ContextError):
        return context_exceeded(e.one_line())
    if isinstance(e, UsageError):
        return invalid(None, e.one_line())
    if isinstance(e, RpcError):
        return ApiError(UNAVAILABLE, e.one_line(), None, "rpc_server_lost")
    if isinstance(e, BackendError):
        return ApiError(SERVER, e.one_line(), None, "backend_error")
    return ApiError(SERVER, e.one_line(), None, "internal_error")


def kind_of(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null", int: "a number", float: "a number"}.get(type(value), type(value).__name__)
