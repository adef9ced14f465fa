"""Gemma 3 keeps a sliding-window cache (512 positions for the 270m model). Rejected draft
tokens are rolled back step after step past the window, and after a restored prompt
cache, and the output still equals plain decoding; a model whose memory cannot be rolled
back (recurrent, hybrid) is never drafted for."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import llama_cpp
import pytest
from conftest import GEMMA, model_file

from specli.backend import LoadOptions, Model
from specli.engine import GenerationConfig, run
from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT
from specli.runtime.measure.calibration import measure_exact_batch
from specli.types import Draft, Drafter

WINDOW_TEXT = "The river keeps its own counsel; the stones remember every flood. " * 70  # ~1,000 tokens


@pytest.fixture(scope="module")
def gemma() -> Iterator[Model]:
    m = Model(model_file(GEMMA), LoadOptions(n_ctx=2048, exact_verify=True))
    m.exact_batch = measure_exact_batch(m, m.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT])
    yield m
    m.close()


class HalfRight(Drafter):
    """Drafts the known answer with its third token wrong: every step keeps two tokens and
    rolls the rest back."""

    name = "half-right"

    def __init__(self, answer: Sequence[int], n_prompt: int) -> None:
        self.answer, self.n_prompt = list(answer), n_prompt

    def propose(self, history: Sequence[int], k: int) -> Draft:
        at = len(history) - self.n_prompt
        tokens = self.answer[at:at + k]
        if len(tokens) >= 3:
            tokens[2] = (tokens[2] + 1) % 1000
        return Draft(tokens, None, self.name)


def test_rollback_past_the_window_and_after_a_restored_cache_equals_plain(gemma: Model) -> None:
    assert llama_cpp.llama_model_n_swa(gemma._model) == 512 and gemma.rolls_back
    prompt = gemma.tokenize(WINDOW_TEXT)[:600]
    cfg = GenerationConfig(max_tokens=96, draft_max=5, exact=True)
    gemma.reset()
    plain = run(gemma, prompt, GenerationConfig(max_tokens=96))
    gemma.reset()
    spec = run(gemma, prompt, cfg, HalfRight(plain.tokens, len(prompt)))
    assert spec.tokens == plain.tokens
    assert spec.counters.n_drafted - spec.counters.n_accepted > 20  # many rollbacks, past position 512
    # a prompt cache: the prompt's state saved, the cache emptied and the state restored
    gemma.reset()
    gemma.decode(prompt[:-1])
    state = gemma.save_state()
    gemma.reset()
    assert gemma.load_state(state, prompt[:-1])
    again = run(gemma, prompt, cfg, HalfRight(plain.tokens, len(prompt)))
    assert again.tokens == plain.tokens


def test_a_model_that_cannot_roll_back_is_not_drafted_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp says which models keep a recurrent state; the runtime then drafts with nothing."""
    from specli import profiles
    from specli.runtime import open_runtime

    monkeypatch.setattr(llama_cpp, "llama_model_is_recurrent", lambda model: True)
    s = profiles.resolve_settings(None, {"target": GEMMA, "drafter": "ngram", "ctx": 512})
    rt = open_runtime(s)
    try:
        assert not rt.target.rolls_back and rt.drafter() is None
        assert any("cannot roll" in n and "speculation is off" in n for n in rt.notes), rt.notes
    finally:
        rt.close()
