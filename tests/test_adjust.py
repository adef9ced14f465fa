"""Logit bias, presence and frequency penalties and log-probabilities on real models:
speculative decoding under them gives one-token decoding's output under them, and a
penalty applied to the wrong prefix of a draft is caught."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

import specli.engine.core as core
from specli.drafters import DraftModelDrafter, NgramDrafter
from specli.engine import GenerationConfig, run
from specli.engine.adjust import Adjust, AdjustedRows, token_logprob
from specli.types import Draft

PENALTY = Adjust(presence=0.6, frequency=0.9)


def chat(model: Any, text: str) -> list[int]:
    return model.chat_tokens([{"role": "user", "content": text}])


def config(adjust: Adjust = Adjust(), k: int = 0, logprobs: int | None = None, n: int = 48) -> GenerationConfig:
    return GenerationConfig(max_tokens=n, draft_max=k, adjust=adjust, logprobs=logprobs)


def by_hand(model: Any, prompt: list[int], adjust: Adjust, n: int) -> list[int]:
    """One-token greedy decoding with the bias and penalties over the generated tokens."""
    model.reset()
    row = model.decode(prompt, [len(prompt) - 1])[0]
    out: list[int] = []
    for _ in range(n):
        row = adjust.biased(row)
        for t, c in Counter(out).items():
            row[t] -= adjust.frequency * c + adjust.presence
        tok = int(row.argmax())
        if model.is_eog(tok):
            break
        out.append(tok)
        row = model.decode([tok], [0])[0]
    return out


def test_penalties_on_each_rows_own_prefix(smol: Any, smol_draft: Any) -> None:
    prompt = chat(smol, "List the days of the week, twice.")
    plain = run(smol, prompt, config()).tokens
    base = run(smol, prompt, config(PENALTY)).tokens
    assert base != plain  # the penalties change this answer
    assert base == by_hand(smol, prompt, PENALTY, 48)
    for drafter in (DraftModelDrafter(smol_draft), NgramDrafter(1, 3, smol.is_eog)):
        spec = run(smol, prompt, config(PENALTY, 6), drafter)
        assert spec.tokens == base
        assert spec.counters.n_accepted > 0


def test_a_penalty_on_the_wrong_prefix_is_caught(smol: Any, smol_draft: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows penalised for the generated tokens only (not the draft tokens before them):
    drafts of the right answer are rejected where a token repeats within a draft, and
    the output leaves one-token decoding's. The right rows accept them all."""
    prompt = chat(smol, "List the days of the week, twice.")
    base = run(smol, prompt, config(PENALTY)).tokens

    class Replay(NgramDrafter):  # drafts the penalised answer itself
        def propose(self, history: Any, k: int) -> Draft:
            at = len(history) - len(prompt)
            return Draft(base[at : at + k], None, "replay")

    right = run(smol, prompt, config(PENALTY, 8), Replay())
    assert right.tokens == base and right.counters.n_accepted == right.counters.n_drafted

    class OneTooMany(AdjustedRows):  # row i also penalised for the token it verifies
        def before(self, i: int) -> Any:
            return self._draft[: i + 1]

    class NoDraft(AdjustedRows):  # rows penalised for the generated tokens only
        def before(self, i: int) -> Any:
            return []

    class WholeDraft(AdjustedRows):  # every row penalised for the whole draft
        def before(self, i: int) -> Any:
            return self._draft

    for wrong in (OneTooMany, NoDraft, WholeDraft):
        monkeypatch.setattr(core, "AdjustedRows", wrong)
        assert run(smol, prompt, config(PENALTY, 8), Replay()).tokens != base, wrong.__name__


def test_logit_bias_on_target_and_draft(smol: Any, smol_draft: Any) -> None:
    prompt = chat(smol, "Name three colours.")
    plain = run(smol, prompt, config(n=8)).tokens
    banned = Adjust(bias=((plain[0], -100.0),))
    for drafter in (None, DraftModelDrafter(smol_draft, bias=banned)):
        out = run(smol, prompt, config(banned, 4 if drafter else 0, n=8), drafter).tokens
        assert out[0] != plain[0] and out == by_hand(smol, prompt, banned, 8)
    forced = Adjust(bias=((1234, 100.0),))
    out = run(smol, prompt, config(forced, 4, n=6), DraftModelDrafter(smol_draft, bias=forced))
    assert out.tokens == [1234] * 6 and out.counters.n_accepted >= 3  # the draft drafts under the bias too


def test_logprobs_are_the_rows_log_softmax(smol: Any, smol_draft: Any) -> None:
    prompt = chat(smol, "Write a haiku about rain.")
    base = run(smol, prompt, config(logprobs=3, n=16))
    smol.reset()
    rows = smol.decode([*prompt, *base.tokens[:-1]], range(len(prompt) - 1, len(prompt) + len(base.tokens) - 1))
    assert base.logprobs is not None and len(base.logprobs) == len(base.tokens)
    for lp, row, tok in zip(base.logprobs, rows, base.tokens):
        want = token_logprob(row, tok, 3)
        assert lp.token == tok and abs(lp.logprob - want.logprob) < 0.05
        assert lp.top[0][0] == tok and [t for t, _ in lp.top] == [t for t, _ in want.top]  # greedy: the likeliest
        assert np.isclose(np.exp([v for _, v in lp.top]).sum(), np.exp([v for _, v in want.top]).sum(), atol=0.02)
    spec = run(smol, prompt, config(logprobs=0, k=4, n=16), DraftModelDrafter(smol_draft))
    assert spec.tokens == base.tokens and spec.logprobs is not None
    assert np.allclose([x.logprob for x in spec.logprobs], [x.logprob for x in base.logprobs], atol=0.05)
