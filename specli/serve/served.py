"""What every route handler shares: the server's configuration, the worker and counters
on the app (`served`), the key check and the body reader (a JSON object, or a 400 that
says why not)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request as HttpRequest

from specli.serve import DEFAULT_MAX_BODY_MIB, errors
from specli.serve.errors import invalid, kind_of
from specli.serve.security import Policy
from specli.serve.stats import ServerMetrics
from specli.serve.worker import Worker

# a body up to this many times the cap is read to its end before the 413: a server that
# answers mid-upload resets the connection before the client can read the answer
DRAIN_FACTOR = 8


@dataclass
class AppConfig:
    model_id: str
    aliases: frozenset[str] = frozenset()  # other names of the model's file, accepted as it
    listed: tuple[str, ...] = ()  # --alias: names /v1/models lists besides model_id
    strict_model: bool = False  # a request naming another model gets 404 (else any name is this model)
    api_key: str | None = None
    max_body: int = int(DEFAULT_MAX_BODY_MIB * 2**20)
    created: int = field(default_factory=lambda: int(time.time()))
    fingerprint: str = "specli"
    security: Policy = field(default_factory=Policy)  # Host, Origin and CORS (serve/security.py)


@dataclass(frozen=True)
class Served:
    """What every handler reads: the generation thread, the counters, the configuration."""

    worker: Worker
    stats: ServerMetrics
    config: AppConfig
    names: frozenset[str]  # the names a request may give the model


def served_of(request: HttpRequest) -> Served:
    served: Served = request.app.state.served
    return served


def authorize(request: HttpRequest, api_key: str | None) -> None:
    """401 unless the request carries `api_key` as its bearer token or its x-api-key
    header (Anthropic's); any request passes when the server has no key."""
    if api_key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if not given and "x-api-key" in request.headers:
        scheme, token = "bearer", request.headers["x-api-key"]
    elif not given:
        raise errors.no_api_key()
    # digests of equal length: the comparison takes the same time whatever the key given
    ok = hmac.compare_digest(hashlib.sha256(token.strip().encode()).digest(), hashlib.sha256(api_key.encode()).digest())
    if scheme.lower() != "bearer" or not ok:
        raise errors.wrong_api_key()


async def read_json(request: HttpRequest, cap: int) -> dict[str, Any]:
    """The body as a JSON object; 413 past `cap`, after reading to the end a body up to
    DRAIN_FACTOR times the cap."""
    length = request.headers.get("content-length")
    declared = int(length) if length is not None and length.isdigit() else None
    if declared is not None and declared > DRAIN_FACTOR * cap:
        raise errors.too_large(declared, cap)
    body = bytearray()
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > DRAIN_FACTOR * cap:
            raise errors.too_large(size, cap)
        if size <= cap:
            body += part
    if size > cap:
        raise errors.too_large(size, cap)
    return parse_body(bytes(body))


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object in `raw`: 400 for invalid UTF-8, malformed JSON or not an object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise invalid(None, f"the request body is not valid UTF-8 (byte {e.start})", "invalid_encoding") from None
    try:
        body = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise invalid(None, f"the request body is not valid JSON ({e})", "invalid_json") from None
    if not isinstance(body, dict):
        raise invalid(None, f"the request body must be a JSON object, got {kind_of(body)}", "invalid_json")
    if (where := _lone_surrogate(body, "")) is not None:
        raise invalid(where or None, f"{where or 'a key'} holds a lone UTF-16 surrogate (\\ud800-\\udfff escape "
                                     "without its pair), which is not text", "invalid_encoding")
    return body


def _lone_surrogate(value: Any, where: str) -> str | None:
    """The path of the first string holding a lone surrogate (JSON allows the escape;
    UTF-8 has no such character), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, v in items:
        if isinstance(key, str) and _lone_surrogate(key, where) is not None:
            return where
        path = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
        if (found := _lone_surrogate(v, path)) is not None:
            return found
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
