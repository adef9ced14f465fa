"""RPC server endpoints as written (`host:port`, comma-separated): parsed and checked
before anything loads."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

DEFAULT_PORT = 50052  # llama.cpp's rpc-server default
# a host name or an IPv4 address; llama.cpp's client resolves names with gethostbyname,
# so IPv6 literals cannot be reached and are refused here rather than at connect time
_HOST_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


class BadEndpoint(ValueError):
    """An endpoint string that is not `host:port`; the message says what is wrong."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_local(self) -> bool:
        return is_local(self.host)


def is_local(host: str) -> bool:
    """A loopback address or `localhost`: reachable only from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_endpoint(text: str) -> Endpoint:
    """`host:port` -> Endpoint; raises BadEndpoint naming what is wrong."""
    s = text.strip()
    host, sep, port_text = s.rpartition(":")
    if not sep or not host:
        raise BadEndpoint(f"{text!r} is not HOST:PORT")
    if host.startswith("[") or ":" in host:
        raise BadEndpoint(f"{text!r}: IPv6 addresses are not supported by llama.cpp's RPC client; use a host name "
                          "or an IPv4 address")
    if not _HOST_RE.match(host):
        raise BadEndpoint(f"{text!r}: {host!r} is not a host name or IPv4 address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise BadEndpoint(f"{text!r}: the port must be a number from 1 to 65535")
    return Endpoint(host, int(port_text))


def parse_endpoints(value: str | list[str] | tuple[str, ...]) -> tuple[Endpoint, ...]:
    """`"h1:p1,h2:p2"` or a list of such strings -> endpoints, in order, each once."""
    parts = value.split(",") if isinstance(value, str) else [p for item in value for p in str(item).split(",")]
    out: list[Endpoint] = []
    for part in parts:
        if not part.strip():
            raise BadEndpoint(f"empty endpoint in {value!r}")
        ep = parse_endpoint(part)
        if ep in out:
            raise BadEndpoint(f"{ep} is listed twice")
        out.append(ep)
    if not out:
        raise BadEndpoint("no endpoint given")
    return tuple(out)
