"""Drafting across tokenizers on real models: SmolLM2's text drafted for the Qwen2.5 0.5B
target (and Qwen's for Gemma 3). Greedy output is the target's; under sampling the
first drafted step follows the target's distribution, and accepting every point-mass
draft would not; the draft's cache follows the text without reading it again."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from conftest import GEMMA, QWEN_DRAFT, SMOL, model_file
from conftest import total_variation as tv

from specli.backend import LoadOptions, Model
from specli.drafters import CrossVocabDrafter
from specli.drafters.cross_vocab import complete_utf8, role_mapped
from specli.engine import GenerationConfig, run, verify_step
from specli.engine.sampling import probs_from_logits
from specli.engine.verify import Verifier
from specli.types import Draft, SamplingParams, Verdict

CODE = "Write a Python function that returns the sum of the squares of a list, with a docstring."


@pytest.fixture(scope="module")
def qwen() -> Iterator[Model]:
    m = Model(model_file(QWEN_DRAFT), LoadOptions(n_ctx=1024, exact_verify=True))
    m.exact_batch = 1  # --exact in one-token chunks: equal to plain decoding by construction, on any machine
    yield m
    m.close()


@pytest.fixture(scope="module")
def smol() -> Iterator[Model]:
    m = Model(model_file(SMOL), LoadOptions(n_ctx=1024))
    yield m
    m.close()


def chat(model: Model, text: str) -> list[int]:
    return model.chat_tokens([{"role": "user", "content": text}])


def test_complete_utf8_never_ends_inside_a_character() -> None:
    text = "añ€𝄞".encode()
    for n in range(len(text) + 1):
        cut = complete_utf8(text[:n])
        text[:cut].decode("utf-8")  # whole characters only
        assert n - cut < 4 and (cut == n or n < len(text))


def test_special_tokens_are_mapped_by_role(qwen: Model, smol: Model) -> None:
    """Qwen's ChatML prompt becomes SmolLM2's own control tokens (both use `<|im_start|>`),
    its end of turn SmolLM2's."""
    prompt = chat(qwen, "Hi")
    mapped = role_mapped([*prompt, qwen.vocab.info().eot], qwen, smol)
    im_start = smol.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert len(im_start) == 1 and mapped.count(im_start[0]) == prompt.count(prompt[0])
    assert mapped[-1] == smol.vocab.info().eot
    assert smol.detokenize(mapped).count("Hi") == 1


def test_greedy_output_is_the_targets_and_the_cache_follows_the_text(qwen: Model, smol: Model) -> None:
    decoded: list[int] = []
    plain_decode = smol.decode

    def counting(tokens: Sequence[int], rows: Sequence[int] = (), seq: int = 0) -> np.ndarray:
        decoded.append(len(tokens))
        return plain_decode(tokens, rows, seq)

    prompt = chat(qwen, CODE)
    base = run(qwen, prompt, GenerationConfig(max_tokens=48, draft_max=4, exact=True))
    smol.reset()
    drafter = CrossVocabDrafter(smol, qwen, {tuple(prompt): chat(smol, CODE)})
    smol.decode = counting  # type: ignore[method-assign]
    try:
        spec = run(qwen, prompt, GenerationConfig(max_tokens=48, draft_max=4, exact=True), drafter)
    finally:
        del smol.decode
    assert spec.tokens == base.tokens
    assert spec.counters.n_accepted > 0, spec.counters
    # the prompt once, then about a token a step for the text plus the draft's own steps:
    # never the whole context again
    n_prompt = len(chat(smol, CODE))
    assert n_prompt <= decoded[0] <= n_prompt + 2  # with the first answer token's text
    assert max(decoded[1:]) < 16 and sum(decoded) < n_prompt + 3 * len(spec.tokens), decoded
    # what the cache holds is the draft's tokenization of the accepted text (a prefix)
    text = qwen.vocab.detokenize(spec.tokens[:-1]).encode()
    held = b"".join(smol.vocab.piece(t) for t in smol.tokens[n_prompt:])
    assert text.startswith(held[: len(text) - 16]) and len(held) > len(text) // 2
    # auto prices it per target token proposed: the draft steps' time, spread over them
    drafter.begin(prompt)
    d = drafter.propose(prompt + spec.tokens[:8], 4)
    assert len(drafter.step_seconds) == max(1, len(d.tokens)) and sum(drafter.step_seconds) > 0


def test_qwen_drafts_for_gemma_greedy_equal() -> None:
    with Model(model_file(GEMMA), LoadOptions(n_ctx=1024, exact_verify=True)) as gemma, \
            Model(model_file(QWEN_DRAFT), LoadOptions(n_ctx=1024)) as qwen:
        gemma.exact_batch = 1
        prompt = gemma.tokenize("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")
        cfg = GenerationConfig(max_tokens=48, draft_max=4, exact=True)
        base = run(gemma, prompt, cfg)
        spec = run(gemma, prompt, cfg, CrossVocabDrafter(qwen, gemma))
        assert spec.tokens == base.tokens
        assert spec.counters.n_drafted > 0


def accept_all(draft: Draft, logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> Verdict:
    """A wrong rule: every drafted token kept."""
    return Verdict(len(draft.tokens), int(logits[len(draft.tokens)].argmax()))


def test_sampling_keeps_the_targets_distribution_and_a_wrong_rule_fails(qwen: Model, smol: Model) -> None:
    """At temperature 0.8 the first two tokens follow p(t1) p(t2 | t1) with t2 from a drafted
    step (a point mass on SmolLM2's re-tokenized text); accepting every draft lands far
    from it, beyond the same bound, so the test can fail."""
    params = SamplingParams(temperature=0.8)
    toks = qwen.tokenize("Once upon a time", add_special=False)
    qwen.reset()
    p1 = probs_from_logits(qwen.decode(toks, [len(toks) - 1])[0], params)
    exact: dict[tuple[int, int], float] = {}
    for t1 in np.flatnonzero(p1 > 1e-3):
        qwen.rollback(len(toks))
        p2 = probs_from_logits(qwen.decode([int(t1)], [0])[0], params)
        for t2 in np.flatnonzero(p2 > 1e-3):
            exact[(int(t1), int(t2))] = float(p1[t1] * p2[t2])
    bound = 0.2 + 1.0 - sum(exact.values())  # 120 draws over ~20 outcomes: under 0.19 in 99.99 %

    def observed(verifier: Verifier) -> tuple[float, int]:
        seen: Counter[tuple[int, int]] = Counter()
        n_drafted = 0
        for seed in range(120):
            cfg = GenerationConfig(max_tokens=3, draft_max=3, sampling=SamplingParams(temperature=0.8, seed=seed))
            res = run(qwen, toks, cfg, CrossVocabDrafter(smol, qwen), verifier)
            n_drafted += res.counters.n_drafted
            seen[(res.tokens[0], res.tokens[1])] += 1
        return tv({k: v / 120 for k, v in seen.items()}, exact), n_drafted

    right, n_drafted = observed(verify_step)
    assert n_drafted > 60  # most second tokens came out of a drafted step
    assert right < bound, (right, bound)
    wrong, _ = observed(accept_all)
    assert wrong > bound, (wrong, bound)
