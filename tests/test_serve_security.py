"""`specli serve` against the web pages its user visits (serve/security.py): real servers
on 127.0.0.1 with SmolLM2-135M, probed with plain HTTP (a foreign Host header is DNS
rebinding as the server sees it) and from a page of another origin, served by its own
process on another local port, in a real headless Chromium (Debian's, through
Playwright, as tests/test_web_page.py drives it). Nothing a page tries by default
generates: the request counters in /metrics stay as they were."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any

import pytest
from conftest import SMOL, model_file
from test_web_page import browser  # noqa: F401  (the fixture: Debian's Chromium, skipped or required as there)

from harness.processes import ServeProcess, free_port, http, running
from specli.serve import security

KEY = "security-test-key-7d1e"
ARGS = ["--target", SMOL, "--draft", "none", "--ctx", "1024"]
CHAT = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0}
COUNTERS = re.compile(r"^specli:(requests_total|prompt_tokens_total|generation_tokens_total)\b.*$", re.M)


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    """As a user starts it on their own machine: no key, no flags."""
    model_file(SMOL)
    with running(ARGS) as srv:
        yield srv


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Another local origin: a page served by its own process on another port."""
    folder = tmp_path_factory.mktemp("elsewhere")
    (folder / "page.html").write_text("<!doctype html><title>elsewhere</title><body><p>another site</p></body>")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
                             str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if http("GET", base + "/page.html", timeout=5)[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError(f"the page server on {base} did not answer")
        yield base
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def allowing(elsewhere: str) -> Iterator[ServeProcess]:
    """Started to let that page in, with a key and a name of its own."""
    model_file(SMOL)
    with running([*ARGS, "--api-key", KEY, "--cors-origins", elsewhere, "--allowed-hosts", "specli.test"]) as srv:
        yield srv


def counters(srv: ServeProcess, headers: dict[str, str] | None = None) -> list[str]:
    """The request and token counters, once no request runs (a job's record is counted
    after its answer is sent, before its slot is free)."""
    deadline = time.monotonic() + 120
    while True:
        status, _, data = http("GET", srv.base + "/metrics", headers=headers)
        assert status == 200, data[:300]
        text = data.decode()
        if re.search(r"^specli:requests_running 0(\.0)?$", text, re.M) or time.monotonic() > deadline:
            return [m.group(0) for m in COUNTERS.finditer(text)]
        time.sleep(0.1)


def openai_error(data: bytes) -> dict[str, Any]:
    err = json.loads(data)["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    return err  # type: ignore[no-any-return]


def anthropic_error(data: bytes) -> dict[str, Any]:
    body = json.loads(data)
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    return body["error"]  # type: ignore[no-any-return]


def raw_post(srv: ServeProcess, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """A POST with exactly these headers (urllib adds a Content-Type of its own)."""
    conn = HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# -- the policy from the flags (pure) ----------------------------------------------------------


def test_policy_from_the_flags() -> None:
    local = security.policy("127.0.0.1")
    assert local.hosts == {"localhost", "127.0.0.1", "[::1]"}
    assert security.policy("0.0.0.0").hosts is None and security.policy("::").hosts is None
    assert security.policy("0.0.0.0", ["a.lan,B.lan:8080", "fd00::1"]).hosts == {
        "localhost", "127.0.0.1", "[::1]", "a.lan", "b.lan", "[fd00::1]"}
    assert security.policy("192.168.1.5").hosts == {"localhost", "127.0.0.1", "[::1]", "192.168.1.5"}
    assert security.policy("127.0.0.1", ["*"]).hosts is None
    for host, ok in [("localhost:8080", True), ("LOCALHOST.:8080", True), ("[::1]:8080", True), ("127.0.0.1", True),
                     ("evil.example:8080", False), ("127.0.0.1.evil.example", False), (None, True)]:
        assert security.host_allowed(host, local) is ok, host
    # the address a connection arrived at is a name of the server: an address cannot be rebound
    assert security.host_allowed("192.168.1.5:8080", local, "192.168.1.5")
    assert security.host_allowed("[fd00::1]:8080", local, "fd00::1")
    assert not security.host_allowed("evil.example", local, "192.168.1.5")
    own = "127.0.0.1:8080"
    assert security.origin_allowed("http://127.0.0.1:8080", own, local)
    assert not security.origin_allowed("http://127.0.0.1:3000", own, local)  # another local page: refused
    assert not security.origin_allowed("null", own, local)
    loc = security.policy("127.0.0.1", cors_origins="localhost")
    assert security.origin_allowed("http://localhost:3000", own, loc) and security.origin_allowed("https://[::1]", own, loc)
    assert not security.origin_allowed("http://evil.example", own, loc)
    listed = security.policy("127.0.0.1", cors_origins="https://app.example, http://localhost:3000/")
    assert security.origin_allowed("https://app.example:443", own, listed)
    assert security.origin_allowed("http://localhost:3000", own, listed)
    assert not security.origin_allowed("http://app.example", own, listed)
    assert security.origin_allowed("null", own, security.policy("127.0.0.1", cors_origins="*"))
    # behind a TLS proxy that passes Host without a port, the page's https origin is its own
    assert security.same_origin(security.parse_origin("https://llm.example") or security.Origin("", "", 0),
                                "llm.example")
    assert security.json_body("application/json") and security.json_body("Application/JSON; charset=utf-8")
    assert not any(security.json_body(t) for t in (None, "", "text/plain", "application/x-www-form-urlencoded",
                                                   "multipart/form-data; boundary=x", "application/jsonx"))


def test_a_malformed_origin_is_refused_at_start() -> None:
    srv = ServeProcess([*ARGS, "--cors-origins", "not an origin"])
    code = srv.proc.wait(120)
    srv.stop()
    assert code == 2 and "--cors-origins" in srv.log and "Traceback" not in srv.log, srv.log


# -- DNS rebinding: a foreign Host -----------------------------------------------------------------


def test_a_foreign_host_is_refused_on_every_route(server: ServeProcess) -> None:
    before = counters(server)
    foreign = {"Host": f"evil.example:{server.port}"}
    for path in ("/", "/web/app.js", "/health", "/v1/models", "/props", "/slots", "/metrics"):
        status, _, data = http("GET", server.base + path, headers=foreign)
        assert status == 403, (path, data[:200])
        err = openai_error(data)
        assert err["code"] == "host_not_allowed" and "--allowed-hosts evil.example" in err["message"], err
    status, _, data = http("POST", server.base + "/v1/chat/completions", CHAT, foreign)
    assert status == 403 and openai_error(data)["code"] == "host_not_allowed"
    status, _, data = http("POST", server.base + "/v1/messages", {**CHAT, "max_tokens": 4}, foreign)
    assert status == 403 and anthropic_error(data)["type"] == "permission_error"
    for own in ("localhost", "127.0.0.1", "[::1]", "LocalHost."):
        assert http("GET", server.base + "/health", headers={"Host": f"{own}:{server.port}"})[0] == 200, own
    assert counters(server) == before


# -- a page of another origin, and bodies that are not JSON, over plain HTTP --------------------------


def test_a_foreign_origin_is_refused_before_any_work(server: ServeProcess) -> None:
    before = counters(server)
    evil = {"Origin": "http://evil.example"}
    for ctype in ("text/plain", "application/json"):
        status, data = raw_post(server, "/v1/chat/completions", json.dumps(CHAT).encode(),
                                {**evil, "Content-Type": ctype})
        assert status == 403, data[:200]
        err = openai_error(data)
        assert err["code"] == "origin_not_allowed" and "--cors-origins http://evil.example" in err["message"]
        assert "localhost" not in err["message"]
    status, data = raw_post(server, "/v1/messages", json.dumps(CHAT).encode(), {**evil, "Content-Type": "text/plain"})
    assert status == 403 and anthropic_error(data)["type"] == "permission_error"
    status, headers, data = http("GET", server.base + "/slots", headers=evil)
    assert status == 403 and "access-control-allow-origin" not in {k.lower() for k in headers}
    # a preflight from it: refused too, and no key was needed to be told so
    status, headers, _ = http("OPTIONS", server.base + "/v1/chat/completions", headers={
        **evil, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
    assert status == 403 and "access-control-allow-origin" not in {k.lower() for k in headers}
    # a page on this machine, on another port, is another origin
    status, data = raw_post(server, "/v1/chat/completions", json.dumps(CHAT).encode(),
                            {"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"})
    assert status == 403 and "--cors-origins localhost" in openai_error(data)["message"]
    assert counters(server) == before
    # the server's own page's origin is served
    own = {"Origin": server.base, "Content-Type": "application/json"}
    status, data = raw_post(server, "/v1/chat/completions", json.dumps(CHAT).encode(), own)
    assert status == 200 and json.loads(data)["choices"][0]["message"]["content"] is not None


def test_bodies_must_be_declared_json(server: ServeProcess) -> None:
    before = counters(server)
    body = json.dumps(CHAT).encode()
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        status, data = raw_post(server, "/v1/chat/completions", body, {"Content-Type": ctype} if ctype else {})
        assert status == 415, (ctype, data[:200])
        err = openai_error(data)
        assert err["code"] == "unsupported_media_type" and "application/json" in err["message"]
    status, data = raw_post(server, "/v1/messages", body, {"Content-Type": "text/plain"})
    assert status == 415 and anthropic_error(data)["type"] == "invalid_request_error"
    for path in ("/tokenize", "/v1/responses", "/infill", "/v1/completions", "/v1/messages/count_tokens"):
        assert raw_post(server, path, b"{}", {"Content-Type": "text/plain;charset=UTF-8"})[0] == 415, path
    assert counters(server) == before
    status, data = raw_post(server, "/v1/chat/completions", body, {"Content-Type": "application/json; charset=utf-8"})
    assert status == 200, data[:200]


def test_a_wrong_method_is_405_with_allow(server: ServeProcess) -> None:
    status, headers, data = http("GET", server.base + "/v1/chat/completions")
    assert status == 405 and headers.get("allow") == "POST", headers
    assert openai_error(data)["code"] == "method_not_allowed"
    status, headers, _ = http("DELETE", server.base + "/v1/models")
    assert status == 405 and set(headers.get("allow", "").split(", ")) == {"GET", "HEAD"}
    status, headers, data = http("GET", server.base + "/v1/messages")
    assert status == 405 and headers.get("allow") == "POST" and anthropic_error(data)
    # a POST to a GET route is a 405, whatever its body
    assert raw_post(server, "/v1/models", b"x", {"Content-Type": "text/plain"})[0] == 405


def test_what_the_flags_allow(allowing: ServeProcess, elsewhere: str) -> None:
    """--cors-origins: that page's preflight is answered (no key asked), its requests
    carry CORS headers; --allowed-hosts: that name is served, others are not."""
    auth = {"Authorization": f"Bearer {KEY}"}
    status, headers, _ = http("OPTIONS", allowing.base + "/v1/chat/completions", headers={
        "Origin": elsewhere, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"})
    lower = {k.lower(): v for k, v in headers.items()}
    assert status == 204 and lower["access-control-allow-origin"] == elsewhere, headers
    allowed = {h.strip().lower() for h in lower["access-control-allow-headers"].split(",")}
    assert allowed >= {"authorization", "x-api-key", "anthropic-version", "content-type", "x-stainless-os"}
    assert "POST" in lower["access-control-allow-methods"] and "access-control-allow-credentials" not in lower
    status, headers, data = http("POST", allowing.base + "/v1/chat/completions", CHAT, {**auth, "Origin": elsewhere})
    assert status == 200 and {k.lower(): v for k, v in headers.items()}["access-control-allow-origin"] == elsewhere
    status, headers, _ = http("POST", allowing.base + "/v1/chat/completions", CHAT, {"Origin": elsewhere})
    assert status == 401 and "access-control-allow-origin" in {k.lower() for k in headers}  # readable by it
    assert http("POST", allowing.base + "/v1/chat/completions", CHAT, {**auth, "Origin": "http://127.0.0.1:1"})[0] == 403
    assert http("GET", allowing.base + "/health", headers={"Host": f"specli.test:{allowing.port}"})[0] == 200
    status, _, data = http("GET", allowing.base + "/health", headers={"Host": "other.test"})
    assert status == 403 and "specli.test" in openai_error(data)["message"]


def test_any_host_on_every_interface_with_a_warning() -> None:
    """Bound to 0.0.0.0 without --allowed-hosts: any Host is served, and the start says
    that the server is reachable from the network and whether a key is set."""
    model_file(SMOL)
    with running([*ARGS, "--host", "0.0.0.0"]) as srv:
        assert http("GET", srv.base + "/health", headers={"Host": "anything.example"})[0] == 200
        assert http("GET", srv.base + "/health", headers={"Origin": "http://evil.example"})[0] == 403
    warnings = [line for line in srv.lines if "reachable from the network" in line]
    assert len(warnings) == 1 and "NO API key" in warnings[0] and "--allowed-hosts" in warnings[0], srv.log


# -- in a real browser --------------------------------------------------------------------------

PROBES = """async ([api, key]) => {
  const auth = key ? {"Authorization": "Bearer " + key} : {};
  const body = JSON.stringify({messages: [{role: "user", content: "Say hi."}], max_tokens: 4, temperature: 0});
  const out = {};
  const attempt = async (name, f) => {
    try { out[name] = await f(); } catch (e) { out[name] = "refused: " + e; }
  };
  const read = async (r) => r.status + " " + await r.text();
  await attempt("json", async () => read(await fetch(api + "/v1/chat/completions", {
    method: "POST", headers: {"Content-Type": "application/json", ...auth}, body})));
  await attempt("text", async () => read(await fetch(api + "/v1/chat/completions", {
    method: "POST", headers: {"Content-Type": "text/plain"}, body})));
  await attempt("slots", async () => read(await fetch(api + "/slots", {headers: auth})));
  out.eventsource = await new Promise((resolve) => {
    const es = new EventSource(api + "/v1/chat/completions");
    es.onmessage = (e) => { es.close(); resolve("read: " + e.data); };
    es.onerror = () => { es.close(); resolve("refused"); };
  });
  return out;
}"""

FORM = """([api]) => {
  const frame = document.createElement("iframe");
  frame.name = "sink";
  document.body.appendChild(frame);
  const form = document.createElement("form");
  form.method = "POST"; form.enctype = "text/plain"; form.target = "sink";
  form.action = api + "/v1/chat/completions";
  const field = document.createElement("input");
  field.name = '{"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "x": "';
  field.value = '"}';
  form.appendChild(field);
  document.body.appendChild(form);
  form.submit();
}"""


class Elsewhere:
    """A tab on the page of the other origin, with every answer the specli server gave it."""

    def __init__(self, chromium: Any, page: str, api: str) -> None:
        self.context = chromium.new_context()
        self.tab = self.context.new_page()
        self.api = api
        self.answers: list[tuple[str, str, int]] = []
        self.tab.on("response", lambda r: self.answers.append((r.request.method, r.url, r.status))
                    if r.url.startswith(api) else None)
        self.tab.goto(page + "/page.html")

    def probe(self, key: str = "") -> dict[str, str]:
        out: dict[str, str] = self.tab.evaluate(PROBES, [self.api, key])
        return out

    def form_post(self) -> Any:
        """The form's answer, as the browser got it (the page cannot read it)."""
        with self.tab.expect_response(lambda r: r.url == self.api + "/v1/chat/completions"
                                      and r.request.method == "POST", timeout=60_000) as got:
            self.tab.evaluate(FORM, [self.api])
        return got.value

    def close(self) -> None:
        self.context.close()


def test_a_page_of_another_origin_can_do_nothing_by_default(browser: Any, server: ServeProcess,  # noqa: F811
                                                            elsewhere: str) -> None:
    before = counters(server)
    page = Elsewhere(browser, elsewhere, server.base)
    try:
        out = page.probe()
        assert all(v.startswith("refused") for v in out.values()), out
        answer = page.form_post()
        assert answer.status == 403 and json.loads(answer.body())["error"]["code"] == "origin_not_allowed"
        refused = [a for a in page.answers if a[0] != "OPTIONS"]
        assert refused and all(status == 403 for _, _, status in refused), page.answers
    finally:
        page.close()
    assert counters(server) == before, "a page of another origin made the server generate"


def test_a_page_the_flags_allow_reads_its_answer(browser: Any, allowing: ServeProcess,  # noqa: F811
                                                 elsewhere: str) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    before = counters(allowing, auth)
    page = Elsewhere(browser, elsewhere, allowing.base)
    try:
        out = page.probe(KEY)
    finally:
        page.close()
    status, _, text = out["json"].partition(" ")
    assert status == "200", out
    assert json.loads(text)["choices"][0]["message"]["content"] is not None
    assert out["text"].startswith("415 ") and "application/json" in out["text"], out  # readable, and still refused
    assert out["slots"].startswith("200 "), out
    assert out["eventsource"] == "refused", out  # a GET on a POST route
    after = counters(allowing, auth)
    assert after != before and len(after) >= len(before)


def test_the_server_s_own_page_origin_on_an_allowed_name(allowing: ServeProcess) -> None:
    """The page reached by an --allowed-hosts name: its requests carry that origin."""
    host = f"specli.test:{allowing.port}"
    status, data = raw_post(allowing, "/v1/chat/completions", json.dumps(CHAT).encode(), {
        "Host": host, "Origin": f"http://{host}", "Content-Type": "application/json",
        "Authorization": f"Bearer {KEY}"})
    assert status == 200, data[:200]

