"""`specli serve --parallel 4` as a real process through the real `openai` client: requests
generated at once in shared batches, each answer what it is alone (up to near-ties, whose
gaps are checked against the noise a slot can show), slots freed by dropped clients, a
load of 16 clients x 5 requests, /health and /metrics on slots."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import SMOL, model_file

from harness.processes import ServeProcess, http, running
from harness.slots import divergence_gap, slot_noise
from specli.backend import LoadOptions, Model

openai = pytest.importorskip("openai")

ARGS = ["--target", SMOL, "--draft", "none", "--ctx", "2048", "--parallel", "4", "--queue", "8"]
PROMPTS = ["1, 2, 3, 4, 5,", "def add(a, b):\n    return", "The capital of France is", "Monday, Tuesday,",
           "import numpy as np\n\n", "Roses are red,", "SELECT name FROM", "A haiku about the sea:\n"]
NO_HISTORY = {"specli": {"history": False, "return_tokens": True}}


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    model_file(SMOL)
    with running(ARGS) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> Any:
    return openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def local() -> Iterator[tuple[Model, float]]:
    """The target in this process (two sequences), and the near-tie bound of a slot."""
    m = Model(model_file(SMOL), LoadOptions(n_ctx=2048, n_seq=2))
    yield m, 2 * slot_noise(m)
    m.close()


def complete(client: Any, prompt: str, max_tokens: int = 24) -> list[int]:
    r = client.completions.create(model=SMOL, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                  extra_body=NO_HISTORY)
    return list(r.model_dump()["specli"]["tokens"])


LOCAL = threading.Lock()  # the clients' threads check their answers on one model


def same_or_near_tie(local: tuple[Model, float], prompt: str, alone: list[int], got: list[int]) -> bool:
    model, bound = local
    with LOCAL:
        d = divergence_gap(model, model.tokenize(prompt, add_special=True, parse_special=True), alone, got)
    return d is None or abs(d[1]) <= bound


def test_four_at_once_share_batches_and_answer_as_alone(client: Any, server: ServeProcess,
                                                        local: tuple[Model, float]) -> None:
    alone = {p: complete(client, p, 48) for p in PROMPTS[:4]}
    got: dict[str, list[int]] = {}
    busy: list[int] = []

    def one(p: str) -> None:
        got[p] = complete(client, p, 48)

    threads = [threading.Thread(target=one, args=(p,)) for p in PROMPTS[:4]]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        status, _, body = http("GET", server.base + "/health")
        busy.append(int(json.loads(body)["slots_processing"]))
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert max(busy) >= 2  # /health saw slots busy at once
    assert all(same_or_near_tie(local, p, alone[p], got[p]) for p in alone), (alone, got)
    status, _, body = http("GET", server.base + "/metrics")
    text = body.decode()
    batches = int(next(line.split()[-1] for line in text.splitlines() if line.startswith("specli:batches_total")))
    in_batches = sum(int(line.split()[-1]) for line in text.splitlines()
                     if line.startswith("specli:slot_batches_total{"))
    assert in_batches > batches  # some batch held several slots
    assert 'specli:slots{state="idle"} 4' in text


SHARED = "Notes on the inventory module, line by line:\n" + "".join(
    f"{i}. the part number {i * 7} is kept in bin {i % 5}, reordered below {i + 3}.\n" for i in range(24))


def rows_decoded(server: ServeProcess) -> int:
    _, _, body = http("GET", server.base + "/metrics")
    return sum(int(line.split()[-1]) for line in body.decode().splitlines()
               if line.startswith("specli:slot_rows_total{"))


def test_requests_with_one_prefix_prefill_it_once(client: Any, server: ServeProcess,
                                                   local: tuple[Model, float]) -> None:
    """Two requests sent at once with a long common prefix (one system prompt, file or
    conversation): its chunks are decoded once, for both. A request sent while another
    slot generates from its prefix takes that slot's cells and reports them cached.
    Each answer is the one it gets alone, up to near-ties."""
    at_once = [SHARED + "Summary of bin 2:", SHARED + "Which parts are in bin 4?"]
    n_prefix = len(local[0].tokenize(SHARED, add_special=True, parse_special=True))
    assert n_prefix > 300
    got: dict[str, list[int]] = {}
    rows0 = rows_decoded(server)

    def one(p: str) -> None:
        got[p] = complete(client, p, 24)

    threads = [threading.Thread(target=one, args=(p,)) for p in at_once]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert rows_decoded(server) - rows0 < 2 * n_prefix - 100  # the prefix's chunks once, not twice

    other = "Stock report.\n" + SHARED.replace("bin", "shelf")  # a prefix no slot holds yet
    stream = client.completions.create(model=SMOL, prompt=other + "Shelf 1 holds", max_tokens=300, temperature=0,
                                       stream=True, extra_body=NO_HISTORY)
    next(iter(stream))
    late = other + "The largest part is"
    r = client.completions.create(model=SMOL, prompt=late, max_tokens=24, temperature=0,
                                  extra_body=NO_HISTORY).model_dump()
    stream.close()
    n_other = len(local[0].tokenize(other, add_special=True, parse_special=True))
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= n_other - 4
    got[late] = list(r["specli"]["tokens"])
    alone = {p: complete(client, p, 24) for p in got}
    assert all(same_or_near_tie(local, p, alone[p], got[p]) for p in got), (alone, got)


def test_a_side_call_parks_the_idle_conversation_and_its_next_turn_restores_it(client: Any) -> None:
    """A side call sharing only the chat template's first tokens with a conversation goes
    to the least recently used slot, and the idle conversation moves to the prompt cache
    (its cells would slow every step of the side call); its next turn restores it from RAM,
    prefilling only the new turn."""
    system = "You answer questions about a parts list. " + " ".join(f"Bin {i} holds part {i * 3}." for i in range(90))
    turn = [{"role": "system", "content": system}, {"role": "user", "content": "What is in bin 7?"}]
    first = client.chat.completions.create(model=SMOL, messages=turn, max_tokens=8, temperature=0,
                                           extra_body=NO_HISTORY)
    assert first.usage.prompt_tokens > 600
    client.chat.completions.create(
        model=SMOL, max_tokens=8, temperature=0, extra_body=NO_HISTORY,
        messages=[{"role": "system", "content": "Write a short title."}, {"role": "user", "content": "Parts."}])
    turn += [{"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "And in bin 9?"}]
    second = client.chat.completions.create(model=SMOL, messages=turn, max_tokens=8, temperature=0,
                                            extra_body=NO_HISTORY)
    pc = second.model_dump()["specli"]["prompt_cache"]
    assert pc["source"] == "ram", pc
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1


def test_a_dropped_client_frees_its_slot_at_the_next_step(client: Any, server: ServeProcess) -> None:
    """Four long streams fill the slots; one client leaves; a waiting request starts
    within about a step, and the other three streams go on."""
    streams = [client.completions.create(model=SMOL, prompt=p, max_tokens=400, temperature=0, stream=True,
                                         extra_body={"specli": {"history": False}}) for p in PROMPTS[:4]]
    chunks = [iter(s) for s in streams]
    for c in chunks:
        next(c)
    result: dict[str, Any] = {}

    def waiting() -> None:
        result["r"] = client.completions.create(model=SMOL, prompt=PROMPTS[4], max_tokens=8, temperature=0,
                                                extra_body={"specli": {"history": False}})

    t = threading.Thread(target=waiting)
    t.start()
    time.sleep(1.0)  # it waits in the queue: every slot is busy
    streams[0].close()
    t.join(30)
    assert "r" in result
    assert result["r"].model_dump()["specli"]["queue_s"] > 0.5
    for c in chunks[1:]:
        assert sum(1 for _ in c) > 5  # the others went on to their end
    for s in streams[1:]:
        s.close()


def test_load_16_clients_complete_or_get_503(client: Any, server: ServeProcess, local: tuple[Model, float]) -> None:
    """16 clients x 5 requests, 4 slots, queue 8: each request completes with its text (up
    to near-ties) or gets 503 with Retry-After; none hangs; /health answers throughout;
    RSS stays flat."""
    prompts = PROMPTS
    expected = {p: complete(client, p, 12) for p in prompts}
    rss0 = server.rss_mib()
    results: list[str] = []
    health: list[tuple[int | None, float]] = []
    stop = threading.Event()

    def one_client(i: int) -> None:
        c = openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=120)
        for j in range(5):
            p = prompts[(i + j) % len(prompts)]
            try:
                got = complete(c, p, 12)
                results.append("ok" if same_or_near_tie(local, p, expected[p], got) else f"wrong: {p!r}")
            except openai.APIStatusError as e:
                retry = e.response.headers.get("retry-after")
                results.append("503" if e.status_code == 503 and retry and int(retry) >= 1 else f"bad {e}")
            except Exception as e:  # noqa: BLE001
                results.append(f"error {type(e).__name__}: {e}")

    def poll_health() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            health.append((server.health(), time.perf_counter() - t0))
            time.sleep(0.05)

    poller = threading.Thread(target=poll_health)
    poller.start()
    clients = [threading.Thread(target=one_client, args=(i,)) for i in range(16)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(300)
    stop.set()
    poller.join()
    assert not any(t.is_alive() for t in clients), "a request hung"
    assert len(results) == 80
    assert all(r in ("ok", "503") for r in results), [r for r in results if r not in ("ok", "503")]
    assert results.count("ok") >= 20 and results.count("503") >= 1, results
    assert health and all(s == 200 for s, _ in health) and max(t for _, t in health) < 1.0
    assert server.rss_mib() - rss0 < 64, (rss0, server.rss_mib())


def test_bench_clients_replays_the_prompts_n_at_once(tmp_path: Any) -> None:
    """`specli bench --clients 2`: the suite's prompts in waves of two against `specli serve
    --parallel 2`; every prompt answered, the figures written."""
    from typer.testing import CliRunner

    from specli.cli import app

    out = tmp_path / "clients.json"
    res = CliRunner().invoke(app, ["bench", "--clients", "2", "--suite", "code", "--limit", "3", "--target", SMOL,
                                   "--draft", "none", "--ctx", "1024", "-n", "16", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    (row,) = doc["servers"]
    assert doc["prompts"] == 3 and row["name"] == "specli serve --parallel 2"
    assert 3 <= row["tokens"] <= 48 and row["wall_s"] > 0 and row["ttft_max_s"] > 0
    bad = CliRunner().invoke(app, ["bench", "--clients", "2", "--target", SMOL, "--peer", "llama-cpp-python"])
    assert bad.exit_code != 0 and "--peer llama.cpp:" in bad.output
