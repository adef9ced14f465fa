"""The speculative loop on real models: losslessness, stops, cache reuse, metrics."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import QWEN_DRAFT, QWEN_TARGET, SMOL, model_file
from conftest import total_variation as tv

from specli.backend import LoadOptions, Model
from specli.bench import first_difference
from specli.drafters import DraftModelDrafter, NgramDrafter
from specli.engine import (
    FINISH_CONTEXT,
    FINISH_LENGTH,
    FINISH_STOP,
    GenerationConfig,
    generate,
    run,
    verify_step,
)
from specli.engine.metrics import acceptance_rate, mean_accepted_length
from specli.engine.sampling import probs_from_logits
from specli.engine.verify import MarginRecorder
from specli.errors import ContextError, UsageError
from specli.runtime.measure.calibration import Calibration
from specli.runtime.pair import check_pair
from specli.types import Draft, Drafter, SamplingParams, Verdict

PROMPTS = [
    "Write a Python function that merges two sorted lists, with a docstring and two doctests.",
    "Explain in detail how a hash map handles collisions, with an example in C.",
    "Write a bash script that backs up a directory to a tarball named with today's date.",
    "Write a Python class implementing an LRU cache with get and put, with docstrings and unit tests.",
    "List ten tips for writing readable SQL queries, each with a one-line example.",
]


def chat(model: Model, text: str) -> list[int]:
    return model.chat_tokens([{"role": "user", "content": text}])


def greedy(n: int, k: int = 4) -> GenerationConfig:
    return GenerationConfig(max_tokens=n, draft_max=k)


# ---------------------------------------------------------------- SmolLM2 (fast)


def test_baseline_is_plain_greedy_decoding(smol: Model) -> None:
    """The engine without a drafter equals a hand-written argmax loop."""
    prompt = chat(smol, "Name three colours.")
    res = run(smol, prompt, greedy(24))
    smol.reset()
    logits = smol.decode(prompt, [len(prompt) - 1])[0]
    expected = []
    for _ in range(24):
        tok = int(logits.argmax())
        if smol.is_eog(tok):
            break
        expected.append(tok)
        logits = smol.decode([tok], [0])[0]
    assert res.tokens == expected
    assert res.counters.n_drafted == 0
    assert mean_accepted_length(res.counters) == 1.0


def test_smollm_with_itself_accepts_almost_everything(smol: Model, smol_draft: Model) -> None:
    prompt = chat(smol, "Write a short poem about autumn leaves.")
    base = run(smol, prompt, greedy(96))
    k = 4
    d = DraftModelDrafter(smol_draft)
    spec = run(smol, prompt, greedy(96, k), d)
    assert spec.tokens == base.tokens
    c = spec.counters
    assert acceptance_rate(c) > 0.95
    assert mean_accepted_length(c) > 0.9 * (k + 1)
    assert c.n_target_forwards < len(base.tokens) / 3


def test_random_drafts_are_all_rejected_but_output_unchanged(smol: Model) -> None:
    class RandomDrafter(Drafter):
        name = "random"
        decode_seconds = 0.0

        def __init__(self) -> None:
            self.rng = np.random.default_rng(0)

        def begin(self, history: list[int]) -> None:
            pass

        def propose(self, history: list[int], k: int) -> Draft:
            return Draft([int(t) for t in self.rng.integers(1000, 40000, size=k)], None, self.name)

        def accept(self, history: list[int], n_accepted: int, verify_seconds: float) -> None:
            pass

        def end(self, history: list[int]) -> None:
            pass

    prompt = chat(smol, "What is the capital of Italy?")
    base = run(smol, prompt, greedy(40))
    spec = run(smol, prompt, greedy(40, 5), RandomDrafter())
    assert spec.tokens == base.tokens
    assert spec.counters.n_accepted <= 1
    assert spec.counters.n_target_forwards == base.counters.n_target_forwards


def test_max_tokens_is_never_exceeded_mid_acceptance(smol: Model, smol_draft: Model) -> None:
    prompt = chat(smol, "Count from one to fifty in words.")
    for n in (1, 2, 5, 7, 13):
        res = run(smol, prompt, greedy(n, 6), DraftModelDrafter(smol_draft))
        assert len(res.tokens) == n
        assert res.finish_reason == FINISH_LENGTH
        assert res.counters.n_generated == n


def test_eos_inside_accepted_draft_stops_there(smol: Model, smol_draft: Model) -> None:
    prompt = chat(smol, "Reply with just the word: yes")
    base = run(smol, prompt, greedy(64))
    assert base.finish_reason == FINISH_STOP
    spec = run(smol, prompt, greedy(64, 8), DraftModelDrafter(smol_draft))
    assert spec.tokens == base.tokens
    assert spec.finish_reason == FINISH_STOP
    assert not any(smol.is_eog(t) for t in spec.tokens)


def test_stop_string_spanning_tokens(smol: Model, smol_draft: Model) -> None:
    prompt = chat(smol, "Count from one to twenty, separated by commas.")
    base = run(smol, prompt, greedy(80))
    assert len(base.text) > 20
    stop = base.text[10:14]  # most likely spans a token boundary
    res = run(smol, prompt, GenerationConfig(max_tokens=80, draft_max=4, stop=(stop,)), DraftModelDrafter(smol_draft))
    assert res.finish_reason == FINISH_STOP
    assert res.text == base.text[: base.text.index(stop)]


def test_context_limit_gives_a_reason_not_a_crash() -> None:
    from specli.backend import LoadOptions

    with Model(model_file(SMOL), LoadOptions(n_ctx=96)) as m, Model(model_file(SMOL), LoadOptions(n_ctx=96)) as d:
        prompt = chat(m, "Write a long story about a dragon.")
        res = run(m, prompt, greedy(500, 4), DraftModelDrafter(d))
        assert res.finish_reason in (FINISH_CONTEXT, FINISH_STOP)
        assert m.n_past <= m.n_ctx
        with pytest.raises(ContextError, match="more than"):
            run(m, list(range(200, 210 + m.n_ctx)), greedy(4))
        with pytest.raises(UsageError):
            run(m, [], greedy(4))


def test_cache_is_reused_across_turns(smol: Model, smol_draft: Model) -> None:
    d = DraftModelDrafter(smol_draft)
    msgs = [{"role": "user", "content": "Say hello."}]
    first = run(smol, smol.chat_tokens(msgs), greedy(16), d)
    msgs += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Now say goodbye."}]
    prompt2 = smol.chat_tokens(msgs)
    second = run(smol, prompt2, greedy(16), d)
    assert second.counters.n_prompt_reused > len(prompt2) // 2
    smol.reset()
    smol_draft.reset()
    fresh = run(smol, prompt2, greedy(16), DraftModelDrafter(smol_draft))
    assert fresh.counters.n_prompt_reused == 0
    assert fresh.tokens == second.tokens


def test_events_carry_text_and_draft_flags(smol: Model, smol_draft: Model) -> None:
    prompt = chat(smol, "Write the alphabet.")
    events = list(generate(smol, prompt, greedy(40, 4), DraftModelDrafter(smol_draft)))
    assert events[-1].finish_reason is not None
    assert all(ev.finish_reason is None for ev in events[:-1])
    assert all(len(ev.from_draft) == len(ev.tokens) for ev in events)
    # an accepted end-of-generation token counts as accepted but is not emitted
    assert events[-1].counters.n_accepted - sum(sum(ev.from_draft) for ev in events) in (0, 1)
    assert "".join(ev.text for ev in events) == smol.detokenize(t for ev in events for t in ev.tokens)


def test_seeded_sampling_is_reproducible(smol: Model, smol_draft: Model) -> None:
    prompt = chat(smol, "Tell me a fun fact.")
    cfg = GenerationConfig(max_tokens=32, draft_max=4, sampling=SamplingParams(temperature=0.8, seed=7))
    a = run(smol, prompt, cfg, DraftModelDrafter(smol_draft, cfg.sampling))
    b = run(smol, prompt, cfg, DraftModelDrafter(smol_draft, cfg.sampling))
    assert a.tokens == b.tokens


def test_injected_broken_verifier_changes_output(smol: Model, smol_draft: Model) -> None:
    """The equality checks above can fail: accepting every draft token breaks them."""

    def accept_all(draft: Draft, logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> Verdict:
        return Verdict(len(draft.tokens), int(logits[len(draft.tokens)].argmax()))

    class Wrong(DraftModelDrafter):
        def propose(self, history, k):  # type: ignore[no-untyped-def]
            d = super().propose(history, k)
            return Draft([(t + 1) % 1000 for t in d.tokens], None, "wrong")

    prompt = chat(smol, "Write the alphabet.")
    base = run(smol, prompt, greedy(24))
    broken = run(smol, prompt, greedy(24, 3), Wrong(smol_draft), verifier=accept_all)
    assert broken.tokens != base.tokens


# ------------------------------------------------------------- Qwen pair (real)


def test_qwen_pair_is_compatible() -> None:
    from specli.backend import free_vocab_handle, read_vocab

    t, th = read_vocab(model_file(QWEN_TARGET))
    d, dh = read_vocab(model_file(QWEN_DRAFT))
    try:
        assert check_pair(t, d) == 151936
    finally:
        free_vocab_handle(th)
        free_vocab_handle(dh)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_qwen_pair_greedy_equals_target_alone(prompt: str, qwen_target: Model, qwen_draft: Model,
                                              qwen_calibration: Calibration) -> None:
    """One-batch verification (the default): the target's tokens, except that a first
    divergence may only be the baseline's runner-up within the measured batching noise."""
    toks = chat(qwen_target, prompt)
    margins = MarginRecorder(verify_step)
    base = run(qwen_target, toks, greedy(128), None, margins)
    spec = run(qwen_target, toks, greedy(128, 4), DraftModelDrafter(qwen_draft, draft_p_min=0.3))
    assert len(base.tokens) >= 100
    diff = first_difference(base.tokens, spec.tokens)
    if diff is not None:
        runner_up, gap = margins.margins[diff]
        assert spec.tokens[diff] == runner_up and gap <= qwen_calibration.tie_bound, (diff, gap)
    assert spec.counters.n_accepted > 0


def test_a_real_near_tie_is_told_apart_from_a_mismatch(qwen_target: Model, qwen_calibration: Calibration) -> None:
    """On the Q4_K_M target's own greedy output: the closest call between its two best
    tokens is within the measured batching noise, so an output that took the runner-up
    there is a near-tie in batch mode, a mismatch in exact mode, and one that took any
    other token is a mismatch."""
    from specli.bench import Mode, classify_divergence, record_from_counters
    from specli.bench.suites import Prompt
    from specli.engine.metrics import Counters

    def record(tokens: list[int], verify: str = "batch", margins: list[tuple[int, float]] | None = None):  # type: ignore[no-untyped-def]
        return record_from_counters(Counters(), mode=Mode("m", "draft"), prompt=Prompt("p", "c", ("x",)),
                                    prompt_index=0, repeat=0, turn=0, tokens=tokens, text="", finish_reason=None,
                                    temperature=0.0, verify=verify, margins=margins)

    toks = chat(qwen_target, PROMPTS[1])
    margins = MarginRecorder(verify_step)
    base = run(qwen_target, toks, greedy(96), None, margins)
    i = min(range(len(base.tokens)), key=lambda j: margins.margins[j][1])
    runner_up, gap = margins.margins[i]
    assert 0 <= gap <= qwen_calibration.tie_bound, (gap, qwen_calibration.tie_bound)
    baseline = record(base.tokens, margins=margins.margins)
    flipped = [*base.tokens[:i], runner_up]
    assert classify_divergence(baseline, record(flipped), i, qwen_calibration.tie_bound) == "near-tie"
    assert classify_divergence(baseline, record(flipped, "exact"), i, qwen_calibration.tie_bound) == "mismatch"
    other = next(t for t in range(qwen_target.n_vocab) if t not in (runner_up, base.tokens[i]))
    wrong = record([*base.tokens[:i], other])
    assert classify_divergence(baseline, wrong, i, qwen_calibration.tie_bound) == "mismatch"


@pytest.fixture(scope="module")
def qwen_exact() -> Iterator[Model]:
    from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT
    from specli.runtime.measure.calibration import measure_exact_batch

    m = Model(model_file(QWEN_TARGET), LoadOptions(n_ctx=4096, exact_verify=True))
    m.exact_batch = measure_exact_batch(m, m.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT])
    yield m
    m.close()


@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_qwen_exact_mode_is_bit_identical(prompt: str, qwen_exact: Model) -> None:
    """--exact: every token equals one-token decoding, with long n-gram drafts verified
    in the measured exact chunks (stopping at the first rejection)."""
    toks = chat(qwen_exact, prompt)
    base = run(qwen_exact, toks, greedy(128))
    cfg = GenerationConfig(max_tokens=128, draft_max=16, exact=True)
    spec = run(qwen_exact, toks, cfg, NgramDrafter(3, 12, qwen_exact.is_eog))
    assert spec.tokens == base.tokens
    assert spec.counters.n_drafted > 0


def test_qwen_pair_sampling_matches_target_distribution(qwen_target: Model, qwen_draft: Model) -> None:
    """At temperature 0.8 the first two emitted tokens follow the target's own
    distribution p(t1) p(t2 | t1), with t2 coming out of a drafted step: the draft model
    proposes t2 from q(t2 | t1), which rejection sampling accepts or replaces."""
    params = SamplingParams(temperature=0.8)
    # here the pair disagrees on t2 (target ", in", draft ", there"), so a wrong verifier shows
    toks = qwen_target.tokenize("Once upon a time", add_special=False)
    qwen_target.reset()
    qwen_draft.reset()
    p1 = probs_from_logits(qwen_target.decode(toks, [len(toks) - 1])[0], params)
    qwen_draft.decode(toks[:-1])
    exact: dict[tuple[int, int], float] = {}
    accept_all: dict[tuple[int, int], float] = {}  # what accepting every draft token gives
    for t1 in np.flatnonzero(p1 > 1e-3):
        qwen_target.rollback(len(toks))
        p2 = probs_from_logits(qwen_target.decode([int(t1)], [0])[0], params)
        qwen_draft.rollback(len(toks) - 1)
        q2 = probs_from_logits(qwen_draft.decode([toks[-1], int(t1)], [1])[0], params)
        for t2 in np.flatnonzero(p2 > 1e-3):
            exact[(int(t1), int(t2))] = float(p1[t1] * p2[t2])
        for t2 in np.flatnonzero(q2 > 1e-3):
            accept_all[(int(t1), int(t2))] = float(p1[t1] * q2[t2])

    n = 120
    seen: Counter[tuple[int, int]] = Counter()
    n_drafted = n_accepted = 0
    for seed in range(n):
        # max_tokens=3: t1 comes from the prefill, then one step drafts k = 1 token for t2
        cfg = GenerationConfig(max_tokens=3, draft_max=3, sampling=SamplingParams(temperature=0.8, seed=seed))
        res = run(qwen_target, toks, cfg, DraftModelDrafter(qwen_draft, cfg.sampling))
        assert res.counters.n_drafted > 0
        n_drafted += res.counters.n_drafted
        n_accepted += res.counters.n_accepted
        seen[(res.tokens[0], res.tokens[1])] += 1
    assert 0 < n_accepted < n_drafted  # both the accept and the resample branch ran
    missing_mass = 1.0 - sum(exact.values())  # pairs below the 1e-3 cut-off
    # ~20 outcomes, 120 draws: multinomial draws from `exact` give an empirical TV of 0.07
    # on average and under 0.19 in 99.99% of cases; accepting every draft token (the draft
    # continues ", there", the target ", in") lands ~0.47 away, beyond the bound even with
    # noise as large as the bound itself
    bound = 0.2 + missing_mass
    assert tv(exact, accept_all) > 2 * bound, "this prompt cannot tell a wrong verifier apart"
    observed = tv({k: v / n for k, v in seen.items()}, exact)
    assert observed < bound, (observed, bound)


def test_argmax_in_llama_cpp_graph_equals_argmax_of_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """decode_argmax (the greedy sampler in llama.cpp's graph, off by default on CPU)
    against numpy's argmax of the same batch's rows, and whole greedy generations with and
    without it."""
    monkeypatch.setenv("SPECLI_DEVICE_ARGMAX", "on")
    smol = Model(model_file(SMOL), LoadOptions(n_ctx=2048))
    assert smol.device_argmax
    prompt = chat(smol, "List five rivers of Europe and one fact about each.")
    smol.reset()
    smol.decode(prompt[:-1])
    n0 = smol.n_past
    batch = [prompt[-1], *run(smol, prompt, greedy(24)).tokens[:20]]
    smol.rollback(n0)
    argmax_at = smol.decode_argmax(batch)
    in_graph = [argmax_at(i) for i in range(len(batch))]
    smol.rollback(n0)
    rows = smol.decode(batch, range(len(batch)))
    assert in_graph == [int(r.argmax()) for r in rows]

    def rows_verifier(*args):  # type: ignore[no-untyped-def]
        return verify_step(*args)  # not the default verifier: the engine reads the rows

    for k in (0, 4):
        drafter = NgramDrafter() if k else None
        in_graph_run = run(smol, prompt, greedy(64, k), drafter)
        rows_run = run(smol, prompt, greedy(64, k), NgramDrafter() if k else None, rows_verifier)
        assert in_graph_run.tokens == rows_run.tokens
    smol.close()
    monkeypatch.setenv("SPECLI_DEVICE_ARGMAX", "auto")
    assert not Model(model_file(SMOL), LoadOptions(n_ctx=512)).device_argmax  # the CPU's default


@pytest.mark.parametrize("drafter_kind", ["none", "ngram"])
def test_host_split_adds_up_to_the_wall_time(smol: Model, drafter_kind: str) -> None:
    """Prefill + every host part + llama.cpp's decode calls = the wall time the caller
    measured around the whole generation (within 5 %), each part non-negative."""
    from specli.engine.metrics import HOST_PARTS, host_ms_per_forward

    prompt = chat(smol, "Repeat this line three times: the quick brown fox jumps over the lazy dog.")
    smol.reset()
    drafter = NgramDrafter() if drafter_kind == "ngram" else None
    t0 = time.perf_counter()
    out = run(smol, prompt, greedy(80, 6), drafter)
    wall = time.perf_counter() - t0
    c = out.counters
    h = host_ms_per_forward(c)
    assert all(h[k] >= 0 for k in HOST_PARTS) and h["llama"] > 0
    accounted = c.t_prefill + (h["total"] + h["llama"]) * c.n_target_forwards / 1000
    assert accounted == pytest.approx(wall, rel=0.05)
    assert 0 < c.t_text <= c.t_outside
    if drafter is not None:
        assert c.n_drafted > 0 and c.t_draft > 0
