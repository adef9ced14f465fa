"""A pass-through proxy on 127.0.0.1 between a coding agent and a server: forwards every
request as it is, streams the answer back as it comes, and keeps per request what both
servers report in their own answers (usage, timings) and when the first content came,
so `benchmarks.agents` measures specli and llama-server alike."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "accept-encoding"}


@dataclass
class Exchange:
    """One request through the proxy and what its answer said."""

    method: str
    path: str
    status: int = 0
    t_start: float = 0.0
    t_first: float | None = None  # first byte of generated content
    t_end: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    decode_tps: float = 0.0
    body_bytes: int = 0

    @property
    def wall_s(self) -> float:
        return self.t_end - self.t_start

    @property
    def ttft_s(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_start


def read_usage(ex: Exchange, text: str) -> None:
    """Usage and timings from a whole JSON answer or from the last events of a stream
    (Anthropic's message_start / message_delta, OpenAI's usage chunk, llama-server's timings)."""
    objs: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("data: {"):
            with contextlib.suppress(ValueError):
                objs.append(json.loads(line[6:]))
    if not objs:
        try:
            whole = json.loads(text)
            objs = [whole] if isinstance(whole, dict) else []
        except ValueError:
            return
    for o in objs:
        if isinstance(o.get("response"), dict):  # a Responses API event: its response object
            o = o["response"]
        usage = o.get("usage") or (o.get("message") or {}).get("usage") or {}
        if usage:
            if "input_tokens_details" in usage:  # OpenAI Responses: input_tokens includes the cached
                ex.prompt_tokens = usage["input_tokens"]
                ex.cached_tokens = (usage.get("input_tokens_details") or {}).get("cached_tokens", 0) or 0
                ex.output_tokens = usage.get("output_tokens", 0)
            elif "prompt_tokens" in usage:  # OpenAI
                ex.prompt_tokens = usage["prompt_tokens"]
                ex.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
                ex.output_tokens = usage.get("completion_tokens", 0)
            else:  # Anthropic: input_tokens excludes what the cache gave
                read = usage.get("cache_read_input_tokens") or 0
                if "input_tokens" in usage and (usage["input_tokens"] or read):
                    ex.prompt_tokens = usage["input_tokens"] + read + (usage.get("cache_creation_input_tokens") or 0)
                    ex.cached_tokens = read
                ex.output_tokens = usage.get("output_tokens", ex.output_tokens) or ex.output_tokens
        timings = o.get("timings")
        if isinstance(timings, dict):
            ex.decode_tps = timings.get("predicted_per_second", 0.0) or 0.0
            if not ex.prompt_tokens:
                ex.prompt_tokens = timings.get("prompt_n", 0) + timings.get("cache_n", 0)
                ex.cached_tokens = timings.get("cache_n", 0)


_CONTENT_MARKS = (b'"text_delta"', b'"input_json_delta"', b'"content":"', b'"tool_calls"', b'"thinking_delta"',
                  b'"response.output_text.delta"', b'"response.function_call_arguments.delta"',
                  b'"response.custom_tool_call_input.delta"')


class Proxy:
    """Forwards to `upstream` (http://host:port); `exchanges` grows as requests end."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy.forward(self)

            def do_POST(self) -> None:
                proxy.forward(self)

            def do_DELETE(self) -> None:
                proxy.forward(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def take(self) -> list[Exchange]:
        with self._lock:
            out, self.exchanges = self.exchanges, []
        return out

    def forward(self, h: BaseHTTPRequestHandler) -> None:
        ex = Exchange(h.command, h.path, t_start=time.perf_counter())
        body = h.rfile.read(int(h.headers.get("content-length") or 0))
        ex.body_bytes = len(body)
        conn = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=3600)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP}
        conn.request(h.command, h.path, body=body or None, headers=headers)
        resp = conn.getresponse()
        ex.status = resp.status
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                h.send_header(k, v)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        kept = bytearray()
        try:
            while data := resp.read1(65536):
                if ex.t_first is None and any(m in data for m in _CONTENT_MARKS):
                    ex.t_first = time.perf_counter()
                kept += data
                h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except OSError:  # the agent hung up
            pass
        finally:
            conn.close()
            ex.t_end = time.perf_counter()
            if ex.t_first is None:
                ex.t_first = ex.t_end
            read_usage(ex, kept.decode("utf-8", "replace"))
            with self._lock:
                self.exchanges.append(ex)


def summarize(exchanges: list[Exchange]) -> dict[str, Any]:
    """A run's requests in figures: how many, prompt tokens, from a cache, prefilled,
    generated, decode tok/s (output-weighted), the first answer's time."""
    gen = [e for e in exchanges if e.method == "POST" and e.status == 200]
    out = sum(e.output_tokens for e in gen)
    return {"requests": len(gen), "errors": sum(e.status >= 400 for e in exchanges),
            "prompt_tokens": sum(e.prompt_tokens for e in gen), "cached_tokens": sum(e.cached_tokens for e in gen),
            "prefilled_tokens": sum(e.prompt_tokens - e.cached_tokens for e in gen), "output_tokens": out,
            "decode_tps": sum(e.decode_tps * e.output_tokens for e in gen) / out if out else 0.0,
            "first_ttft_s": gen[0].ttft_s if gen else None, "first_wall_s": gen[0].wall_s if gen else None}
