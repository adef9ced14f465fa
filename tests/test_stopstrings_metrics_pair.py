"""Pure helpers: stop strings, metrics, the pair check (with fake vocabularies)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from specli.engine.metrics import (
    Counters,
    acceptance_by_position,
    acceptance_rate,
    mean_accepted_length,
    merge,
    summary,
    time_split,
)
from specli.engine.prefill import common_prefix_len
from specli.engine.stopstrings import StopStrings
from specli.errors import PairError
from specli.runtime.pair import check_pair
from specli.types import VocabInfo


def feed(stops: list[str], deltas: list[str]) -> tuple[str, bool]:
    s = StopStrings(stops)
    out = "".join(s.push(d) for d in deltas)
    return out + s.flush(), s.stopped


def test_stop_string_spanning_deltas() -> None:
    assert feed(["END"], ["abc E", "N", "D tail"]) == ("abc ", True)


def test_partial_match_is_held_then_released() -> None:
    s = StopStrings(["END"])
    assert s.push("abc EN") == "abc "
    assert s.push("X") == "ENX"
    assert not s.stopped


def test_earliest_of_several_stops_wins() -> None:
    assert feed(["zz", "b"], ["a", "bzz"]) == ("a", True)


def test_no_stops_passes_through() -> None:
    assert feed([], ["a", "b"]) == ("ab", False)


def test_common_prefix() -> None:
    assert common_prefix_len([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2]) == 2


def test_metrics_from_counters() -> None:
    c = Counters()
    c.record_step("draft", 4, 4, 5)
    c.record_step("draft", 4, 1, 2)
    c.record_step("none", 0, 0, 1)
    assert acceptance_rate(c) == 5 / 8
    assert mean_accepted_length(c) == 8 / 3
    assert acceptance_by_position(c) == [1.0, 0.5, 0.5, 0.5]
    c.t_total, c.t_prefill, c.t_draft, c.t_verify = 10.0, 1.0, 2.0, 5.0
    assert time_split(c)["other"] == pytest.approx(2.0)
    both = merge(c, c)
    assert both.n_drafted == 16 and both.drafter_steps == {"draft": 4, "none": 2}
    assert summary(both)["acceptance_rate"] == 5 / 8


def test_empty_counters_do_not_divide_by_zero() -> None:
    c = Counters()
    assert acceptance_rate(c) == 0.0 and mean_accepted_length(c) == 0.0


def FakeInfo(**changes: Any) -> VocabInfo:  # noqa: N802
    return replace(VocabInfo("bpe", 100, bos=1, eos=2, eot=-1, add_bos=False, add_eos=False), **changes)


class FakeVocab:
    def __init__(self, info: VocabInfo, texts: dict[int, bytes] | None = None) -> None:
        self._info, self._texts = info, texts or {}

    def info(self) -> VocabInfo:
        return self._info

    def token_text(self, token: int) -> bytes:
        return self._texts.get(token, b"t%d" % token)


def test_pair_ok_and_padded_sizes() -> None:
    assert check_pair(FakeVocab(FakeInfo()), FakeVocab(FakeInfo())) == 100
    assert check_pair(FakeVocab(FakeInfo(n_vocab=228)), FakeVocab(FakeInfo())) == 100


@pytest.mark.parametrize(
    "draft, fragment",
    [
        (FakeVocab(FakeInfo(vocab_type="spm")), "tokenizers differ"),
        (FakeVocab(FakeInfo(eos=3)), "special tokens differ"),
        (FakeVocab(FakeInfo(n_vocab=300)), "differ in size"),
        (FakeVocab(FakeInfo(), {42: b"other"}), "token 42 differ"),
    ],
)
def test_pair_refused_saying_what_differs(draft: FakeVocab, fragment: str) -> None:
    with pytest.raises(PairError, match=fragment) as e:
        check_pair(FakeVocab(FakeInfo()), draft)
    assert "ngram" in e.value.hint
