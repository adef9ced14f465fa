"""Cost-aware controller decisions with injected costs and acceptance (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specli.drafters.auto.costs import CostModel, chunked_verify_costs, interpolate
from specli.drafters.auto.policy import AcceptanceStats, best_k, choose, expected_tokens, reach_probabilities


def test_expected_tokens() -> None:
    assert expected_tokens([0.5, 0.5], 0) == 1.0
    assert expected_tokens([0.5, 0.5], 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens([1.0], 3) == 4.0  # past known positions: last rate reused


def test_nothing_accepted_means_plain_decoding() -> None:
    assert best_k([1.0, 1.1, 1.2], [0, 0, 0], [0.0, 0.0], 2)[0] == 0


def test_free_drafts_always_accepted_use_every_position() -> None:
    assert best_k([1.0] * 9, [0.0] * 9, [1.0] * 8, 8) == (8, 9.0)


def test_cpu_q4_regime_draft_model_barely_pays() -> None:
    # the measurements: v(k) ~ 1 + k/2 steps, draft token 0.5 step, acceptance 0.9
    verify = [1.0, 1.3, 1.7, 2.1, 2.5]
    draft = [0.0, 0.5, 1.0, 1.5, 2.0]
    k, speed = best_k(verify, draft, [0.9] * 4, 4)
    assert k == 1 and speed == pytest.approx(1.9 / 1.8)  # barely: about 1.06x
    k, speed = best_k(verify, draft, [0.75] * 4, 4)
    assert k == 0 and speed == 1.0
    # the same with an n-gram drafter that costs nothing: long drafts pay
    k, speed = best_k(verify, [0.0] * 5, [0.9] * 4, 4)
    assert k == 4 and speed == pytest.approx(expected_tokens([0.9] * 4, 4) / 2.5)


def test_f16_regime_draft_model_pays() -> None:
    verify = [1.0, 1.1, 1.25, 1.35, 1.4, 1.5]
    draft = [0.0] + [0.25 * k for k in range(1, 6)]
    k, speed = best_k(verify, draft, [0.9] * 5, 5)
    assert k >= 3 and speed > 1.5


@given(
    verify=st.lists(st.floats(0.01, 10), min_size=1, max_size=9),
    per_token=st.floats(0, 2),
    acceptance=st.lists(st.floats(0, 1), min_size=1, max_size=8),
)
def test_best_k_is_the_argmax_of_expected_speed(verify: list[float], per_token: float, acceptance: list[float]) -> None:
    k_max = len(verify) - 1
    draft = [per_token * k for k in range(len(verify))]
    k, speed = best_k(verify, draft, acceptance, k_max)
    speeds = [expected_tokens(acceptance, j) / (verify[j] + draft[j]) for j in range(k_max + 1)]
    assert speed == pytest.approx(max(speeds))
    assert speeds[k] == pytest.approx(max(speeds))


def test_choose_prefers_the_cheaper_drafter_and_can_turn_off() -> None:
    costs = CostModel.from_measured([1.0, 1.3, 1.7, 2.1, 2.5], draft_step=0.5)
    good, bad = AcceptanceStats(prior=0.95), AcceptanceStats(prior=0.05)
    c = choose(costs, {"draft": good, "ngram": good}, {"draft": 4, "ngram": 4})
    assert c.drafter == "ngram" and c.k == 4
    c = choose(costs, {"draft": bad, "ngram": bad}, {"draft": 4, "ngram": 4})
    assert c.drafter == "none" and c.k == 0
    so_so = AcceptanceStats(prior=0.75)
    c = choose(costs, {"draft": so_so, "ngram": so_so}, {"draft": 4, "ngram": 0})
    assert c.drafter == "none"  # the draft model costs too much here
    fast = CostModel.from_measured([1.0, 1.1, 1.25, 1.35, 1.4], draft_step=0.1)
    c = choose(fast, {"draft": good, "ngram": good}, {"draft": 4, "ngram": 0})
    assert c.drafter == "draft" and c.k >= 3


def test_acceptance_stats_are_conditional_per_position() -> None:
    s = AcceptanceStats(prior=0.5, prior_weight=0.0, decay=1.0)
    s.update(4, 4)  # all accepted
    s.update(4, 1)  # first accepted, second rejected, 3 and 4 never tried
    assert s.drafted[:4] == [2, 2, 1, 1]
    assert s.rates(4) == [1.0, 0.5, 1.0, 1.0]


def test_costs_track_the_plain_step_online() -> None:
    costs = CostModel.from_measured([1.0, 2.0], draft_step=0.5)
    for _ in range(100):
        costs.observe_verify(0, 2.0)  # the machine got twice as slow: every cost follows t1
    assert costs.step == pytest.approx(2.0, rel=1e-3)
    assert costs.verify_costs(1)[1] == pytest.approx(4.0, rel=1e-3)
    assert costs.draft_costs("draft", 1)[1] == pytest.approx(1.0, rel=1e-3)


def test_costs_interpolate_and_extrapolate_between_measured_sizes() -> None:
    costs = CostModel(1.0, [1, 2, 4, 8], [1.0, 1.5, 2.0, 3.0])
    assert costs.batch_ratio(3) == pytest.approx(1.75)
    assert costs.batch_ratio(6) == pytest.approx(2.5)
    assert costs.batch_ratio(16) == pytest.approx(5.0)  # the last slope continues
    assert interpolate([1, 2], [1.0, 0.5], 9) == pytest.approx(0.5)  # never a falling extrapolation


@pytest.mark.parametrize("factor", [4.0, 0.25])
def test_a_poisoned_table_is_corrected_by_two_observations(factor: float) -> None:
    truth = CostModel(1.0, [1, 2, 4, 8], [1.0, 1.5, 2.0, 3.0])
    costs = CostModel(1.0, [1, 2, 4, 8], [1.0] + [r * factor for r in truth.ratios[1:]])
    costs.observe_verify(3, truth.verify_costs(3)[3])
    assert costs.doubting and not costs.drifted  # one observation could be a hiccup
    costs.observe_verify(7, truth.verify_costs(7)[7])
    assert costs.drifted and not costs.doubting
    for n in (2, 4, 8, 30):
        assert costs.batch_ratio(n) == pytest.approx(truth.batch_ratio(n), rel=0.1)


def test_one_noisy_observation_barely_moves_the_table() -> None:
    costs = CostModel(1.0, [1, 2, 4], [1.0, 1.5, 2.0])
    costs.observe_verify(1, 10.0)  # a hiccup
    costs.observe_verify(1, 1.5)  # then normal again
    assert not costs.drifted and costs.batch_ratio(2) == pytest.approx(1.5)


def test_exact_chunks_are_priced_by_the_chance_of_reaching_them() -> None:
    batch = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]  # one batch of 1..7 tokens
    reach = reach_probabilities([0.5] * 6, 6)
    costs = chunked_verify_costs(batch, 3, reach)
    assert costs[2] == pytest.approx(2.0)  # 3 tokens: one chunk
    assert costs[3] == pytest.approx(2.0 + reach[3] * 1.0)  # the 4th token's chunk only if d1..d3 passed
    assert costs[6] == pytest.approx(2.0 + reach[3] * 2.0 + reach[6] * 1.0)
    exact = CostModel(1.0, list(range(1, 8)), batch, chunk=3)
    assert exact.verify_costs(6, reach) == pytest.approx(costs)
    assert exact.decoded_batches(6) == [3, 3, 1] and exact.decoded_batches(6, n_accepted=1) == [3]
    exact.observe_verify(6, 2.0, n_accepted=1)  # stopped after the first chunk: as priced, no drift
    exact.observe_verify(6, 2.0, n_accepted=2)
    assert not exact.doubting and not exact.drifted


# ------------------------------------------------------------------ auto drafter (n-gram only)

def _replay_auto(auto, history: list[int], future: list[int], k_max: int,
                 true_costs: CostModel | None = None) -> list[tuple[int, int]]:
    """Drive `auto` as the engine would, accepting draft tokens that match `future`;
    returns (match length n, tokens drafted) per step. Verifications take no time (the
    costs stay as given), or what `true_costs` says they take."""
    from specli.drafters.ngram import NgramDrafter

    assert isinstance(auto.ngram, NgramDrafter)
    auto.begin(history)
    steps, i = [], 0
    while i < len(future) - 1:
        d = auto.propose(history, k_max)
        steps.append((auto.ngram.last_match_n, len(d.tokens)))
        n_acc = 0
        while n_acc < len(d.tokens) and i + n_acc < len(future) and d.tokens[n_acc] == future[i + n_acc]:
            n_acc += 1
        history.extend(future[i : i + n_acc + 1])
        i += n_acc + 1
        seconds = true_costs.verify_costs(len(d.tokens))[len(d.tokens)] if true_costs is not None else 0.0
        auto.accept(history, n_acc, seconds)
    return steps


def test_auto_learns_acceptance_per_match_length() -> None:
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.ngram import NgramDrafter

    # 4-gram matches continue as before, the 2-gram [10, 11] never does (it has gone on in
    # different ways before: its own key, (2, False))
    costs = CostModel.from_measured([1.0, 1.2, 1.4, 1.6, 1.8], 0.0)
    costs.observe_verify = lambda *a: None  # type: ignore[method-assign]
    auto = AutoDrafter(costs, None, NgramDrafter(2, 4), explore_every=10**9)
    block = [10, 11, 12, 13, 14, 15, 16, 17]
    history = list(block)
    future: list[int] = []
    for r in range(40):
        future += [10, 11, 90 + r]  # a 2-gram seen before, then something new
        future += block  # repeats: once inside, the 4-gram suffix always matches
    _replay_auto(auto, history, future, 4)
    assert auto.by_n["ngram"][2, False].rates(1)[0] < 0.2
    assert auto.by_n["ngram"][4, True].rates(1)[0] > 0.8
    late = _replay_auto(auto, history, [10, 11, 99, *block, 10, 11, 98, *block], 4)
    assert all(k == 0 for n, k in late if n == 2) and any(k > 0 for n, k in late if n == 4)


def test_auto_probes_less_often_while_probes_fail() -> None:
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.ngram import NgramDrafter

    costs = CostModel.from_measured([1.0, 1.9, 2.9], 0.0)  # at 0.75 acceptance drafting does not pay
    costs.observe_verify = lambda *a: None  # type: ignore[method-assign]
    # every 2-gram recurs but is always followed by something new: each probe fails
    future = [t for r in range(300) for t in (1, 2, 100 + r)]
    auto = AutoDrafter(costs, None, NgramDrafter(2, 2), explore_every=4)
    auto.acceptance["ngram"] = AcceptanceStats(prior=0.0, prior_weight=1e9)  # never chosen, only probed
    # estimates that cannot learn (a stretch of text that looks right, then is not)
    auto.by_n["ngram"] = {(2, a): AcceptanceStats(prior=0.75, prior_weight=1e9) for a in (True, False)}
    steps = _replay_auto(auto, [1, 2, 3], future, 2)
    probes = sum(1 for _, k in steps if k > 0)
    assert 0 < probes < len(steps) / 4 / 3  # without back-off: about one step in 4
    assert all(k <= 1 for _, k in steps)  # a probe drafts one token
    # estimates that learn from what the lookup offered (shadows): no probe where it fails
    auto = AutoDrafter(costs, None, NgramDrafter(2, 2), explore_every=4)
    auto.acceptance["ngram"] = AcceptanceStats(prior=0.0, prior_weight=1e9)
    steps = _replay_auto(auto, [1, 2, 3], future, 2)
    assert sum(1 for _, k in steps if k > 0) <= 1


def test_auto_that_keeps_drafting_still_measures_plain_steps() -> None:
    """A table stored from a busy machine (seen for real: t1 1.34 s for a 54 ms step, every
    batch priced at one step) makes drafting look free, so auto drafts every step and never
    takes the plain step that would show t1 is wrong. Verification times come from the
    true table: within 64 steps a plain step corrects t1, the batches' level follows, and
    auto stops drafting runs that the true costs say lose."""
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.ngram import NgramDrafter

    sizes = [1, 2, 4, 8, 16, 33]
    true = CostModel(0.054, sizes, [1.0, 1.7, 3.1, 7.5, 10.8, 21.5])
    poisoned = CostModel(1.34, sizes, [1.0] * len(sizes))
    auto = AutoDrafter(poisoned, None, NgramDrafter(3, 12), explore_every=10**9)
    block = list(range(100, 140))
    history = [*block, *block[:5]]
    auto.begin(history)
    drafted = []
    for i in range(96):
        d = auto.propose(history, 32)
        n = len(d.tokens)
        n_acc = n // 2  # half of every draft holds: worth drafting only where batches are cheap
        seconds = true.verify_costs(n)[n]
        history += block[:n_acc + 1] if i % 2 else block[5 : 6 + n_acc]
        auto.accept(history, n_acc, seconds)
        drafted.append(n)
    assert poisoned.drifted and abs(poisoned.step / true.step - 1) < 0.5
    assert poisoned.batch_ratio(16) > 5  # the level followed t1
    assert sum(drafted[64:]) < sum(drafted[:32]) / 4  # long losing drafts stopped


def test_auto_lookup_drafts_grow_only_as_far_as_they_were_accepted() -> None:
    """Acceptance measured on short drafts says little about position 40: a lookup draft is
    at most twice as long as the run of its tokens accepted since its last rejection (8 at
    first), or as far as drafts of its match kind have been tried (twice, decayed); a
    rejection brings the cap back down to the larger of the two."""
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.auto.drafter import FIRST_TRUST
    from specli.drafters.ngram import NgramDrafter

    costs = CostModel(1.0, [1, 2, 65], [1.0, 1.05, 2.0])  # batches nearly free: the longest k wins
    costs.observe_verify = lambda *a: None  # type: ignore[method-assign]
    auto = AutoDrafter(costs, None, NgramDrafter(3, 12), explore_every=10**9)
    auto.acceptance["ngram"] = AcceptanceStats(prior=0.99, prior_weight=1e9)
    auto.by_n["ngram"] = {(n, True): AcceptanceStats(prior=0.99, prior_weight=1e9) for n in range(1, 13)}
    block = list(range(100, 400))
    history = [*block, *block[:12]]
    auto.begin(history)
    drafted = []
    for _ in range(5):  # every draft is accepted: the cap grows with the run
        d = auto.propose(history, 64)
        drafted.append(len(d.tokens))
        history += d.tokens + [block[len(history) - 300 + len(d.tokens)]]
        auto.accept(history, len(d.tokens), 0.0)
    assert drafted == [FIRST_TRUST, 16, 48, 64, 64]
    d = auto.propose(history, 64)
    history += d.tokens[:3] + [7]  # three kept, then the target says otherwise
    auto.accept(history, 3, 0.0)
    history += block[:12]
    tried = auto.by_n["ngram"][12, True].depth()
    assert FIRST_TRUST < tried < 64  # positions 0-47 were tried four times, 48-63 twice (decayed)
    assert len(auto.propose(history, 64).tokens) == tried
    auto.by_n["ngram"].clear()  # a match kind never tried starts at FIRST_TRUST again
    history += block[12:24]
    assert len(auto.propose(history, 64).tokens) == FIRST_TRUST


def test_batches_seen_correct_the_table_where_they_were_seen() -> None:
    """Three verifications of a size price it by their median (one hiccup moves nothing);
    sizes between two seen ones take the interpolated correction, sizes beyond them the
    nearest one's."""
    costs = CostModel(1.0, [1, 2, 8, 32], [1.0, 2.0, 4.0, 8.0])
    for seconds in (30.0, 6.0, 6.0):  # a hiccup, then a 5-token batch really costs 6 steps
        costs.observe_verify(4, seconds)
    assert costs.batch_ratio(5) == pytest.approx(6.0)  # the table said 3
    assert costs.batch_ratio(2) == pytest.approx(2.0 * 6.0 / 3.0)  # below: the same correction, flat
    for _ in range(3):
        costs.observe_verify(31, 8.0)  # 32 tokens as the table says
    assert costs.batch_ratio(32) == pytest.approx(8.0)
    f = interpolate([5, 32], [6.0 / 3.0, 1.0], 16)
    assert costs.batch_ratio(16) == pytest.approx(interpolate([1, 2, 8, 32], [1.0, 2.0, 4.0, 8.0], 16) * f)


def test_auto_learns_from_lookups_it_did_not_draft() -> None:
    """A lookup offered but not drafted is checked against the token the plain step
    emitted: its match kind learns without paying for a draft."""
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.ngram import NgramDrafter

    costs = CostModel(1.0, [1, 2, 65], [1.0, 50.0, 100.0])  # drafting never pays: every step is plain
    costs.observe_verify = lambda *a: None  # type: ignore[method-assign]
    auto = AutoDrafter(costs, None, NgramDrafter(3, 3), explore_every=10**9)
    auto._interval = dict.fromkeys(auto._interval, 10**9)  # no probes either
    block = list(range(100, 130))
    history = [*block, *block[:3]]
    auto.begin(history)
    for tok in block[3:20]:  # the text repeats: every lookup's first token is right
        assert auto.propose(history, 8).tokens == []
        history.append(tok)
        auto.accept(history, 0, 1.0)
    stats = auto.by_n["ngram"][3, True]
    assert stats.drafted[0] > 10 and stats.rates(1)[0] > 0.9
    seen, hits = stats.drafted[0], stats.accepted[0]
    for tok in range(500, 510):  # new text: the first token is a miss, then nothing is offered
        auto.propose(history, 8)
        history.append(tok)
        auto.accept(history, 0, 1.0)
    assert stats.drafted[0] == pytest.approx(seen * stats.decay + 1) and stats.accepted[0] == pytest.approx(hits * stats.decay)


def test_ngram_match_reports_whether_earlier_occurrences_agreed() -> None:
    from specli.drafters.ngram import NgramIndex

    index = NgramIndex(2, 2)
    history = [1, 2, 3, 9, 1, 2, 4, 9, 5, 6, 7, 9, 5, 6]
    index.update(history)
    assert index.lookup(history) == (10, 2, True)  # (5, 6) went on with 7 every time
    assert index.lookup([*history, 0, 1, 2]) == (6, 2, False)  # (1, 2) went on with 3, then 4


def test_auto_stops_drafting_once_its_drafts_have_lost_what_they_may() -> None:
    """Estimates that say drafting pays (0.75 acceptance that cannot learn, batches priced
    as they cost) on text where every draft fails: the ledger of what drafts really won
    stops them once they have lost the generation's start balance, where without it every
    matching step drafts. Text that repeats keeps drafting throughout."""
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.auto.policy import LEDGER_START
    from specli.drafters.ngram import NgramDrafter

    def auto_with(costs: CostModel) -> AutoDrafter:
        auto = AutoDrafter(costs, None, NgramDrafter(2, 2), explore_every=10**9)
        fixed = AcceptanceStats(prior=0.75, prior_weight=1e9)
        auto.acceptance["ngram"] = fixed
        auto.by_n["ngram"] = {(2, a): fixed for a in (True, False)}
        return auto

    table = [1.0, 1.3, 1.6]
    failing = [t for r in range(200) for t in (1, 2, 100 + r)]  # every 2-gram goes on anew
    steps = _replay_auto(auto_with(CostModel.from_measured(table, 0.0)), [1, 2, 3], failing, 2,
                         CostModel.from_measured(table, 0.0))
    drafted = [k for _, k in steps if k > 0]
    lost = sum(CostModel.from_measured(table, 0.0).batch_ratio(k + 1) - 1 for k in drafted)
    assert 0 < len(drafted) < 20 and lost < LEDGER_START + 0.01 * len(steps) + 1.0
    repeating = list(range(10, 30)) * 20
    steps = _replay_auto(auto_with(CostModel.from_measured(table, 0.0)), list(range(10, 30)), repeating, 2,
                         CostModel.from_measured(table, 0.0))
    assert sum(1 for _, k in steps if k > 0) > 0.9 * len(steps)


def test_a_plain_step_found_slower_at_long_context_forgives_the_ledgers_debt() -> None:
    """auto's ledger counts in plain steps of t1. A copy at 4k tokens of context, its t1
    last measured at short context (37.7 ms against 57.7 ms there), drafted 46 tokens,
    all kept, in a 1.99 s batch: 52.8 "plain steps" for 47 tokens, a debt of 4.5 that held
    its drafts back for 700 steps. The plain step that then moves t1 is a correction of
    the ledger's unit, at any context: the debt is forgiven (the stored table stays)."""
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.ngram import NgramDrafter

    costs = CostModel.from_measured([0.0377, 0.06, 0.08], 0.0)
    auto = AutoDrafter(costs, None, NgramDrafter(2, 2), explore_every=10**9)
    block = list(range(10, 2010))  # past TABLE_CONTEXT
    history = [*block, *block[:10]]
    auto.begin(history)
    auto.ledger.record(47, 1.99 / 0.0377)  # the batch, priced in the stale t1
    assert auto.ledger.balance < -4.0
    for tok in block[10:13]:  # plain steps at 4k tokens of context: 57.7 ms
        auto.propose(history, 0)
        history.append(tok)
        auto.accept(history, 0, 0.0577)
    assert costs.step == pytest.approx(0.0577) and not costs.drifted
    assert auto.ledger.balance >= 0.0


def test_a_dear_miss_is_repaid_by_the_lookups_it_stopped() -> None:
    """One dear miss (a 65-row draft failing at its first token at 4k tokens of context:
    26 plain steps) leaves the ledger deep in debt. On text that repeats, the lookups
    offered but not drafted are checked against each token emitted: one-token probes that
    cost nothing, which repay the debt, and drafting resumes within a few dozen steps (the
    1 % allowance alone took 2,600: the trace's main-4 wrote 701 tokens by plain steps).
    Where the lookups miss, the debt stays."""
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.ngram import NgramDrafter

    table = [1.0, 1.3, 1.6]

    def in_debt() -> AutoDrafter:
        auto = AutoDrafter(CostModel.from_measured(table, 0.0), None, NgramDrafter(2, 2), explore_every=10**9)
        auto.ledger.record(1, 27.0)
        assert auto.ledger.balance == pytest.approx(-25.0)
        return auto

    repeating = list(range(10, 30)) * 10
    steps = _replay_auto(in_debt(), list(range(10, 30)), repeating, 2, CostModel.from_measured(table, 0.0))
    first = next((i for i, (_, k) in enumerate(steps) if k > 0), len(steps))
    assert first <= 40
    auto = in_debt()
    failing = [t for r in range(100) for t in (1, 2, 100 + r)]  # every 2-gram goes on anew
    steps = _replay_auto(auto, [1, 2, 3], failing, 2, CostModel.from_measured(table, 0.0))
    assert all(k == 0 for _, k in steps) and auto.ledger.balance < -25.0


@given(st.lists(st.floats(1.0, 40.0), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(1, 64), st.floats(0.3, 40.0)), max_size=12))
def test_batch_ratios_at_once_equal_one_by_one(ratios: list[float], seen: list[tuple[int, float]]) -> None:
    sizes = [1, 2, 4, 8, 16, 33][: len(ratios)]
    c = CostModel(0.05, sizes, [1.0, *sorted(ratios[1:])])
    for k, steps in seen:
        c.observe_verify(k, 0.05 * steps, k // 2)
    at_once = c.batch_ratios(70)
    assert at_once == pytest.approx([c.batch_ratio(n) for n in range(1, 71)], rel=1e-12, abs=1e-12)


def test_a_ledger_turned_off_never_stands_in_the_way() -> None:
    """Drafts losing on fresh text run the ledger into debt: then only a clear win may
    draft and no probe fits; turned off (auto_ledger: false) the prices alone decide."""
    from specli.drafters.auto.policy import Ledger

    on, off = Ledger(), Ledger(on=False)
    for book in (on, off):
        for _ in range(5):
            book.record(1, 3.0)  # one token for three plain steps, five times
    assert not on.affords(1.1) and not on.can_lose(0.5) and on.affords(5.0)
    assert off.affords(1.0) and off.can_lose(100.0)
    on.forgive()  # the prices were corrected: old debts say nothing of the new
    assert on.affords(1.0)


def test_the_ledger_keeps_what_a_miss_of_its_dearest_bets_costs() -> None:
    """64-row drafts at 8k tokens of context cost 17 plain steps: gains kept only up to
    LEDGER_CAP would leave a winning run of them in debt after one miss, and auto at plain
    decoding for the rest of the request. Kept up to two such bets, it drafts on after a
    miss and stops after a third; where bets are cheap the cap stays LEDGER_CAP."""
    from specli.drafters.auto.policy import LEDGER_CAP, Ledger

    dear, cheap = Ledger(), Ledger()
    for _ in range(10):
        dear.record(40, 17.5)
        cheap.record(6, 2.0)
    assert dear.balance == pytest.approx(35.0) and cheap.balance == pytest.approx(LEDGER_CAP)
    dear.plain()  # a plain step keeps what was won
    assert dear.balance == pytest.approx(35.0)
    dear.record(1, 17.5)
    cheap.record(1, 17.5)
    assert dear.affords(1.1) and not cheap.affords(1.3)
    dear.record(1, 17.5)
    assert dear.affords(1.1)
    dear.record(1, 17.5)
    assert not dear.affords(2.0)


def test_a_draft_model_probe_must_pay_back_within_the_generations_budget() -> None:
    """A draft-model probe on a long new prompt first decodes the whole prompt on the draft
    model: hoped to pay back over the next 128 tokens, it cannot in a 24-token title call."""
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.auto.policy import Choice

    costs = CostModel.from_measured([1.0, 1.1, 1.2, 1.3, 1.45, 1.6, 1.8, 2.0, 2.2], 0.12)  # memory-bound (F16)
    auto = AutoDrafter(costs, None, None)
    plain = Choice("none", 0, 1.0 / costs.step)
    pending = next(p for p in range(10, 5000, 10) if not auto._hopeful("draft", 8, p, plain))
    assert pending > 100  # with a full budget a long catch-up is still worth a probe
    assert auto._hopeful("draft", 8, pending // 2, plain)
    assert not auto._hopeful("draft", 8, pending // 2, plain, left=24)
    auto.budget(24)
    auto.begin([1] * 500)
    assert auto._max_new == 24 and auto._n_start == 500


def test_a_draft_models_catch_up_is_priced_as_observed() -> None:
    """Priced by the target's batch curve until one long catch-up is timed; then by what it
    cost per token (short catch-ups, mostly the step itself, teach nothing)."""
    costs = CostModel.from_measured([1.0, 1.1, 1.2, 1.3], 0.15)  # memory-bound target: its curve is flat
    before = costs.draft_costs("draft", 1, 2000)[1]
    costs.observe_catch_up(8, 5.0)
    assert costs.draft_costs("draft", 1, 2000)[1] == before
    costs.observe_catch_up(2000, 2000 * 0.03)  # 0.03 target steps a token: dearer than the curve says
    assert abs(costs.draft_costs("draft", 1, 2000)[1] - 2000 * 0.03) < 1e-9 and before < 2000 * 0.03
    assert costs.draft_costs("draft", 1, 1)[1] == costs.draft_ratio * costs.step  # no catch-up: one draft step


class _ChainStub:
    """Medusa heads' drafting surface for pure decisions: always the same token."""

    def __init__(self) -> None:
        import numpy as np

        self.vocab = np.arange(8, dtype=np.int32)

    @property
    def n_heads(self) -> int:
        return 3

    def chain_logits(self, h, k):  # type: ignore[no-untyped-def]
        import numpy as np

        return np.zeros((k, len(self.vocab)), np.float32)


class _Hidden:
    reads = 0  # hidden states asked for
    resting = False  # told it may decode without hidden states

    def hidden_at(self, pos: int):  # type: ignore[no-untyped-def]
        import numpy as np

        self.reads += 1
        return np.zeros(4, np.float32)

    def rest_features(self, rest: bool) -> None:
        self.resting = rest


def _heads_probes(verify: list[float], ceiling: tuple[float, ...], steps: int = 400,
                  hidden: _Hidden | None = None, cheaper: list[float] | None = None) -> int:
    """Steps in which auto drafted with Medusa heads whose estimate starts at 0.3 and whose
    held-out ceiling is `ceiling`; every drafted token is rejected. `cheaper`: the batch
    costs from the middle of the run on (a machine that got less busy)."""
    from specli.drafters.auto import AutoDrafter
    from specli.drafters.heads import MedusaDrafter

    def fixed_costs(verify: list[float]) -> CostModel:
        costs = CostModel.from_measured(verify, 0.0)
        costs.observe_verify = lambda *a: None  # type: ignore[method-assign]
        costs.observe_heads = lambda *a: None  # type: ignore[method-assign]
        costs.heads_ratios["medusa"] = 0.05
        return costs

    heads = MedusaDrafter(_ChainStub(), hidden or _Hidden(), 8, prior=0.3, ceiling=ceiling)
    auto = AutoDrafter(fixed_costs(verify), None, None, explore_every=4, heads=[heads])
    history = [9, 9]
    auto.begin(history)
    drafted = 0
    for step in range(steps):
        if cheaper is not None and step == steps // 2:
            auto._costs = fixed_costs(cheaper)  # noqa: SLF001 - the machine's costs, changed under it
        d = auto.propose(history, 3)
        drafted += bool(d.tokens)
        history.append(9)
        auto.accept(history, 0, 0.0)
    return drafted


def test_learned_drafters_are_probed_only_where_their_ceiling_could_pay() -> None:
    """Heads whose held-out acceptance (flattering: the training's own kind of text) could
    not pay for a verify row at this machine's costs are never tried (the CPU's Q4_K_M: a
    2-row batch costs 1.42 plain steps); heads that could are probed, on a schedule."""
    q4, f16 = [1.0, 1.42, 2.05, 2.23], [1.0, 1.08, 1.15, 1.25]
    assert _heads_probes(q4, (0.44, 0.6, 0.7)) == 0
    assert _heads_probes(q4, (0.95, 0.95, 0.95)) > 0  # a ceiling that pays: probed
    assert _heads_probes(f16, (0.44, 0.6, 0.7)) > 0  # cheap batches: the same heads are worth a probe
    assert AcceptanceStats.fixed([0.5, 0.8]).rates(3) == pytest.approx([0.5, 0.8, 0.8])


def test_learned_drafters_that_cannot_pay_cost_a_step_nothing() -> None:
    """Where no learned drafter could pay, auto with heads does what auto without them does:
    it does not even read the hidden state a step. When the batches get cheaper, it
    weighs them again within a recheck."""
    from specli.drafters.auto.drafter import HEADS_RECHECK

    q4, f16 = [1.0, 1.42, 2.05, 2.23], [1.0, 1.08, 1.15, 1.25]
    idle = _Hidden()
    assert _heads_probes(q4, (0.44, 0.6, 0.7), hidden=idle) == 0 and idle.reads == 0 and idle.resting
    weighed = _Hidden()
    assert _heads_probes(f16, (0.44, 0.6, 0.7), hidden=weighed) > 0 and weighed.reads >= 400 - HEADS_RECHECK
    assert not weighed.resting
    later = _Hidden()
    assert _heads_probes(q4, (0.44, 0.6, 0.7), hidden=later, cheaper=f16) > 0
    assert 0 < later.reads <= 200 and not later.resting
