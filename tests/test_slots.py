"""Slots: several sequences of one model decoded in shared rounds, each generation in its
own thread exactly as alone (real models through the real llama.cpp), and the split of
draft rows across slots by cost (pure math)."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from conftest import QWEN_DRAFT, QWEN_TARGET, SMOL, model_file
from conftest import total_variation as tv

from harness.slots import divergence_gap, slot_noise
from specli.backend import LoadOptions, Model
from specli.backend.sequence import SeqModel, share_cells
from specli.drafters import DraftModelDrafter, NgramDrafter
from specli.drafters.auto.split import (
    expected_gains,
    makespan_weights,
    offer_prices,
    split_rows,
    split_rows_at_prices,
)
from specli.engine import GenerationConfig, run
from specli.engine.sampling import probs_from_logits
from specli.errors import BackendError
from specli.runtime.rounds import Pace, Round, Rounds
from specli.runtime.slots import IdleSlot as S
from specli.runtime.slots import pick_slot
from specli.types import Draft, Drafter, SamplingParams

# -- the split (pure) -----------------------------------------------------------------------


def _value(gains: list[np.ndarray], fixed: int, cost: np.ndarray, ks: Sequence[int], fixed_tokens: float) -> float:
    tokens = fixed_tokens + sum(g[k] for g, k in zip(gains, ks, strict=True))
    return tokens / cost[fixed + len(gains) + sum(ks) - 1]


@pytest.mark.parametrize("seed", range(40))
def test_split_rows_is_the_best_split(seed: int) -> None:
    """Against every split of up to 3 offers beside fixed rows that emit tokens or none:
    the same tokens per cost."""
    rng = np.random.default_rng(seed)
    gains = [expected_gains(rng.uniform(0.2, 1.0, rng.integers(0, 5))) for _ in range(rng.integers(1, 4))]
    fixed = int(rng.integers(0, 4))
    cost = np.cumsum(rng.uniform(0.0, 1.0, 40)) + 1.0  # any rising cost
    fixed_tokens = float(rng.uniform(0, fixed)) if seed % 3 else 0.0
    ks = split_rows(gains, fixed, lambda n: cost[:n], fixed_tokens)
    assert all(0 <= k < len(g) for k, g in zip(ks, gains, strict=True))
    best = max(_value(gains, fixed, cost, c, fixed_tokens) for c in itertools.product(*(range(len(g)) for g in gains)))
    assert _value(gains, fixed, cost, ks, fixed_tokens) == pytest.approx(best)


@pytest.mark.parametrize("seed", range(40))
def test_split_rows_at_prices_is_the_best_split(seed: int) -> None:
    """Against every split of up to 3 offers beside fixed rows: the most tokens, each at
    its offer's price, less the batch's cost."""
    rng = np.random.default_rng(seed)
    gains = [expected_gains(rng.uniform(0.2, 1.0, rng.integers(0, 5))) for _ in range(rng.integers(1, 4))]
    fixed = int(rng.integers(0, 4))
    cost = np.cumsum(rng.uniform(0.0, 1.0, 40)) + 1.0
    prices = list(rng.uniform(0.0, 2.0, len(gains)))

    def value(ks: Sequence[int]) -> float:
        return sum(p * g[k] for p, g, k in zip(prices, gains, ks, strict=True)) - cost[fixed + len(gains) + sum(ks) - 1]

    ks = split_rows_at_prices(gains, fixed, lambda n: cost[:n], prices)
    assert all(0 <= k < len(g) for k, g in zip(ks, gains, strict=True))
    assert value(ks) == pytest.approx(max(value(c) for c in itertools.product(*(range(len(g)) for g in gains))))


CPU_Q4 = np.interp(np.arange(1, 66), [1, 2, 4, 8, 16, 33, 65], [1, 1.6, 2.8, 7, 8, 15, 29])  # the 2-core machine
FLAT = np.interp(np.arange(1, 66), [1, 65], [1, 1.3])  # a GPU: rows nearly free


LINEAR = 1.0 + 0.3 * np.arange(65)  # compute-bound: every row past the first costs 0.3 of a step


def test_busy_compute_bound_batches_draft_less() -> None:
    """Where every row costs its share, a slot alone drafts a likely run; three more slots
    in the batch make its rows dear, and the drafts shrink; where rows are nearly free
    every slot keeps its whole draft."""
    likely = expected_gains([0.9] * 8)
    alone = split_rows([likely], 0, lambda n: LINEAR[:n])
    busy = split_rows([likely] * 4, 0, lambda n: LINEAR[:n])
    assert alone[0] >= 3
    assert max(busy) < alone[0]
    assert split_rows([likely] * 4, 0, lambda n: FLAT[:n]) == [8] * 4


def test_rows_go_to_the_slot_most_likely_to_keep_them() -> None:
    sure, doubtful = expected_gains([0.95] * 6), expected_gains([0.3] * 6)
    ks = split_rows([doubtful, sure], 0, lambda n: LINEAR[:n])
    assert ks[1] > ks[0]


def test_a_prefill_in_the_batch_makes_draft_rows_cheap() -> None:
    """Beside a 128-token prompt chunk a few more rows cost next to nothing."""
    g = expected_gains([0.6] * 4)
    cost = np.interp(np.arange(1, 200), [1, 2, 4, 8, 16, 33, 65, 129, 200], [1, 1.6, 2.8, 7, 8, 15, 29, 58, 90])
    assert split_rows([g], 0, lambda n: cost[:n]) == [0]
    assert split_rows([g], 128, lambda n: cost[:n]) == [4]


def test_the_tokens_of_other_slots_steps_make_draft_rows_dearer() -> None:
    """Two slots stepping one token each beside an offer: their tokens count, so the
    offer's rows must beat a batch that already emits two tokens."""
    g = expected_gains([0.7] * 6)
    assert split_rows([g], 2, lambda n: CPU_Q4[:n], 2.0) < split_rows([g], 2, lambda n: CPU_Q4[:n])


def test_makespan_weights() -> None:
    assert makespan_weights([10.0, 40.0, None, 0.0]) == [0.25, 1.0, 1.0, 0.0]
    assert makespan_weights([None, None]) == [1.0, 1.0]
    assert makespan_weights([]) == []


def test_a_slot_due_to_end_early_leaves_its_rows_to_the_longest() -> None:
    """A near-certain lookup in a slot with 10 rounds left beside a slot needing 150: the
    longest one's rounds are what the batch waits through, so the lookup's tokens are
    worth less and it keeps none of the rows it keeps when both are as long."""
    sure, doubtful = expected_gains([0.95] * 16), expected_gains([0.3] * 4)
    cost = lambda n: CPU_Q4[:n]  # noqa: E731
    as_long = split_rows_at_prices([sure, doubtful], 0, cost, makespan_weights([150.0, 150.0]))
    assert as_long[0] >= 8
    assert split_rows_at_prices([sure, doubtful], 0, cost, makespan_weights([10.0, 150.0]))[0] == 0


# a batch over 4k cached tokens on the 2-core machine (Q4_K_M), in plain steps there: dear
# up to 63 rows, then llama.cpp's tiled attention (measured: 16 rows 0.91 s, 64 rows 2.0 s
# against 0.12 s plain)
CPU_Q4_4K = np.interp(np.arange(1, 66), [1, 2, 16, 33, 63, 64, 65], [1, 1.6, 7.5, 15.8, 25, 16.7, 17])


def test_a_short_side_call_is_not_a_reason_for_dear_rows() -> None:
    """A near-certain copy at 4k context, which alone drafts 63 tokens in a 64-row batch
    (some 2.2 tokens a plain step), beside a title's plain step: counting the title's
    token as the round's, the throughput split keeps a dozen dear rows; priced at what the
    copy's tokens cost it alone, a few; and with the title's wait counted too (it gains
    nothing from the rows), none: the title ends in cheap rounds, and the copy has the
    batch to itself after. So for the copy's first, shorter matches, priced at their own
    lower rate (the trace's title-2 beside main-4 waited through 0.2-0.6 s rounds of
    them: 4.5 s against llama-server's 3.8)."""
    copy = expected_gains([0.98] * 15)
    alone = split_rows([expected_gains([0.98] * 63)], 0, lambda n: CPU_Q4_4K[:n])
    rate = float(expected_gains([0.98] * 63)[alone[0]] / CPU_Q4_4K[alone[0]])
    assert alone == [63] and rate > 2.0
    assert split_rows([copy], 1, lambda n: CPU_Q4_4K[:n], 1.0)[0] >= 8
    assert split_rows_at_prices([copy], 1, lambda n: CPU_Q4_4K[:n], [1 / rate])[0] >= 1
    title_waits = offer_prices([300.0], [rate], [20.0])
    assert split_rows_at_prices([copy], 1, lambda n: CPU_Q4_4K[:n], title_waits) == [0]
    short = expected_gains([0.8] * 8)
    short_rate = float(max(short[k] / CPU_Q4_4K[k] for k in range(len(short))))
    assert split_rows_at_prices([short], 1, lambda n: CPU_Q4_4K[:n], offer_prices([300.0], [short_rate], []))[0] >= 1
    assert split_rows_at_prices([short], 1, lambda n: CPU_Q4_4K[:n], offer_prices([300.0], [short_rate], [20.0])) == [0]
    # where rows are nearly free (a GPU) the copy keeps its draft beside the title
    assert split_rows_at_prices([copy], 1, lambda n: FLAT[:n], title_waits) == [15]


def test_offer_prices() -> None:
    """1 / the rate alone, times the makespan weight, shared with each plain step."""
    assert offer_prices([40.0, 10.0], [2.0, 1.0], []) == [0.5, 0.25]
    assert offer_prices([40.0], [4.0], [10.0, None]) == [pytest.approx(0.25 / 3)]
    assert offer_prices([None], [0.5], []) == [1.0]  # a rate below plain decoding prices as plain


def test_a_slot_is_reused_where_the_prompt_goes_on_with_it_else_the_least_recently_used() -> None:
    # (index, prefix shared with a 1,000-token prompt, tokens cached, last use)
    main, empty, older = S(0, 5, 3000, 7), S(1, 0, 0, -1), S(2, 0, 900, 3)
    assert pick_slot(1000, [main, empty, older]) == 1  # the chat template's tokens only: a never used slot
    assert pick_slot(1000, [main, older]) == 2  # then the one used longest ago
    assert pick_slot(2000, [S(0, 1500, 3000, 7), empty]) == 0  # keeps half of what it holds: goes on with it
    assert pick_slot(2000, [S(0, 1499, 3000, 7), empty]) == 1
    assert pick_slot(30, [S(0, 29, 94, 7), empty]) == 0  # holds all of a repeated prompt but its last token
    assert pick_slot(1000, [S(0, 300, 300, 1), S(1, 600, 700, 9), S(2, 600, 600, 0)]) == 1  # most shared, lowest index
    assert pick_slot(10, []) is None


def test_pace_counts_rounds_left_at_what_the_drafts_could_emit() -> None:
    pace = Pace(limit=200)
    assert pace.step(100, 1.0) == 100.0  # plain steps: a token a round
    for n_past in range(101, 109):
        left = pace.step(n_past, 10.0)  # drafts that would emit ten a round
    assert left is not None and 10.0 < left < 14.0  # 92 tokens left at nearly 10 a round
    assert Pace(limit=None).step(100, 5.0) is None


# -- sequences of one model (real llama.cpp) -------------------------------------------------


@pytest.fixture(scope="module")
def smol4() -> Iterator[Model]:
    m = Model(model_file(SMOL), LoadOptions(n_ctx=1024, n_seq=4))
    yield m
    m.close()


PROMPTS = ["The quick brown fox jumps over", "def add(a, b):\n    return", "1, 2, 3, 4, 5,", "Paris is the capital of"]


def test_parts_decode_as_each_sequence_alone(smol: Model, smol4: Model) -> None:
    """Three sequences in one llama_decode: each one's rows equal its own decode in a
    one-sequence context, bit for bit (small batches take the same kernels); a rollback
    of one leaves the others as they were."""
    toks = [smol.tokenize(p) for p in PROMPTS[:3]]
    alone = []
    for t in toks:
        smol.reset()
        alone.append(smol.decode(t, range(len(t))).copy())
    smol4.reset()
    outs = smol4.decode_parts([(i, t, range(len(t))) for i, t in enumerate(toks)])
    for a, b in zip(alone, outs, strict=True):
        np.testing.assert_array_equal(a, b)
    smol4.rollback(2, 1)
    assert [len(smol4.seq_tokens(i)) for i in range(3)] == [len(toks[0]), 2, len(toks[2])]
    nxt = smol4.decode_parts([(0, [int(outs[0][-1].argmax())], [0]), (1, toks[1][2:4], [1])])
    smol.reset()
    smol.decode(toks[0])
    np.testing.assert_array_equal(nxt[0][0], smol.decode([int(outs[0][-1].argmax())], [0])[0])
    smol.reset()
    np.testing.assert_array_equal(nxt[1][0], smol.decode(toks[1][:4], [3])[0])


def test_a_state_moves_to_another_sequence(smol4: Model) -> None:
    """A sequence's saved state loaded into another one (a slot restoring a conversation
    another slot saved) gives the same next rows."""
    t = smol4.tokenize(PROMPTS[0])
    smol4.reset()
    smol4.decode(t[:-1], seq=0)
    state = smol4.save_state(0)
    want = smol4.decode(t[-1:], [0], seq=0).copy()
    assert smol4.load_state(state, t[:-1], seq=3)
    assert smol4.seq_tokens(3) == t[:-1]
    np.testing.assert_array_equal(smol4.decode(t[-1:], [0], seq=3)[0], want[0])


def test_a_sequence_shares_another_ones_cells(smol4: Model) -> None:
    """Sequence 2 takes sequence 0's first cells (nothing copied): its next rows are
    sequence 0's, bit for bit, and stay so after sequence 0 drops them."""
    t = smol4.tokenize(PROMPTS[1])
    smol4.reset()
    smol4.decode(t[:-1], seq=0)
    want = smol4.decode(t[-1:], [0], seq=0)[0].copy()
    smol4.decode(t[:3], seq=2)
    share_cells(smol4, 0, 2, 0, len(t) - 1)
    assert smol4.seq_tokens(2) == t[:-1]
    smol4.reset(0)
    np.testing.assert_array_equal(smol4.decode(t[-1:], [0], seq=2)[0], want)
    smol4.decode(t[1:3], seq=1)
    with pytest.raises(BackendError):  # sequence 1's first token is not sequence 2's
        share_cells(smol4, 2, 1, 1, 3)


@pytest.mark.parametrize("lag", [0, 8])
def test_a_round_decodes_a_repeated_prompt_chunk_once(smol4: Model, lag: int) -> None:
    """Two slots prefilling the same prompt, at once or one chunk apart: each chunk is
    decoded once (the other slot takes its cells), and both slots' next rows are those of
    the prompt decoded alone in the same chunks, bit for bit."""
    t = smol4.tokenize(" ".join(PROMPTS) * 2)
    t = t[: 8 * ((len(t) - 1) // 8) + 1]
    smol4.reset()
    for start in range(0, len(t) - 1, 8):
        smol4.decode(t[start:start + 8], seq=3)
    want = smol4.decode(t[-1:], [0], seq=3)[0].copy()
    smol4.reset()
    smol4.decode(t[:lag], seq=0)  # slot 0 is a chunk ahead
    seen: list[Round] = []
    rounds = Rounds(smol4, on_round=seen.append)
    seqs = [SeqModel(smol4, i, rounds, chunk=8) for i in range(2)]
    rows: list[np.ndarray | None] = [None, None]

    def slot(i: int) -> None:
        try:
            seqs[i].decode(t[len(seqs[i].tokens):-1])
            rows[i] = seqs[i].decode(t[-1:], [0])[0].copy()
        finally:
            rounds.leave(i)

    for i in range(2):
        rounds.join(i)
    threads = [threading.Thread(target=slot, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert sum(sum(r.rows.values()) for r in seen) == len(t) - 1 - lag + 2  # every chunk once
    assert smol4.seq_tokens(0) == smol4.seq_tokens(1) == t
    for r in rows:
        assert r is not None
        np.testing.assert_array_equal(r, want)


class Offering(Drafter):
    """n-gram drafts offered with gains (as auto's are in a slot), so rounds may cut them."""

    name = "ngram"

    def __init__(self, model: SeqModel) -> None:
        self.ngram = NgramDrafter(1, 4, model.is_eog)
        self.cuts = 0

    def begin(self, history: Sequence[int]) -> None:
        self.ngram.begin(history)

    def propose(self, history: Sequence[int], k: int) -> Draft:
        d = self.ngram.propose(history, k)
        if d.tokens:
            d.gains = expected_gains([0.5] * len(d.tokens))
        return d

    def cut(self, n_kept: int) -> None:
        self.cuts += 1


def test_slots_generate_what_each_generates_alone(smol: Model, smol4: Model) -> None:
    """Four greedy generations in four threads, their steps in shared rounds whose costs
    cut the drafts: each gives the tokens it gives alone."""
    toks = [smol.tokenize(p) for p in PROMPTS]
    cfg = GenerationConfig(max_tokens=40, draft_max=6)
    alone = [run(smol, t, cfg, NgramDrafter(1, 4, smol.is_eog)).tokens for t in toks]
    smol4.reset()
    seen: list[Round] = []
    rounds = Rounds(smol4, prices=lambda n, ctx: CPU_Q4[:n] if n <= len(CPU_Q4) else None, on_round=seen.append)
    seqs = [SeqModel(smol4, i, rounds, chunk=16) for i in range(4)]
    drafters = [Offering(s) for s in seqs]
    got: list[list[int] | None] = [None] * 4

    def slot(i: int) -> None:
        rounds.join(i)
        try:
            got[i] = run(seqs[i], toks[i], cfg, drafters[i]).tokens  # type: ignore[arg-type]
        finally:
            rounds.leave(i)

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    smol4.reset()
    bound = 2 * slot_noise(smol4)
    for t, a, b in zip(toks, alone, got, strict=True):
        assert b is not None
        d = divergence_gap(smol, t, a, b)
        assert d is None or abs(d[1]) <= bound, (d, bound)  # the same tokens, or a near-tie
    assert max(len(r.rows) for r in seen) == 4  # rounds did hold every slot
    assert sum(d.cuts for d in drafters) > 0  # and cut drafts by cost


# -- sampling in a slot with three others busy (Qwen pair) -----------------------------------


@pytest.fixture(scope="module")
def qwen_slots() -> Iterator[tuple[Model, Model]]:
    target = Model(model_file(QWEN_TARGET), LoadOptions(n_ctx=512, n_seq=4))
    draft = Model(model_file(QWEN_DRAFT), LoadOptions(n_ctx=512, n_seq=4))
    yield target, draft
    target.close()
    draft.close()


def test_sampling_in_a_slot_follows_the_target_with_others_busy(qwen_slots: tuple[Model, Model]) -> None:
    """The same test as alone (test_engine: the first two tokens at temperature 0.8 follow
    p(t1) p(t2 | t1), t2 drafted by the draft model), run in slot 0 while three slots
    generate beside it in the same rounds (one of them drafting with the draft model in
    the same draft rounds)."""
    target, draft = qwen_slots
    params = SamplingParams(temperature=0.8)
    toks = target.tokenize("Once upon a time", add_special=False)
    target.reset()
    draft.reset()
    p1 = probs_from_logits(target.decode(toks, [len(toks) - 1])[0], params)
    draft.decode(toks[:-1])
    exact: dict[tuple[int, int], float] = {}
    accept_all: dict[tuple[int, int], float] = {}
    for t1 in np.flatnonzero(p1 > 1e-3):
        target.rollback(len(toks))
        p2 = probs_from_logits(target.decode([int(t1)], [0])[0], params)
        draft.rollback(len(toks) - 1)
        q2 = probs_from_logits(draft.decode([toks[-1], int(t1)], [1])[0], params)
        for t2 in np.flatnonzero(p2 > 1e-3):
            exact[(int(t1), int(t2))] = float(p1[t1] * p2[t2])
        for t2 in np.flatnonzero(q2 > 1e-3):
            accept_all[(int(t1), int(t2))] = float(p1[t1] * q2[t2])
    target.reset()
    draft.reset()

    draft_rounds = Rounds(draft)
    seen: list[Round] = []
    rounds = Rounds(target, on_round=seen.append, follower=draft_rounds, drafting={0, 1, 2, 3})
    t_seq = [SeqModel(target, i, rounds, 64) for i in range(4)]
    d_seq = [SeqModel(draft, i, draft_rounds, 64) for i in range(4)]
    done = threading.Event()

    def busy(i: int) -> None:
        rounds.join(i)
        try:
            other = target.tokenize(f"Item {i}: a list of colours, one per line:\n", add_special=False)
            while not done.is_set():  # slot 1 drafts with the draft model too, slots 2 and 3 decode plainly
                cfg = GenerationConfig(max_tokens=12, draft_max=2, sampling=SamplingParams(temperature=0.7, seed=i))
                drafter = DraftModelDrafter(d_seq[i], cfg.sampling) if i == 1 else None
                run(t_seq[i], other, cfg, drafter)  # type: ignore[arg-type]
        finally:
            rounds.leave(i)
            draft_rounds.leave(i)

    others = [threading.Thread(target=busy, args=(i,)) for i in (1, 2, 3)]
    for t in others:
        t.start()
    n = 120
    seen_pairs: Counter[tuple[int, int]] = Counter()
    rounds.join(0)
    try:
        for seed in range(n):
            cfg = GenerationConfig(max_tokens=3, draft_max=3, sampling=SamplingParams(temperature=0.8, seed=seed))
            res = run(t_seq[0], toks, cfg, DraftModelDrafter(d_seq[0], cfg.sampling))  # type: ignore[arg-type]
            assert res.counters.n_drafted > 0
            seen_pairs[(res.tokens[0], res.tokens[1])] += 1
    finally:
        rounds.leave(0)
        draft_rounds.leave(0)
        done.set()
        for t in others:
            t.join(120)
    assert any(len(r.rows) >= 3 and 0 in r.rows for r in seen)  # slot 0 shared its rounds
    bound = 0.2 + 1.0 - sum(exact.values())  # as alone: see test_engine
    assert tv(exact, accept_all) > 2 * bound, "this prompt cannot tell a wrong verifier apart"
    observed = tv({k: v / n for k, v in seen_pairs.items()}, exact)
    assert observed < bound, (observed, bound)


def test_idle_conversations_a_prompt_does_not_go_on_with_are_parked() -> None:
    from specli.runtime.slots import PARK_MIN, parkable

    conversation = list(range(1000, 1000 + 2 * PARK_MIN))
    side = [1, 2, 3, *range(5000, 5100)]
    assert parkable(side, [(1, conversation), (2, [7] * 10)]) == [1]  # a short one costs little
    assert parkable(conversation + [9, 9], [(1, conversation)]) == []  # it goes on with it
    system = conversation[:PARK_MIN]  # a long shared prefix: worth more as shared cells
    assert parkable(system + [4, 4], [(1, conversation)]) == []
    assert parkable(system[:PARK_MIN - 1] + [4], [(1, conversation)]) == [1]
    # the turn sent with the side call, already queued, goes on with it: it stays
    assert parkable(side, [(1, conversation)], queued=[conversation + [9, 9]]) == []
    assert parkable(side, [(1, conversation)], queued=[side]) == [1]
