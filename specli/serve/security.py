"""What the web pages its user visits cannot make the server do. Every request meets these
checks before any route runs, in this order (`SecurityMiddleware`):

- Host (`host_allowed`): a page whose domain an attacker rebinds to 127.0.0.1 (DNS
  rebinding) sends its own name as Host; only the server's names pass (localhost,
  127.0.0.1, [::1], the bound --host, --allowed-hosts, the address the connection
  arrived at). Bound to 0.0.0.0 or :: without --allowed-hosts, any Host passes (and
  `exposure_warning` says so at start).
- Origin (`origin_allowed`): a request without Origin is no browser's and passes; with
  one, only the page's own origin (`same_origin`) and those --cors-origins allows.
- CORS: a preflight (OPTIONS with Access-Control-Request-Method) from an allowed origin
  is answered here, without the key (`preflight_headers`); answers to allowed origins
  carry `cors_headers`.
- Bodies (`json_body`): a POST to a route must say Content-Type: application/json, which
  no form and no fetch without a preflight can send; else 415.

The refusals come before any work, in the shape of the route's protocol (the app's
`refuse`). The `Policy` is made once from `specli serve`'s options by `policy`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specli.errors import UsageError
from specli.rpc_endpoints import is_local
from specli.serve import errors
from specli.serve.errors import ApiError

LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")  # always the server's own
ANY_ADDRESS = frozenset({"0.0.0.0", "::", "[::]", ""})  # every interface: no name of its own
ANY = "*"
LOCALHOST = "localhost"  # --cors-origins localhost: pages on this machine, on any port
DEFAULT_PORTS = {"http": 80, "https": 443}
DEFAULT_METHODS = ("GET", "POST", "DELETE", "OPTIONS")
# what the clients send besides simple headers; always allowed to an allowed origin
NEEDED_HEADERS = ("Authorization", "Content-Type", "x-api-key", "anthropic-version")
PREFLIGHT_MAX_AGE_S = 600
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

Refuse = Callable[[ApiError, str], Response]  # an error as the protocol of a path answers it


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str  # lower case; an IPv6 address in brackets, as in a Host header
    port: int


@dataclass(frozen=True)
class Policy:
    """Who may ask: the Host names served (None: any) and the origins allowed besides
    the page's own, with the CORS answers' methods, headers (None: those asked for) and
    credentials."""

    hosts: frozenset[str] | None = frozenset(LOCAL_NAMES)
    origins: frozenset[Origin] = frozenset()
    any_origin: bool = False
    local_origins: bool = False
    methods: tuple[str, ...] = DEFAULT_METHODS
    headers: tuple[str, ...] | None = None
    credentials: bool = False


def split_list(items: Iterable[str]) -> list[str]:
    """Each item split at commas (a flag given once as a list, or repeated), blanks dropped."""
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def policy(bind: str, allowed_hosts: Sequence[str] = (), cors_origins: str | None = None,
           cors_methods: str | None = None, cors_headers: str | None = None, credentials: bool = False) -> Policy:
    """The policy of a server bound to `bind`, from its flags (as llama-server spells
    them: --cors-origins `LIST`, `localhost` or `*`); a malformed origin is a UsageError."""
    hosts = split_list(allowed_hosts)
    names: frozenset[str] | None = None
    if ANY not in hosts and (hosts or bind.strip().lower() not in ANY_ADDRESS):
        own = () if bind.strip().lower() in ANY_ADDRESS else (bind_name(bind),)
        names = frozenset({*LOCAL_NAMES, *own, *(host_name(h) for h in hosts)})
    given = split_list([cors_origins or ""])
    origins = frozenset(_config_origin(o) for o in given if o not in (ANY, LOCALHOST))
    methods = tuple(m.upper() for m in split_list([cors_methods])) if cors_methods else DEFAULT_METHODS
    headers = split_list([cors_headers]) if cors_headers else [ANY]
    return Policy(names, origins, ANY in given, LOCALHOST in given, methods,
                  None if ANY in headers else _unique([*NEEDED_HEADERS, *headers]), credentials)


def _unique(names: list[str]) -> tuple[str, ...]:
    """Header names without repeats, whatever their case (the first spelling kept)."""
    return tuple({n.lower(): n for n in reversed(names)}[k] for k in dict.fromkeys(n.lower() for n in names))


def _config_origin(text: str) -> Origin:
    origin = parse_origin(text)
    if origin is None:
        raise UsageError(f"--cors-origins: {text!r} is not an origin",
                         "give scheme://host[:port] (e.g. http://localhost:3000), localhost or *")
    return origin


# -- Host -----------------------------------------------------------------------------------


def split_host(value: str) -> tuple[str, int | None]:
    """A Host header's name (lower case, no trailing dot, an IPv6 address in brackets) and
    port (None when not given)."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        name, port = name + "]", rest.removeprefix(":")
    else:
        name, colon, port = value.rpartition(":")
        if not colon or not port.isdigit():
            name, port = value, ""
    return name.rstrip("."), int(port) if port.isdigit() else None


def host_name(value: str) -> str:
    """A name as a Host header carries it (an --allowed-hosts entry may have a port)."""
    if value.count(":") > 1 and not value.startswith("["):  # an IPv6 address without brackets
        return bind_name(value)
    return split_host(value)[0]


def bind_name(bind: str) -> str:
    """The Host name of the bound address (`::1` is `[::1]`)."""
    bind = bind.strip().lower().rstrip(".")
    return f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind


def host_allowed(host: str | None, p: Policy, arrived: str | None = None) -> bool:
    """Whether a request with this Host header is served (none: no browser sent it). The
    address the connection `arrived` at is a name of the server too: a page can rebind a
    domain name, never an address."""
    if host is None or p.hosts is None:
        return True
    name = split_host(host)[0]
    return name in p.hosts or (arrived is not None and name == bind_name(arrived))


# -- Origin -----------------------------------------------------------------------------------


def parse_origin(text: str) -> Origin | None:
    """An Origin header's scheme, host and port (a default port filled in); None for
    `null` and anything not http(s)://host[:port]."""
    try:
        parts = urlsplit(text.strip().rstrip("/"))
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path or parts.query or parts.username:
        return None
    host = parts.hostname.lower().rstrip(".")
    return Origin(parts.scheme, f"[{host}]" if ":" in host else host, port or DEFAULT_PORTS[parts.scheme])


def same_origin(origin: Origin, host: str | None) -> bool:
    """Whether a page of `origin` is the server's own page as the browser reached it:
    the Host it sent names the same host and port (a Host without a port: the origin's
    scheme's default, so a TLS proxy in front that passes Host keeps the page working)."""
    if host is None:
        return False
    name, port = split_host(host)
    return origin.host == name and origin.port == (port if port is not None else DEFAULT_PORTS[origin.scheme])


def origin_allowed(value: str, host: str | None, p: Policy) -> bool:
    """Whether a browser request from a page of origin `value` is served."""
    if p.any_origin:
        return True
    origin = parse_origin(value)
    if origin is None:  # "null": sandboxed frames, file:// pages, data: URLs
        return False
    return same_origin(origin, host) or origin in p.origins or (p.local_origins and origin.host in LOCAL_NAMES)


def cors_headers(origin: str, p: Policy) -> list[tuple[bytes, bytes]]:
    """An allowed origin's answer: it may read it (and its Retry-After)."""
    out = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
           (b"access-control-expose-headers", b"Retry-After, WWW-Authenticate")]
    if p.credentials:
        out.append((b"access-control-allow-credentials", b"true"))
    return out


def preflight_headers(origin: str, asked: str | None, p: Policy) -> list[tuple[bytes, bytes]]:
    """The answer to an allowed origin's preflight: the methods and headers it may use
    (with the default `*`, the headers it asked for beside the needed ones: `*` alone
    would not cover Authorization)."""
    headers = p.headers if p.headers is not None else _unique([*NEEDED_HEADERS, *split_list([asked or ""])])
    return [*cors_headers(origin, p), (b"access-control-allow-methods", ", ".join(p.methods).encode()),
            (b"access-control-allow-headers", ", ".join(headers).encode("latin-1")),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode())]


# -- bodies -----------------------------------------------------------------------------------


def json_body(content_type: str | None) -> bool:
    """Whether a Content-Type declares JSON (`application/json`, with or without a charset)."""
    return content_type is not None and content_type.partition(";")[0].strip().lower() == "application/json"


def takes_body(routes: Sequence[BaseRoute], scope: Scope) -> bool:
    """Whether the request goes to a route (path and method: a wrong method is the
    router's 405) with a body, which every such route reads as JSON."""
    return scope["method"] in BODY_METHODS and any(
        isinstance(r, Route) and r.matches(scope)[0] is Match.FULL for r in routes)


# -- the middleware ----------------------------------------------------------------------------


class SecurityMiddleware:
    """The checks above around the app: refusals in the route's protocol shape, preflights
    answered, CORS headers on the answers to allowed origins."""

    def __init__(self, app: ASGIApp, policy: Policy, routes: Sequence[BaseRoute], refuse: Refuse) -> None:
        self.app, self.policy, self.routes, self.refuse = app, policy, routes, refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        refusal = self.check(scope, headers)
        readable = origin is not None and (refusal is None or refusal.kind is not errors.FORBIDDEN)
        send_to = _adding(send, cors_headers(origin, self.policy)) if origin is not None and readable else send
        if refusal is not None:
            await self.refuse(refusal, scope["path"])(scope, receive, send_to)
        elif origin is not None and scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            answer = preflight_headers(origin, headers.get("access-control-request-headers"), self.policy)
            await Response(status_code=204, headers=_header_dict(answer))(scope, receive, send)
        else:
            await self.app(scope, receive, send_to)

    def check(self, scope: Scope, headers: Headers) -> ApiError | None:
        """The refusal a request gets before any route runs, or None."""
        host, origin = headers.get("host"), headers.get("origin")
        server = scope.get("server")
        if not host_allowed(host, self.policy, str(server[0]) if server else None):
            names = sorted(self.policy.hosts or ())
            return errors.foreign_host(split_host(host or "")[0], names)
        if origin is not None and not origin_allowed(origin, host, self.policy):
            parsed = parse_origin(origin)
            return errors.foreign_origin(origin, parsed is not None and parsed.host in LOCAL_NAMES)
        if takes_body(self.routes, scope) and not json_body(headers.get("content-type")):
            return errors.not_json(headers.get("content-type"))
        return None


def _adding(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    """`send` with `extra` headers on the answer."""

    async def send_with(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return send_with


def _header_dict(pairs: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in pairs}


def exposure_warning(bind: str, port: int, p: Policy, has_key: bool) -> str | None:
    """What `specli serve` says once at start when it is reachable from other machines."""
    if is_local(bind.strip("[]")):
        return None
    hosts = (" It answers to any Host name: give --allowed-hosts NAME (the names clients use) to refuse the others."
             if p.hosts is None else "")
    key = ("An API key is set (the page, /health, /v1/models and /props answer without it)." if has_key else
           "There is NO API key: anyone who can reach this address can use the model and read what it generates; "
           "set --api-key (or SPECLI_API_KEY).")
    return (f"WARNING: serving on {bind}:{port}, reachable from the network.{hosts} {key} There is no TLS: beyond a "
            "trusted network put a TLS proxy in front of it, or bind to 127.0.0.1 (docs/serve.md#security).")
