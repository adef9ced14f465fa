"""The chat page under a long answer (#55: "renders a 2,000-token answer without stutter"):
a real `specli serve`, Debian's Chromium through Playwright, one prompt whose answer runs
to --max-tokens. While it streams, the page's main thread is watched: the gaps between
animation frames (a gap over 50 ms is a visible stutter) and the long tasks Chromium
reports; then the page is reloaded and the stored answer rendered again, timed. Also the
bytes the page loads.

    python -m benchmarks.web_page
    python -m benchmarks.web_page --model qwen2.5-coder-0.5b-instruct-q4_k_m --max-tokens 2000
    python -m benchmarks.web_page --max-tokens 300 --prompt "$(cat edit.txt)" --screenshot docs/web-page.png
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from harness.processes import running
from specli import registry

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PROMPT = ("Write a long, detailed tutorial on Python's asyncio with many sections, bullet lists, and a "
          "complete code example in every section. Do not stop early.")
# recorded from the first script on: every animation frame's time, and Chromium's long tasks
WATCH = """
window.__frames = []; window.__long = [];
const tick = (t) => { window.__frames.push(t); requestAnimationFrame(tick); };
requestAnimationFrame(tick);
new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); })
  .observe({ type: "longtask", buffered: true });
"""


def _gaps(frames: list[float]) -> list[float]:
    return [b - a for a, b in zip(frames, frames[1:])]


def run(model: str, max_tokens: int, prompt: str = PROMPT, screenshot: str | None = None) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    registry.resolve(model)
    with running(["--target", model, "--draft", "none", "--drafter", "ngram", "--ctx", "4096"]) as srv, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        tab = browser.new_page(viewport={"width": 1280, "height": 860})
        loaded: list[int] = []
        reloaded = False
        # the first load's files (a reload gets 304s)
        tab.on("response", lambda r: loaded.append(len(r.body())) if r.status == 200 and not reloaded
               and ("/web/" in r.url or r.url == srv.base + "/") else None)
        tab.add_init_script(WATCH)
        tab.goto(srv.base + "/")
        tab.wait_for_selector("body[data-ready=true]", timeout=60_000)
        settings = json.dumps({"temperature": 0, "maxTokens": max_tokens})
        tab.evaluate(f"localStorage.setItem('specli.settings', {json.dumps(settings)})")
        reloaded = True
        tab.reload()
        tab.wait_for_selector("body[data-ready=true]", timeout=60_000)
        tab.evaluate("window.__frames = []; window.__long = []")
        tab.fill("#prompt", prompt)
        tab.press("#prompt", "Enter")
        tab.wait_for_function("document.querySelector('#stop').hidden && "
                              "document.querySelector('.message.assistant:last-child')", timeout=1_800_000)
        if screenshot:
            tab.mouse.move(0, 0)
            tab.screenshot(path=screenshot)
        stream_gaps = _gaps(tab.evaluate("window.__frames"))
        stream_long = tab.evaluate("window.__long")
        answer = json.loads(tab.evaluate("localStorage.getItem('specli.conversations')"))[-1]["messages"][-1]
        n_marked = tab.eval_on_selector_all(".message.assistant .tok", "els => new Set(els.map(e => e.dataset.token)).size")
        tab.reload()  # from the navigation's start to the stored answer rendered and marked
        tab.wait_for_selector(".message.assistant .tok", timeout=60_000)
        reload_ms = tab.evaluate("performance.now()")
        browser.close()
    return {
        "model": model, "tokens": len(answer.get("marks", [])), "chars": len(answer["content"]), "tokens_marked": n_marked,
        "frames": len(stream_gaps) + 1, "frame_gap_ms_median": round(statistics.median(stream_gaps), 1),
        "frame_gap_ms_max": round(max(stream_gaps), 1), "frame_gaps_over_50ms": sum(g > 50 for g in stream_gaps),
        "long_tasks": len(stream_long), "long_task_ms_max": round(max(stream_long, default=0), 1),
        "reload_to_marked_answer_ms": round(reload_ms, 1), "page_bytes": sum(loaded),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct-q4_k_m")
    ap.add_argument("--max-tokens", type=int, default=2000)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--screenshot", help="a PNG of the page when the answer is done")
    args = ap.parse_args()
    print(json.dumps(run(args.model, args.max_tokens, args.prompt, args.screenshot), indent=2))


if __name__ == "__main__":
    main()
