"""The chat page at `/`, in a real headless Chromium (Debian's, driven by Playwright's
Python API) against a real `specli serve` on the smallest test model. Without a browser
the tests skip and say why; under SPECLI_REQUIRE_BROWSER=1 (CI) they fail instead."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SMOL, model_file

from harness.processes import ServeProcess, http, running

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# a closed network: no background fetches, no GPU, a new profile per browser
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(os.environ.get("SPECLI_TEST_ARTIFACTS", Path(__file__).parent.parent / "build" / "test-artifacts"))
KEY = "page-test-key-5f2c"
REPEATS = ("Repeat this sentence three times, one per line: The quick brown fox jumps over the lazy dog "
           "near the river bank.")
SOURCES = {"target", "ngram", "suffix", "draft", "hybrid", "prediction", "grammar", "heads"}
PAGE_BYTES_MAX = 300_000


def _no_browser(why: str) -> None:
    if os.environ.get("SPECLI_REQUIRE_BROWSER") == "1":
        pytest.fail(f"no browser for the page tests: {why}")
    pytest.skip(f"no browser for the page tests: {why} (scripts/test.sh installs Debian's chromium)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _no_browser("the playwright package is not installed (pip install -e '.[dev]')")
    if not os.path.exists(CHROMIUM):
        _no_browser(f"{CHROMIUM} not found")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    model_file(SMOL)
    with running(["--target", SMOL, "--draft", "none", "--drafter", "ngram", "--ctx", "2048"]) as srv:
        yield srv


class Page:
    """A browser tab on the page, with every request it made and every console line."""

    def __init__(self, browser: Any, base: str) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 860})
        self.tab = self.context.new_page()
        self.base = base
        self.console: list[str] = []
        self.elsewhere: list[str] = []
        self.bytes = 0
        self.tab.on("console", lambda m: self.console.append(m.text))
        self.tab.on("pageerror", lambda e: self.console.append(f"error: {e}"))
        self.tab.route(re.compile(r".*"), self._route)

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(self.base) or url.startswith("data:"):
            route.continue_()
        else:  # the page must need nothing beyond the server
            self.elsewhere.append(url)
            route.abort()

    def open(self) -> Any:
        self.tab.on("response", self._count)
        self.tab.goto(self.base + "/")
        return self.tab

    def _count(self, response: Any) -> None:
        if response.url.startswith(self.base + "/web/") or response.url == self.base + "/":
            self.bytes += len(response.body())

    def ready(self) -> Any:
        self.tab.wait_for_selector("body[data-ready=true]", timeout=60_000)
        return self.tab

    def settings(self, max_tokens: int, temperature: float = 0) -> None:
        tab = self.tab
        tab.click("#settings-toggle")
        tab.fill("#temperature", str(temperature))
        tab.dispatch_event("#temperature", "change")
        tab.fill("#max-tokens", str(max_tokens))
        tab.dispatch_event("#max-tokens", "change")
        tab.click("#settings-toggle")

    def send(self, text: str) -> None:
        self.tab.fill("#prompt", text)
        self.tab.press("#prompt", "Enter")

    def answered(self, timeout_ms: int = 120_000) -> None:
        self.tab.wait_for_function("document.querySelector('#stop').hidden && "
                                   "document.querySelector('.message.assistant:last-child')", timeout=timeout_ms)

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser: Any, server: ServeProcess) -> Iterator[Page]:
    p = Page(browser, server.base)
    yield p
    p.close()


def _stored_answer(tab: Any) -> dict[str, Any]:
    conversations = json.loads(tab.evaluate("localStorage.getItem('specli.conversations')"))
    return conversations[-1]["messages"][-1]


def test_the_page_loads_from_the_server_alone(page: Page) -> None:
    tab = page.open()
    page.ready()
    assert tab.title() == "specli" and tab.text_content("#model") == SMOL
    assert tab.is_visible("#prompt") and tab.is_visible("#panel")
    assert page.elsewhere == [] and not [c for c in page.console if "error" in c.lower()]
    assert 0 < page.bytes <= PAGE_BYTES_MAX, f"the page weighs {page.bytes} bytes"


def test_an_answer_streams_in_with_each_token_marked_by_its_source(page: Page) -> None:
    tab = page.open()
    page.ready()
    page.settings(max_tokens=120)
    page.send(REPEATS)
    # while it streams: text already shown, Stop offered, the panel counting
    tab.wait_for_function("document.querySelector('.message.assistant .body').textContent.length > 0 && "
                          "Number(document.querySelector('[data-figure=generated]').textContent) > 0 && "
                          "!document.querySelector('#stop').hidden", timeout=60_000)
    page.answered()
    answer = _stored_answer(tab)
    marks = answer["marks"]
    assert answer["content"] and "".join(m["text"] for m in marks) == answer["content"]
    sources = tab.eval_on_selector_all(".message.assistant .tok", "els => els.map(e => e.dataset.source)")
    assert sources and set(sources) <= SOURCES
    assert "ngram" in sources, f"no drafted token in an answer that repeats: {set(sources)}"
    assert int(tab.text_content('[data-figure="generated"]')) == len(marks)
    assert tab.text_content('[data-figure="acceptance"]').endswith("%")
    drafted = tab.locator('.message.assistant .tok[data-source="ngram"]').first
    drafted.hover()
    assert tab.text_content("#tooltip").startswith("ngram: n-gram lookup in the prompt")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / "web-page.png"))
    tab.emulate_media(color_scheme="dark")
    tab.screenshot(path=str(ARTIFACTS / "web-page-dark.png"))
    assert page.elsewhere == []


def test_stop_cancels_and_the_server_goes_on(page: Page, server: ServeProcess) -> None:
    tab = page.open()
    page.ready()
    page.settings(max_tokens=1500, temperature=0.8)
    page.send("Write a very long story about a lighthouse keeper, in many chapters.")
    tab.wait_for_function("document.querySelector('.message.assistant .body').textContent.length > 20",
                          timeout=60_000)
    tab.click("#stop")
    page.answered(timeout_ms=30_000)
    assert tab.text_content(".message.assistant:last-child .note") == "Stopped."
    stopped = len(_stored_answer(tab)["content"])
    # the server records a stream the client left as 499 (once its job has seen the flag)
    left = re.compile(r'requests_total\{endpoint="chat",status="499"\} [1-9]')
    deadline = time.monotonic() + 60
    while not left.search(metrics := http("GET", server.base + "/metrics")[2].decode()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left.search(metrics), metrics
    assert len(_stored_answer(tab)["content"]) == stopped
    page.settings(max_tokens=16)
    page.send("Say hello.")
    page.answered()
    answer = _stored_answer(tab)
    assert answer["content"] and "error" not in answer and answer.get("note") != "Stopped."


def test_settings_edit_resend_copy_and_conversations_kept(page: Page) -> None:
    """The system prompt, temperature and max tokens go into the request with the
    extension; Edit and send again drops the turns after it; a code block copies; the
    conversation outlives a reload, and New conversation starts an empty one."""
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=page.base)
    tab = page.open()
    page.ready()
    tab.click("#settings-toggle")
    tab.fill("#system", "You are terse.")
    tab.dispatch_event("#system", "change")
    tab.click("#settings-toggle")
    page.settings(max_tokens=12, temperature=0)
    sent: list[dict[str, Any]] = []
    tab.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/chat/completions") else None)
    page.send("Say hello.")
    page.answered()
    assert sent[0]["messages"][0] == {"role": "system", "content": "You are terse."}
    assert sent[0]["max_tokens"] == 12 and sent[0]["temperature"] == 0 and sent[0]["specli"] == {"sources": True}
    tab.click(".message.user button:has-text('Edit')")
    tab.fill(".edit-box textarea", "Write a Python line that prints 1, in a code block.")
    tab.click(".edit-box button:has-text('Send again')")
    page.answered()
    assert [m["content"] for m in sent[1]["messages"][1:]] == ["Write a Python line that prints 1, in a code block."]
    stored = json.loads(tab.evaluate("localStorage.getItem('specli.conversations')"))
    assert len(stored) == 1 and [m["role"] for m in stored[0]["messages"]] == ["user", "assistant"]
    if tab.locator(".message.assistant pre").count():
        tab.click(".message.assistant pre .copy")
        code = tab.text_content(".message.assistant pre code")
        assert tab.evaluate("navigator.clipboard.readText()") == code
    tab.reload()
    page.ready()
    assert tab.locator("#conversation-list li").count() == 1 and tab.locator(".message").count() == 2
    tab.click("#new-chat")
    assert tab.locator(".message").count() == 0
    tab.click("#conversation-list li button.open")
    assert tab.text_content(".message.user .body") == "Write a Python line that prints 1, in a code block."


def _luminance(css: str) -> float:
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+", css)[:3])
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_source_reads_in_both_themes(page: Page, scheme: str) -> None:
    """Text on each source's background has WCAG AA contrast (4.5:1), and each drafted
    source has an underline style, so the marks do not rest on colour alone."""
    tab = page.open()
    tab.emulate_media(color_scheme=scheme)
    page.ready()
    styles = tab.eval_on_selector_all("#legend .tok", """els => els.map(e => {
        const s = getComputedStyle(e);
        return [e.dataset.source, s.color, s.backgroundColor, s.textDecorationLine, s.textDecorationStyle]; })""")
    page_bg = tab.evaluate("getComputedStyle(document.body).backgroundColor")
    assert {s[0] for s in styles} == SOURCES
    for source, fg, bg, line, _ in styles:
        back = page_bg if bg in ("rgba(0, 0, 0, 0)", "transparent") else bg
        hi, lo = sorted((_luminance(fg), _luminance(back)), reverse=True)
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, (scheme, source, fg, back)
        assert (line == "underline") == (source != "target"), (source, line)


def test_the_page_asks_for_the_key_once_and_never_shows_it(browser: Any) -> None:
    model_file(SMOL)
    with running(["--target", SMOL, "--draft", "none", "--ctx", "1024", "--api-key", KEY]) as srv:
        p = Page(browser, srv.base)
        try:
            tab = p.open()
            tab.wait_for_selector("#key-dialog[open]", timeout=30_000)
            tab.fill("#key-input", KEY)
            tab.press("#key-input", "Enter")
            p.ready()
            p.settings(max_tokens=8)
            p.send("Say hello.")
            p.answered()
            assert _stored_answer(tab)["content"]
            tab.reload()  # kept: no second prompt
            p.ready()
            assert not tab.is_visible("#key-dialog")
            assert KEY not in tab.content() and not [c for c in p.console if KEY in c]
            assert tab.input_value("#key-input") == ""
        finally:
            p.close()
