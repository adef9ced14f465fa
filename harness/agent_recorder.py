"""The stand-in model server of benchmarks.record_agents: on 127.0.0.1 it saves every
request (method, path, headers, the body as sent) to a JSON-lines log and answers every
model call with the text "Done." (Anthropic Messages, Chat Completions and Responses, one
model for `GET /v1/models`, 404 for anything else); `session` runs it beside one agent run
inside the agent's network namespace. Stdlib only, Linux."""

from __future__ import annotations

import base64
import fcntl
import gzip
import json
import socket
import struct
import subprocess
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL = "qwen2.5-coder-1.5b"
TEXT = "Done."


def sse(events: list[tuple[str | None, Any]]) -> bytes:
    """Server-sent events: (event name or None, data: a JSON value or a ready string)."""
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n")
    return "".join(out).encode()


def anthropic_answer(body: dict[str, Any]) -> tuple[str, bytes]:
    model = body.get("model", MODEL)
    usage = {"input_tokens": 10, "output_tokens": 2, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"id": "msg_recorder", "type": "message", "role": "assistant", "model": model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": dict(usage, output_tokens=1)}
    if not body.get("stream"):
        whole = dict(message, content=[{"type": "text", "text": TEXT}], stop_reason="end_turn", usage=usage)
        return "application/json", json.dumps(whole).encode()
    return "text/event-stream", sse([
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": TEXT}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 2}}),
        ("message_stop", {"type": "message_stop"}),
    ])


def chat_answer(body: dict[str, Any]) -> tuple[str, bytes]:
    model, created = body.get("model", MODEL), int(time.time())
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    head = {"id": "chatcmpl-recorder", "created": created, "model": model}
    if not body.get("stream"):
        whole = dict(head, object="chat.completion", usage=usage, choices=[
            {"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}])
        return "application/json", json.dumps(whole).encode()

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return dict(head, object="chat.completion.chunk",
                    choices=[{"index": 0, "delta": delta, "finish_reason": finish}])

    events: list[tuple[str | None, Any]] = [
        (None, chunk({"role": "assistant", "content": ""}, None)), (None, chunk({"content": TEXT}, None)),
        (None, chunk({}, "stop"))]
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append((None, dict(head, object="chat.completion.chunk", choices=[], usage=usage)))
    return "text/event-stream", sse([*events, (None, "[DONE]")])


def responses_answer(body: dict[str, Any]) -> tuple[str, bytes]:
    created = int(time.time())
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12}
    part = {"type": "output_text", "text": TEXT, "annotations": []}
    item = {"id": "msg_recorder", "type": "message", "status": "completed", "role": "assistant", "content": [part]}
    response = {"id": "resp_recorder", "object": "response", "created_at": created, "status": "in_progress",
                "model": body.get("model", MODEL), "output": [], "usage": None}
    done = dict(response, status="completed", output=[item], usage=usage)
    if not body.get("stream"):
        return "application/json", json.dumps(done).encode()
    steps: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response}),
        ("response.in_progress", {"response": response}),
        ("response.output_item.added", {"output_index": 0, "item": dict(item, status="in_progress", content=[])}),
        ("response.content_part.added", {"item_id": item["id"], "output_index": 0, "content_index": 0,
                                         "part": dict(part, text="")}),
        ("response.output_text.delta", {"item_id": item["id"], "output_index": 0, "content_index": 0,
                                        "delta": TEXT}),
        ("response.output_text.done", {"item_id": item["id"], "output_index": 0, "content_index": 0, "text": TEXT}),
        ("response.content_part.done", {"item_id": item["id"], "output_index": 0, "content_index": 0, "part": part}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": done}),
    ]
    return "text/event-stream", sse([(name, {"type": name, "sequence_number": i, **data})
                                     for i, (name, data) in enumerate(steps)])


def models_answer() -> tuple[str, bytes]:
    # both shapes at once: OpenAI's list and Anthropic's page
    model = {"id": MODEL, "object": "model", "created": 1735689600, "owned_by": "recorder", "type": "model",
             "display_name": MODEL, "created_at": "2025-01-01T00:00:00Z"}
    page = {"object": "list", "data": [model], "has_more": False, "first_id": MODEL, "last_id": MODEL}
    return "application/json", json.dumps(page).encode()


class RecorderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, log: Path) -> None:
        super().__init__(("127.0.0.1", port), Recorder)
        self.log = log
        self.lock = threading.Lock()

    def save(self, record: dict[str, Any]) -> None:
        with self.lock, self.log.open("a") as f:
            f.write(json.dumps(record) + "\n")


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecorderServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def answer(self) -> None:
        raw = self.read_body()
        self.server.save({"time": time.time(), "method": self.command, "path": self.path,
                          "headers": [[k, v] for k, v in self.headers.items()],
                          "body_b64": base64.b64encode(raw).decode()})
        route = self.path.split("?")[0].rstrip("/")
        try:
            body = json.loads(decoded(raw, self.headers.get("content-encoding", ""))) if raw else {}
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        status = 200
        if self.command == "POST" and route == "/v1/messages":
            kind, data = anthropic_answer(body)
        elif self.command == "POST" and route == "/v1/chat/completions":
            kind, data = chat_answer(body)
        elif self.command == "POST" and route == "/v1/responses":
            kind, data = responses_answer(body)
        elif self.command == "GET" and route == "/v1/models":
            kind, data = models_answer()
        else:
            status, kind = 404, "application/json"
            data = json.dumps({"type": "error", "error": {"type": "not_found_error",
                                                          "message": f"{self.command} {self.path}: not here"}}).encode()
        self.send_response(status)
        self.send_header("content-type", kind)
        if kind == "text/event-stream":
            self.send_header("cache-control", "no-cache")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = answer


def decoded(raw: bytes, encoding: str) -> bytes:
    """The body without its content-encoding, where the standard library can undo it."""
    encoding = encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        return gzip.decompress(raw)
    if encoding == "deflate":
        return zlib.decompress(raw)
    if encoding in ("", "identity"):
        return raw
    raise ValueError(f"content-encoding {encoding} is not readable here")


def loopback_up() -> None:
    """Bring up `lo` in a fresh network namespace (what `ip link set lo up` does)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, siocgifflags, req))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


def session(spec_file: Path) -> int:
    """Inside the agent's namespace: the recorder in a thread, the agent once, its output kept."""
    spec = json.loads(spec_file.read_text())
    run = Path(spec["dir"])
    if spec["loopback"]:
        loopback_up()
    server = RecorderServer(spec["port"], run / "requests.jsonl")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with (run / "stdout.txt").open("wb") as out, (run / "stderr.txt").open("wb") as err:
        code = subprocess.run(["timeout", str(spec["timeout"]), *spec["argv"]], cwd=spec["cwd"], env=spec["env"],
                              stdin=subprocess.DEVNULL, stdout=out, stderr=err).returncode
    server.shutdown()
    (run / "exit_code").write_text(f"{code}\n")
    return 0
