"""`specli serve` as a real process on 127.0.0.1 with a real model (SmolLM2-135M), through
the official `openai` client and plain HTTP. One server is shared by most tests; the
signal tests start their own."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import SMOL, model_file
from typer.testing import CliRunner

from harness.processes import ServeProcess, http, running

openai = pytest.importorskip("openai")

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
ARGS = ["--target", SMOL, "--draft", "none", "--ctx", "2048", "--queue", "4", "--api-key", KEY]
PROMPT = "List the first five planets of the solar system, one per line."


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    model_file(SMOL)
    with running(ARGS) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> Any:
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=120)


def chat(client: Any, content: str = PROMPT, **kw: Any) -> Any:
    return client.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": content}],
                                          temperature=0, **kw)


def stream_chat(client: Any, content: str = PROMPT, **kw: Any) -> tuple[str, list[Any]]:
    chunks = list(chat(client, content, stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


# -- equality with specli generate -------------------------------------------------------


def test_greedy_chat_equals_generate(client: Any) -> None:
    """The same messages and settings give the same text as `specli generate`, streaming
    and not (the drafter is auto in all three: greedy verification keeps the target's tokens)."""
    from specli.cli import app

    res = CliRunner().invoke(app, ["generate", "--target", SMOL, "--draft", "none", "--ctx", "2048", "--json",
                                   "-n", "48", "--no-history", PROMPT])
    assert res.exit_code == 0, res.output
    expected = json.loads(res.stdout)["text"]
    whole = chat(client, max_tokens=48, extra_body={"specli": {"history": False}})
    assert whole.choices[0].message.content == expected
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens == json.loads(res.stdout)["n_tokens"]
    text, chunks = stream_chat(client, max_tokens=48, extra_body={"specli": {"history": False}})
    assert text == expected
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    last = chunks[-2].model_dump()
    assert last["choices"][0]["finish_reason"] == whole.choices[0].finish_reason
    assert set(last["specli"]) >= {"drafted", "accepted", "target_forwards", "drafter_steps",
                                   "decode_tokens_per_second"}
    assert last["timings"]["draft_n"] == last["specli"]["drafted"]


def test_completions_endpoint(client: Any, server: ServeProcess) -> None:
    prompt = "def fibonacci(n):\n"
    done = client.completions.create(model=SMOL, prompt=prompt, max_tokens=24, temperature=0)
    assert done.object == "text_completion" and done.choices[0].text
    assert done.choices[0].finish_reason == "length" and done.usage.completion_tokens == 24
    parts = list(client.completions.create(model=SMOL, prompt=prompt, max_tokens=24, temperature=0, stream=True))
    assert "".join(p.choices[0].text for p in parts) == done.choices[0].text
    assert parts[-1].choices[0].finish_reason == "length"
    assert client.models.list().data[0].id == SMOL


# -- served work makes later work faster ------------------------------------------------------


def test_repeat_reuses_cache_and_drafts_from_history(client: Any) -> None:
    """A request sent twice: the second reuses the KV cache and drafts from the history
    store (the first one's output); the text is unchanged."""
    content = "Write a haiku about a lighthouse keeper who collects seashells."
    opts = {"max_tokens": 64, "extra_body": {"specli": {"drafter": "suffix"}}}
    first = chat(client, content, **opts)
    second = chat(client, content, **opts)
    assert second.choices[0].message.content == first.choices[0].message.content
    assert second.usage.prompt_tokens_details.cached_tokens >= second.usage.prompt_tokens - 1 > 0
    a, b = first.model_dump()["specli"], second.model_dump()["specli"]
    n = second.usage.completion_tokens
    assert b["accepted"] >= max(a["accepted"] + 1, n // 2), (a, b)
    assert b["target_forwards"] < a["target_forwards"]


def test_history_opt_out_keeps_output_out(client: Any) -> None:
    content = "Invent a name for a purple umbrella shop and explain it in one sentence."
    opts = {"max_tokens": 40, "extra_body": {"specli": {"drafter": "suffix", "history": False}}}
    first = chat(client, content, **opts)
    second = chat(client, content, **opts)
    assert second.choices[0].message.content == first.choices[0].message.content
    # nothing stored: the repeat drafts no more than the first (n-gram over its own text only)
    assert second.model_dump()["specli"]["accepted"] == first.model_dump()["specli"]["accepted"]


# -- cancellation -------------------------------------------------------------------------


def test_closed_stream_stops_the_generation(client: Any, server: ServeProcess) -> None:
    """A client that closes its stream after a few chunks: the next request starts within
    about a step, the same request's output is unchanged (the KV state is sound), and
    no thread is left behind (the second time round: the HTTP side's thread pool grows
    to the requests that ran at once the first time)."""
    short = {"max_tokens": 24, "extra_body": {"specli": {"history": False}}}
    before = chat(client, "Name three colours.", **short).choices[0].message.content
    threads = 0
    for _ in range(2):
        stream = chat(client, "Count from 1 to 500, separated by commas.", stream=True, max_tokens=1500,
                      extra_body={"specli": {"drafter": "none", "history": False}})
        for i, _ in enumerate(stream):
            if i == 3:
                break
        stream.close()
        t0 = time.perf_counter()
        after = chat(client, "Name three colours.", **short)
        waited = after.model_dump()["specli"]["queue_s"]
        assert waited < 0.25, f"the next request waited {waited:.3f} s after the client left"
        assert time.perf_counter() - t0 < 10
        assert after.choices[0].message.content == before
        time.sleep(0.5)  # the dropped request's slot ends at its next step
        assert threads == 0 or server.threads() <= threads
        threads = server.threads()
    status, _, body = http("GET", server.base + "/metrics", headers=AUTH)
    assert status == 200 and 'status="499"' in body.decode()


# -- bad requests -------------------------------------------------------------------------

LONG = "word " * 3000
BAD: list[tuple[str, str, Any, int, str | None]] = [
    # (name, path, body (bytes = raw), status, param)
    ("malformed JSON", "/v1/chat/completions", b'{"messages": [', 400, None),
    ("invalid UTF-8", "/v1/chat/completions", b'{"messages": "\xff\xfe"}', 400, None),
    ("not an object", "/v1/chat/completions", [1, 2], 400, None),
    ("messages missing", "/v1/chat/completions", {"model": SMOL}, 400, "messages"),
    ("messages wrong type", "/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
    ("bad role", "/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
    ("temperature type", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                  "temperature": "hot"}, 400, "temperature"),
    ("negative max_tokens", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                     "max_tokens": -5}, 400, "max_tokens"),
    ("absurd max_tokens", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                   "max_tokens": 10**9}, 400, "max_tokens"),
    ("n > 1", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 3}, 400, "n"),
    ("tools", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                       "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
    ("top_logprobs without logprobs", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                               "top_logprobs": 2}, 400, "top_logprobs"),
    ("top_logprobs too many", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                       "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
    ("logit_bias out of range", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                         "logit_bias": {"5": 101}}, 400, "logit_bias"),
    ("logit_bias past the vocabulary", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                                "logit_bias": {"99999999": 1}}, 400, "logit_bias"),
    ("penalty out of range", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                      "presence_penalty": 3}, 400, "presence_penalty"),
    ("lone surrogate", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a\\ud800"}]}', 400,
     "messages[0].content"),
    ("unknown parameter", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "foo": 1},
     400, "foo"),
    ("bad drafter", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                             "specli": {"drafter": "magic"}}, 400, "specli.drafter"),
    ("draft model not loaded", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                        "specli": {"drafter": "draft"}}, 400, "specli.drafter"),
    ("prompt too long", "/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}]}, 400, "messages"),
    ("completion prompt type", "/v1/completions", {"prompt": [1, 2, 3]}, 400, "prompt"),
    ("unknown route", "/v1/embeddings", {"input": "x"}, 404, None),
    ("body too large", "/v1/chat/completions", b"x" * (9 * 2**20), 413, None),
]


@pytest.mark.parametrize("name,path,body,status,param", BAD, ids=[b[0] for b in BAD])
def test_bad_request(server: ServeProcess, name: str, path: str, body: Any, status: int, param: str | None) -> None:
    raw = body if isinstance(body, bytes) else None
    got, headers, data = http("POST", server.base + path, None if raw else body, AUTH, raw=raw)
    assert got == status, data[:300]
    err = json.loads(data)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"] and err["type"]
    assert err["param"] == param
    if name == "prompt too long":
        assert "2048" in err["message"] and err["code"] == "context_length_exceeded"
        assert any(ch.isdigit() for ch in err["message"].split("2048")[0])


def test_server_still_serves_after_bad_requests(server: ServeProcess, client: Any) -> None:
    assert server.health() == 200
    assert chat(client, "Say hi.", max_tokens=4).choices[0].message.content


def test_api_key(server: ServeProcess) -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert http("POST", server.base + "/v1/chat/completions", body)[0] == 401
    status, _, data = http("POST", server.base + "/v1/chat/completions", body, {"Authorization": "Bearer nope"})
    assert status == 401 and json.loads(data)["error"]["type"] == "authentication_error"
    assert http("POST", server.base + "/v1/chat/completions", body, AUTH)[0] == 200
    assert http("GET", server.base + "/metrics")[0] == 401
    # open without a key
    assert http("GET", server.base + "/health")[0] == 200
    assert http("GET", server.base + "/v1/models")[0] == 200


def test_metrics_names(server: ServeProcess) -> None:
    status, headers, data = http("GET", server.base + "/metrics", headers=AUTH)
    text = data.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for name in ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total", "spec_decode_num_accepted_tokens_per_pos_total",
                 "requests_total", "prompt_tokens_total", "generation_tokens_total", "decode_seconds_total"):
        assert f"# TYPE specli:{name} " in text
    generated = next(float(line.split()[-1]) for line in text.splitlines()
                     if line.startswith("specli:generation_tokens_total "))
    assert generated > 0


# -- signals ------------------------------------------------------------------------------


def test_sigterm_during_a_stream() -> None:
    """SIGTERM mid-stream: the client's stream ends cleanly, the process exits 143 within
    5 s, the history store is readable afterwards. /health said 503 while loading."""
    from specli.history import HistoryStore

    model_file(SMOL)
    srv = ServeProcess(["--target", SMOL, "--draft", "none", "--ctx", "2048"])
    try:
        seen = srv.wait_ready()
        assert seen[0] == 503 and seen[-1] == 200, seen
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=60)
        stream = chat(c, "Count from 1 to 500, separated by commas.", stream=True, max_tokens=1500)
        chunks = []
        for chunk in stream:  # ends without an exception: a last chunk, then [DONE]
            chunks.append(chunk)
            if len(chunks) == 5:
                t0 = time.perf_counter()
                srv.proc.send_signal(signal.SIGTERM)
        assert chunks[-1].choices[0].finish_reason == "length"
        assert chunks[-1].model_dump()["specli"]["finish_reason"] == "terminated"
        srv.proc.wait(10)
        assert time.perf_counter() - t0 < 5
        assert srv.proc.returncode == 143, srv.log
    finally:
        srv.stop()
    assert "terminated" in srv.log
    stores = HistoryStore.all_stats()
    assert stores and all(s["status"] == "ok" for s in stores)


def test_sigint_when_idle() -> None:
    srv = ServeProcess(["--target", SMOL, "--draft", "none", "--ctx", "512"])
    try:
        srv.wait_ready()
    finally:
        code = srv.stop(signal.SIGINT)
    assert code == 130, srv.log


def test_port_in_use(server: ServeProcess) -> None:
    srv = ServeProcess(["--target", SMOL, "--draft", "none"], port=server.port)
    code = srv.proc.wait(60)
    srv.stop()
    assert code == 2 and "cannot listen" in srv.log and "Traceback" not in srv.log


def test_logprobs_logit_bias_and_penalties(client: Any, server: ServeProcess) -> None:
    """The target's log-probabilities of each token, as OpenAI shapes them; a bias that
    bans the first token changes it; penalties are honoured (no 400)."""
    r = chat(client, "Name three colours.", max_tokens=12, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(e.token for e in content) == r.choices[0].message.content
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 2 and e.top_logprobs[0].token == e.token  # greedy
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob and bytes(e.bytes).decode() == e.token
    text, chunks = stream_chat(client, "Name three colours.", max_tokens=12, logprobs=True)
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content] and text == r.choices[0].message.content
    done = client.completions.create(model=SMOL, prompt="def add(a, b):", max_tokens=8, temperature=0, logprobs=1)
    lp = done.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == done.usage.completion_tokens
    assert "".join(lp.tokens) == done.choices[0].text and lp.text_offset[0] == 0
    banned = chat(client, "Name three colours.", max_tokens=12, logprobs=True,
                  logit_bias={str(_first_token(server, r)): -100})
    assert banned.choices[0].logprobs.content[0].token != content[0].token
    assert chat(client, "Name three colours.", max_tokens=12, presence_penalty=1.5, frequency_penalty=1.0).choices


def _first_token(server: ServeProcess, r: Any) -> int:
    """The id of the first token of a response (asked again with return_tokens)."""
    status, _, data = http("POST", server.base + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 1, "temperature": 0,
        "specli": {"return_tokens": True}}, AUTH)
    assert status == 200
    return int(json.loads(data)["specli"]["tokens"][0])
