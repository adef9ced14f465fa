"""N-gram (prompt lookup) drafting on hand-made sequences."""

from __future__ import annotations

import pytest

from specli.drafters.ngram import NgramDrafter, NgramIndex


def propose(history: list[int], k: int = 4, **kw: object) -> list[int]:
    d = NgramDrafter(**kw)  # type: ignore[arg-type]
    d.begin(history[:1])
    return d.propose(history, k).tokens


def test_empty_and_short_history() -> None:
    assert propose([]) == []
    assert propose([5]) == []


def test_continues_the_match() -> None:
    #          a  b  c  d  e  .. a  b
    history = [1, 2, 3, 4, 5, 9, 1, 2]
    assert propose(history, 3) == [3, 4, 5]


def test_longest_match_wins() -> None:
    # suffix (7, 1, 2): a 3-gram match continues with 8; the 2-gram (1, 2) alone
    # would pick the more recent occurrence, continuing with 6
    history = [7, 1, 2, 8, 0, 1, 2, 6, 0, 7, 1, 2]
    assert propose(history, 1, n_min=2, n_max=3) == [8]


def test_most_recent_wins_ties() -> None:
    history = [1, 2, 3, 0, 1, 2, 4, 0, 1, 2]
    assert propose(history, 1) == [4]


def test_cut_at_end_of_generation() -> None:
    history = [1, 2, 3, 99, 5, 1, 2]
    assert propose(history, 4, is_eog=lambda t: t == 99) == [3, 99]


def test_draft_never_longer_than_k_or_history() -> None:
    history = [1, 2, 3, 1, 2]
    assert propose(history, 10) == [3, 1, 2]
    assert propose(history, 0) == []


def test_incremental_index_equals_rebuild() -> None:
    import random

    rng = random.Random(0)
    history = [rng.randrange(6) for _ in range(300)]
    inc = NgramIndex(1, 3)
    for i in range(1, len(history) + 1):
        inc.update(history[:i])
    full = NgramIndex(1, 3)
    full.update(history)
    for n in range(1, 4):
        assert inc._maps[n] == full._maps[n]
    assert inc.lookup(history) == full.lookup(history)


def test_bad_range() -> None:
    with pytest.raises(ValueError):
        NgramIndex(3, 2)


def test_reference_drafts_as_prediction_and_history_wins() -> None:
    from specli.drafters.ngram import PREDICTION

    d = NgramDrafter(2, 3, reference=[1, 2, 3, 4, 5])
    d.begin([9, 1, 2])
    got = d.propose([9, 1, 2], 8)
    assert got.tokens == [3, 4, 5] and got.source == PREDICTION  # never past the reference's end
    history = [1, 2, 7, 0, 1, 2]
    d.begin(history)
    got = d.propose(history, 3)
    assert got.tokens == [7, 0, 1] and got.source == "ngram"  # the prompt's own match is more recent
    history += [3, 4]  # the output follows the prediction: its lookup goes on from the grown history
    assert d.propose(history, 2).tokens == [5]
