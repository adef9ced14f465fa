"""The target's hidden states beside its logits (backend.features), for the learned
drafters: read from the rows a decode already computes, with the logits unchanged bit
for bit (real Qwen2.5-Coder 0.5B, the family the heads are for; SmolLM2 for two
sequences in one batch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SMOL, model_file

from specli.errors import BackendError

TEXT = (Path(__file__).resolve().parent.parent / "specli" / "engine" / "grammar.py").read_text()[:6000]


def _run(m: Any, toks: list[int], features: bool, rows: list[int] | range) -> tuple[np.ndarray, ...]:
    """A prefill past n_batch (its last row), the prompt's last token alone, a plain step,
    a verify batch of 8 (`rows`), and the hidden states of that batch."""
    m.reset()
    m.set_features(features)
    try:
        prefill = m.decode(toks[:599], [598]).copy()
        last = m.decode(toks[599:600], [0]).copy()
        step = m.decode(toks[600:601], [0]).copy()
        verify = m.decode(toks[601:609], rows).copy()
        hidden = m.hidden().copy() if features else np.empty(0)
    finally:
        m.set_features(False)
    return prefill, last, step, verify, hidden


def test_logits_are_bit_identical_with_features_on_and_off(qwen_draft: Any) -> None:
    """Bit for bit where a decode's rows are few (a step, a verify batch); a prefill's
    last row to float noise only: with features on every prompt row is an output, and
    the lm_head over hundreds of rows may take another kernel path (the 1.5B's 512-row
    prefill differs, benchmarks.features_cost), so the prompt's last token is decoded
    alone where a drafter needs features and the exact logits."""
    toks = qwen_draft.tokenize(TEXT)[:609]
    assert len(toks) == 609 and qwen_draft.n_batch < 599  # the prefill is two llama_decode calls
    off = _run(qwen_draft, toks, False, range(8))
    on = _run(qwen_draft, toks, True, range(8))
    assert off[0].argmax() == on[0].argmax() and np.allclose(off[0], on[0], rtol=1e-3, atol=1e-2)
    for a, b in zip(off[1:4], on[1:4]):
        assert a.shape == b.shape and np.array_equal(a, b)
    # rows asked out of order of need: picked out of the batch's (all output) rows
    some = _run(qwen_draft, toks, True, [2, 5, 7])
    assert np.array_equal(some[3], off[3][[2, 5, 7]])
    assert on[4].shape == (8, qwen_draft.n_embd) and np.isfinite(on[4]).all()


def test_a_rows_hidden_state_is_its_positions_whatever_the_batch(qwen_draft: Any) -> None:
    """Row i of a verify batch holds position i's state: the same (to float noise) as
    decoding those tokens one at a time; different positions differ."""
    toks = qwen_draft.tokenize(TEXT)[:209]
    qwen_draft.reset()
    qwen_draft.set_features(True)
    try:
        qwen_draft.decode(toks[:200], [199])
        qwen_draft.decode(toks[200:209], range(9))
        batch = qwen_draft.hidden().copy()
        qwen_draft.rollback(200)
        single = []
        for t in toks[200:209]:
            qwen_draft.decode([t], [0])
            single.append(qwen_draft.hidden()[0].copy())
    finally:
        qwen_draft.set_features(False)
    single_rows = np.stack(single)
    scale = np.abs(single_rows).max()
    assert np.abs(batch - single_rows).max() < 2e-2 * scale
    assert np.abs(batch[0] - batch[1]).max() > 0.1 * scale
    with pytest.raises(BackendError):
        qwen_draft.hidden()  # features off: nothing to read


def test_several_sequences_rows_with_features_on() -> None:
    from specli.backend import LoadOptions, Model

    m = Model(model_file(SMOL), LoadOptions(n_ctx=512, n_seq=2))
    try:
        a, b = m.tokenize("The quick brown fox"), m.tokenize("Once upon a time there was")
        want = m.decode_parts([(0, a, [len(a) - 1]), (1, b, [1, len(b) - 1])])
        want = [w.copy() for w in want]
        m.reset()
        m.set_features(True)
        got = m.decode_parts([(0, a, [len(a) - 1]), (1, b, [1, len(b) - 1])])
        assert all(np.array_equal(w, g) for w, g in zip(want, got))
        assert m.hidden().shape == (len(a) + len(b), m.n_embd)
    finally:
        m.close()


def test_features_rest_while_every_sequence_rests_and_logits_stay_the_same() -> None:
    """auto's heads that cannot pay let the target decode without hidden states: while
    every sequence rests none are computed (hidden_at None, rows as with features off);
    one sequence awake, or a reader holding every row (online training), keeps them."""
    from specli.backend import LoadOptions, Model

    m = Model(model_file(SMOL), LoadOptions(n_ctx=512, n_seq=2))
    try:
        a = m.tokenize("The quick brown fox jumps over the lazy dog")
        want = m.decode(a, range(len(a))).copy()
        m.reset()
        m.set_features(True)
        m.rest_features(True, 0)
        assert m.features_now  # sequence 1 has not said it rests
        m.rest_features(True, 1)
        assert not m.features_now
        got = m.decode(a, range(len(a)))
        assert np.array_equal(want, got) and m.hidden_at(len(a) - 1) is None
        m.rest_features(False, 0)  # woken: the next decode has them again
        m.rollback(len(a) - 3)
        got = m.decode(a[-3:], [0, 2])
        assert np.array_equal(got, want[[-3, -1]]) and m.hidden_at(len(a) - 1) is not None
        m.rest_features(True, 0)
        m.hold_features()
        assert m.features_now
    finally:
        m.close()
