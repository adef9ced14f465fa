"""Medusa heads end to end on the smallest model: trained for seconds on the target's
own rows, saved, listed, refused by another target, drafting, and lossless (greedy equal
to plain decoding; sampled: the target's own distribution)."""

from __future__ import annotations

import re
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import QWEN_DRAFT, SMOL, model_file
from conftest import total_variation as tv
from typer.testing import CliRunner

from specli.backend import LoadOptions, Model
from specli.cli import app
from specli.drafters import LearnedDrafter
from specli.engine import GenerationConfig, generate, run
from specli.engine.sampling import probs_from_logits
from specli.gguf import fingerprint
from specli.heads import store
from specli.heads import training as heads_training
from specli.heads.loaded import LoadedHeads, load_heads
from specli.heads.online import OnlineHeads
from specli.heads.store import HeadsMismatch
from specli.types import SamplingParams

RECIPE = heads_training.Recipe(n_heads=3, vocab=1024, rows=1500, epochs=3, max_new=120)


@pytest.fixture(scope="module")
def target() -> Iterator[Model]:
    m = Model(model_file(SMOL), LoadOptions(n_ctx=2048))
    yield m
    m.close()


@pytest.fixture(scope="module")
def trained(target: Model) -> heads_training.Trained:
    seen: list[str] = []
    out = heads_training.train(target, SMOL, RECIPE, [], lambda p: seen.append(p.phase))
    assert seen[0] == "data" and "train" in seen and "eagle" in seen and seen[-1] == "done"
    return out


@pytest.fixture(scope="module")
def loaded(trained: heads_training.Trained, target: Model) -> LoadedHeads:
    return load_heads(target.path, SMOL, None, target.n_vocab)


def learned(loaded: LoadedHeads, name: str, target: Model, sampling: SamplingParams = SamplingParams()
            ) -> LearnedDrafter:
    return loaded.drafter(name, target, sampling)


def test_heads_are_saved_listed_and_keyed_to_their_target(trained: heads_training.Trained, target: Model) -> None:
    recipe = trained.recipe
    assert recipe["target"]["fingerprint"] == fingerprint(target.path)
    assert recipe["data"]["rows"] >= RECIPE.rows and recipe["data"]["by_kind"]["generated"] > 0
    assert [e.path for e in store.entries()] == [trained.folder]
    got = load_heads(target.path, SMOL, None, target.n_vocab)
    assert got.medusa.n_heads == 3 and len(got.medusa.vocab) == RECIPE.vocab and got.eagle is not None
    for name, held in (("medusa", recipe["held_out"]), ("eagle", recipe["eagle"]["held_out"])):
        # estimates start at what holds on unseen text; the held-out chain is the ceiling
        prior = got.priors[name]
        assert prior.start == min(store.UNSEEN_PRIOR, held["alone"][0])
        assert np.allclose(np.cumprod(prior.ceiling), held["chain"]) and prior.ceiling[0] == held["chain"][0]
    assert set(got.seconds) == {"medusa", "eagle"} and all(v > 0 for v in got.seconds.values())
    # trained: the first drafted token agrees with the target well above chance on held-out rows
    assert recipe["held_out"]["alone"][0] > 0.1 and recipe["eagle"]["held_out"]["alone"][0] > 0.1
    res = CliRunner().invoke(app, ["heads", "list"])
    assert res.exit_code == 0 and SMOL[:12] in res.output


def test_heads_refuse_another_target(trained: heads_training.Trained) -> None:
    other = model_file(QWEN_DRAFT)
    with pytest.raises(HeadsMismatch):
        load_heads(other, QWEN_DRAFT, str(trained.folder))
    res = CliRunner().invoke(app, ["generate", "--target", QWEN_DRAFT, "--drafter", "medusa", "--heads",
                                   trained.folder.name, "--max-tokens", "4", "--no-history", "hi"])
    assert res.exit_code == 5, res.output
    assert "trained on" in res.output and "specli heads train" in res.output


def test_medusa_without_heads_says_how_to_train_them(trained: heads_training.Trained) -> None:
    res = CliRunner().invoke(app, ["generate", "--target", QWEN_DRAFT, "--drafter", "medusa", "--max-tokens", "4",
                                   "--no-history", "hi"])
    assert res.exit_code == 2, res.output
    assert "no trained heads" in res.output and "specli heads train" in res.output


def test_hidden_states_only_where_a_decode_computed_them(target: Model) -> None:
    target.reset()
    target.set_features(True)
    try:
        toks = target.tokenize("The quick brown fox jumps over the lazy dog", add_special=False)
        target.decode(toks[:-2])  # a prefill asks no rows: no hidden states
        assert target.hidden_at(len(toks) - 3) is None
        target.decode(toks[-2:], [0, 1])
        rows = target.hidden().copy()
        assert np.array_equal(target.hidden_at(len(toks) - 1), rows[1])
        assert target.hidden_at(len(toks)) is None
    finally:
        target.set_features(False)
    assert target.hidden_at(len(toks) - 1) is None


@pytest.mark.parametrize("name", ["medusa", "eagle"])
def test_learned_drafters_draft_and_greedy_output_is_the_targets(name: str, loaded: LoadedHeads,
                                                                  target: Model) -> None:
    prompt = target.chat_tokens([{"role": "user", "content": "A bus carries 42 people and 17 get off. Then 9 "
                                                              "get on. How many are on the bus? Explain."}])
    cfg = GenerationConfig(max_tokens=64, draft_max=3)
    target.reset()
    plain = run(target, prompt, cfg)
    target.set_features(True)
    try:
        target.reset()
        spec = run(target, prompt, cfg, learned(loaded, name, target))
    finally:
        target.set_features(False)
    assert spec.tokens == plain.tokens
    assert spec.counters.n_drafted > 0 and spec.counters.n_accepted > 0


@pytest.mark.parametrize("name", ["medusa", "eagle"])
def test_learned_sampling_keeps_the_targets_distribution(name: str, loaded: LoadedHeads, target: Model) -> None:
    """At temperature 0.8 the first two tokens follow p(t1) p(t2 | t1); t2 is drafted from
    q (the first Medusa head's, which ignores t1; the feature drafter's given t1) and
    accepted or replaced by rejection sampling. Any q the drafts are really drawn from keeps
    p; the drafter here draws at temperature 2, whatever its training made of it, so that
    accepting every drafted token, p(t1) q(t2 | t1), is far enough away for a wrong verifier
    to show."""
    params = SamplingParams(temperature=0.8)
    flat = SamplingParams(temperature=2.0)
    toks = target.tokenize("Once upon a time", add_special=False)
    target.set_features(True)
    try:
        target.reset()
        p1 = probs_from_logits(target.decode(toks, [len(toks) - 1])[0], params)
        h = target.hidden_at(len(toks) - 1).astype(np.float32)
        exact: dict[tuple[int, int], float] = {}
        accept_all: dict[tuple[int, int], float] = {}
        for t1 in np.flatnonzero(p1 > 1e-3):
            target.rollback(len(toks))
            p2 = probs_from_logits(target.decode([int(t1)], [0])[0], params)
            for t2 in np.flatnonzero(p2 > 1e-3):
                exact[(int(t1), int(t2))] = float(p1[t1] * p2[t2])
            q2 = first_q(loaded, name, h, int(t1), target.n_vocab, flat)
            for t2 in np.flatnonzero(q2 > 1e-3):
                accept_all[(int(t1), int(t2))] = float(p1[t1] * q2[t2])
        n, seen, drafted, accepted = 400, Counter[tuple[int, int]](), 0, 0
        for seed in range(n):
            sampling = SamplingParams(temperature=0.8, seed=seed)
            cfg = GenerationConfig(max_tokens=3, draft_max=3, sampling=sampling)
            target.reset()
            res = run(target, toks, cfg, learned(loaded, name, target, SamplingParams(temperature=2.0, seed=seed)))
            drafted += res.counters.n_drafted
            accepted += res.counters.n_accepted
            seen[(res.tokens[0], res.tokens[1])] += 1
    finally:
        target.set_features(False)
    assert drafted >= n and 0 < accepted < drafted  # both the accept and the resample branch ran
    # ~20 outcomes, 400 draws: the empirical TV of multinomial draws from `exact` is ~0.04 on
    # average and under 0.11 in 99.99 % of cases (test_engine's pair test: 0.07 and 0.19 at 120);
    # pairs below the 1e-3 cut-off add their mass (here 0.08; seen: 0.11 in all, accepting every
    # draft 0.61-0.73)
    bound = 0.15 + (1.0 - sum(exact.values()))
    assert tv(exact, accept_all) > 2 * bound, "this prompt cannot tell a wrong verifier apart"
    observed = tv({k: v / n for k, v in seen.items()}, exact)
    assert observed < bound, (observed, bound)


def test_a_server_drafts_with_the_heads(trained: heads_training.Trained) -> None:
    """`specli serve --drafter eagle`: answers bit-identical (exact verification) to the same
    server's plain decoding, with tokens the feature drafter drafted and the target kept."""
    import openai

    from harness.processes import running

    questions = ["A farmer has 23 sheep and buys 14 more. How many now?", "Write two lines about the sea."]
    with running(["--target", SMOL, "--draft", "none", "--drafter", "eagle", "--ctx", "2048", "--exact"]) as srv:
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)

        def ask(q: str, **specli: object) -> object:
            return client.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": q}],
                                                  temperature=0, max_tokens=48, extra_body={"specli": specli})

        plain = [ask(q, drafter="none") for q in questions]
        drafted = [ask(q) for q in questions]
    for a, b in zip(plain, drafted):
        assert b.choices[0].message.content == a.choices[0].message.content  # type: ignore[attr-defined]
    figures = [b.model_extra["specli"] for b in drafted]  # type: ignore[attr-defined]
    assert sum(f["accepted_by"].get("eagle", 0) for f in figures) > 0, figures


def test_a_server_learns_the_heads_online(trained: heads_training.Trained, tmp_path: Path) -> None:
    """`specli serve --heads-learn`: rows from what it serves, a round once enough are in and
    it is idle, told in its log and /metrics; its answers stay its plain decoding's."""
    import openai

    from harness.processes import http, running

    folder = tmp_path / trained.folder.name  # adopted weights are saved: the other tests keep theirs
    shutil.copytree(trained.folder, folder, ignore=shutil.ignore_patterns("data", "*state*"))
    args = ["--target", SMOL, "--draft", "none", "--drafter", "eagle", "--ctx", "2048", "--exact", "--heads-learn",
            "--heads-learn-rows", "64", "--heads", str(folder)]
    with running(args) as srv:
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)

        def ask(q: str, **specli: object) -> str:
            r = client.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": q}],
                                               temperature=0, max_tokens=48, extra_body={"specli": specli})
            return str(r.choices[0].message.content)

        plain = [ask(q, drafter="none") for q in ASKS]
        for q in ASKS * 3:
            ask(q)
        end, text = time.monotonic() + 240, ""
        while time.monotonic() < end and "heads_learn_rounds_total{" not in text:
            time.sleep(1)
            text = http("GET", srv.base + "/metrics", timeout=10)[2].decode()
        after = [ask(q) for q in ASKS]
    assert "heads_learn_rounds_total{" in text, srv.log
    rows = re.search(r"^specli:heads_learn_rows_total (\d+)", text, re.M)
    assert rows is not None and int(rows.group(1)) > 64 * 4
    assert re.search(r"heads: round 1 on [\d,]+ served rows .*medusa tau .*eagle tau", srv.log), srv.log
    assert after == plain
    rounds = (store.read_recipe(folder) or {}).get("online", {}).get("rounds", [])
    assert ("adopted" in srv.log) == bool(rounds), srv.log  # adopted weights are saved, and only they


def first_q(loaded: LoadedHeads, name: str, h: np.ndarray, t1: int, n_vocab: int,
            params: SamplingParams) -> np.ndarray:
    """The distribution the drafter draws the token after t1 from."""
    row = np.full(n_vocab, -np.inf, np.float32)
    if name == "medusa":
        row[loaded.medusa.vocab] = loaded.medusa.chain_logits(h, 1)[0]
    else:
        assert loaded.eagle is not None
        row[loaded.eagle.vocab] = loaded.eagle.chain_logits(h, t1, 1)[0]
    return probs_from_logits(row, params)


def test_heads_rm(trained: heads_training.Trained, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["heads", "rm", "nothing-here"])
    assert res.exit_code == 2 and "no heads folder" in res.output


def served_rows(online: OnlineHeads, target: Model, loaded: LoadedHeads, asks: list[str]) -> int:
    """Answers written as a server writes them (features on, the feature drafter drafting),
    watched by `online`; the tokens generated."""
    n = 0
    target.set_features(True)
    try:
        for q in asks:
            prompt = target.chat_tokens([{"role": "user", "content": q}])
            target.reset()
            events = online.watch(target, prompt, generate(target, prompt, GenerationConfig(max_tokens=48, draft_max=3),
                                                          learned(loaded, "eagle", target)))
            n += sum(len(ev.tokens) for ev in events)
    finally:
        target.set_features(False)
    return n


ASKS = ["A shop sells 12 apples and 7 pears. How many fruits?", "Write a line about rain.",
        "Explain what a list is in Python."]


def test_online_learning_keeps_rows_and_adopts_only_better_weights(trained: heads_training.Trained,
                                                                   target: Model, tmp_path: Path) -> None:
    """serve --heads-learn's rows and rounds, on answers written by the real target: a row
    per generated token (its hidden state at the right position: the heads' own lm_head reads
    the target's token back from it), and trained weights replace the live ones (and are
    saved) only when their held-out tau is higher: never when training changed nothing."""
    folder = tmp_path / trained.folder.name
    shutil.copytree(trained.folder, folder, ignore=shutil.ignore_patterns("data", "*state*"))
    heads = load_heads(target.path, SMOL, str(folder), target.n_vocab)
    still = OnlineHeads(heads, folder, target.n_vocab, every=64, lr=0.0)
    generated = served_rows(still, target, heads, ASKS * 4)
    assert generated - 12 <= still.rows_seen <= generated  # at most the prefill's row missing per answer
    rows = still._train.rows()
    in_vocab = np.isin(rows.top, heads.medusa.vocab)
    read_back = heads.medusa.vocab[(rows.hidden[in_vocab].astype(np.float32) @ heads.medusa.w.T).argmax(axis=1)]
    assert (read_back == rows.top[in_vocab]).mean() > 0.9
    assert still.due()
    a0, online0 = heads.medusa.a, (store.read_recipe(folder) or {}).get("online")
    r = still.learn()
    assert r is not None and len(r.verdicts) == 2
    assert all(v.trained == v.live and not v.adopted for v in r.verdicts), r
    assert heads.medusa.a is a0 and (store.read_recipe(folder) or {}).get("online") == online0
    learning = OnlineHeads(heads, folder, target.n_vocab, every=64, lr=3e-3)
    learning._train, learning._held = still._train, still._held  # the held-out questions were asked again
    r = learning.learn()
    assert r is not None
    medusa, eagle = r.verdicts  # answers learned from were held out too: training raises tau (seen: 1.29 -> 2.28)
    assert medusa.adopted and medusa.trained > medusa.live + 0.2, r
    assert eagle.adopted == (eagle.trained > eagle.live), r  # seen: 1.38 -> 1.59
    assert heads.medusa.a is not a0
    saved = (store.read_recipe(folder) or {})["online"]["rounds"][-1]
    assert saved["tau"]["medusa"] == {"live": r.verdicts[0].live, "trained": r.verdicts[0].trained, "adopted": True}
    again = load_heads(target.path, SMOL, str(folder), target.n_vocab)
    assert np.array_equal(again.medusa.a, heads.medusa.a) and again.eagle is not None and heads.eagle is not None
    assert np.array_equal(again.eagle.fc, heads.eagle.fc)
    assert "round 1" in r.line() and ("adopted" in r.line() or "kept" in r.line())


def test_a_recipe_that_holds_no_document_out_is_refused_before_any_work(tmp_path: Path) -> None:
    """`--rows` too few for one held-out document: exit 2 at once, naming the rows it takes,
    with nothing extracted (it used to make every row first, then stop)."""
    heads = tmp_path / "heads"
    # an empty history store: the suite's earlier answers would be short documents that
    # hold one out within 2,000 rows (then training rightly goes ahead)
    res = CliRunner().invoke(app, ["heads", "train", "--target", SMOL, "--rows", "2000", "--max-new", "384"],
                             env={"SPECLI_HEADS_DIR": str(heads), "SPECLI_HISTORY_DIR": str(tmp_path / "history")})
    assert res.exit_code == 2, res.output
    need = re.search(r"use --rows ([\d,]+) or more", res.output)  # 9 x 384 + 1 without history
    assert "holds no document out" in res.output and need is not None and int(need.group(1).replace(",", "")) > 2000
    assert not heads.exists() or not any(heads.iterdir())
