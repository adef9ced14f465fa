"""The suffix index (against a brute-force reference) and the persistent history store."""

from __future__ import annotations

import multiprocessing
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specli.history import Continuation, HistoryStore, SuffixIndex, history_dir, read_store

# ---------------------------------------------------------------- brute-force reference


def reference(docs: list[list[int]], history: list[int], max_tokens: int, min_match: int = 3,
              max_match: int = 12) -> Continuation | None:
    """The lookup as specified, by scanning every document."""
    for n in range(min(max_match, len(history)), min_match - 1, -1):
        suffix = history[-n:]
        occ = [(d, i) for d, doc in enumerate(docs) for i in range(n, len(doc)) if doc[i - n : i] == suffix]
        if occ:
            break
    else:
        return None
    tokens: list[int] = []
    support: list[int] = []
    alive = occ
    for k in range(max_tokens):
        tally: dict[int, tuple[int, tuple[int, int]]] = {}
        for d, i in alive:
            if i + k < len(docs[d]):
                c, r = tally.get(docs[d][i + k], (0, (-1, -1)))
                tally[docs[d][i + k]] = (c + 1, max(r, (d, i)))
        if not tally:
            break
        best = max(tally, key=lambda t: tally[t])
        tokens.append(best)
        support.append(tally[best][0])
        alive = [(d, i) for d, i in alive if i + k < len(docs[d]) and docs[d][i + k] == best]
    return Continuation(tokens, n, support, len(occ))


def check_all(index: SuffixIndex, docs: list[list[int]], histories: list[list[int]]) -> None:
    for history in histories:
        for max_tokens, min_match, max_match in ((8, 3, 12), (3, 1, 4), (20, 2, 16), (1, 5, 5)):
            got = index.lookup(history, max_tokens, min_match, max_match)
            assert got == reference(docs, history, max_tokens, min_match, max_match), (history, max_tokens)


small = st.integers(0, 3)
docs_st = st.lists(st.lists(small, max_size=40), max_size=8)


def histories_from(docs: list[list[int]], data: st.DataObject) -> list[list[int]]:
    """Random histories, and histories ending inside stored documents (so matches are long)."""
    out = [data.draw(st.lists(small, max_size=20)) for _ in range(3)]
    for doc in docs[:4]:
        if doc:
            end = data.draw(st.integers(0, len(doc)))
            out.append(data.draw(st.lists(small, max_size=3)) + doc[max(0, end - 18) : end])
    return out


# ---------------------------------------------------------------- SuffixIndex


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=docs_st, data=st.data())
def test_lookup_matches_reference(docs: list[list[int]], data: st.DataObject) -> None:
    index = SuffixIndex(docs)
    assert index.n_tokens == sum(map(len, docs))
    assert index.n_documents == sum(1 for d in docs if d)
    check_all(index, docs, histories_from(docs, data))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=docs_st, more=docs_st, data=st.data())
def test_lookup_matches_reference_after_add(docs: list[list[int]], more: list[list[int]],
                                            data: st.DataObject) -> None:
    index = SuffixIndex(docs)
    for i, doc in enumerate(more):
        index.add(doc)
        if i % 3 == 2:
            check_all(index, docs + more[: i + 1], histories_from(docs + more[: i + 1], data))
    all_docs = docs + more
    assert [d.tolist() for d in index.documents()] == [d for d in all_docs if d]
    check_all(index, all_docs, histories_from(all_docs[::-1], data))


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from([0, 1, 7, 2**17, 2**30 - 1]), max_size=30), max_size=5),
       data=st.data())
def test_large_token_ids(docs: list[list[int]], data: st.DataObject) -> None:
    index = SuffixIndex(docs)
    for doc in docs:
        if doc:
            end = data.draw(st.integers(0, len(doc)))
            history = [5] + doc[:end]
            assert index.lookup(history, 6, 1, 12) == reference(docs, history, 6, 1, 12)


@settings(max_examples=40, deadline=None)
@given(docs=docs_st, depth=st.sampled_from([1, 2, 3, 5, 8]), data=st.data())
def test_depth_limits_the_match(docs: list[list[int]], depth: int, data: st.DataObject) -> None:
    index = SuffixIndex(docs, depth=depth)
    for history in histories_from(docs, data):
        got = index.lookup(history, 5, 1, 12)
        assert got == reference(docs, history, 5, 1, depth)


def test_keys_follow_the_suffix_array_order() -> None:
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 5, int(rng.integers(1, 300))) for _ in range(60)]
    index = SuffixIndex(docs)
    for doc in rng.integers(0, 5, (40, 50)):
        index.add(doc)
    for segment in index._segments:
        assert np.all(np.diff(segment.keys) >= 0)


def test_continuation_semantics() -> None:
    docs = [[1, 2, 3, 4, 5, 6], [9, 2, 3, 4, 7, 8], [2, 3, 4, 5, 9]]
    index = SuffixIndex(docs)
    # Three occurrences of 2 3 4: 5 follows twice; then 6 or 9 once each, the newer (9) wins.
    assert index.lookup([0, 2, 3, 4], 5) == Continuation([5, 9], 3, [2, 1], 3)
    # The longest match decides: 9 2 3 4 occurs once.
    assert index.lookup([9, 2, 3, 4], 5) == Continuation([7, 8], 4, [1, 1], 1)
    # Stops at max_tokens, and at the end of a document (never crosses into the next).
    assert index.lookup([9, 2, 3, 4], 1) == Continuation([7], 4, [1], 1)
    assert index.lookup([4, 5, 9], 4, min_match=2) is None  # 5 9 ends a document
    assert index.lookup([1, 2, 3], 4, min_match=4) is None
    assert index.lookup([2, 3], 4) is None  # shorter than min_match
    assert index.lookup([0, 2, 3, 4], 0) is None
    assert SuffixIndex().lookup([1, 2, 3], 4) is None
    # A negative id matches nothing, but the part after it still can.
    assert index.lookup([9, -1, 2, 3, 4], 2) == Continuation([5, 9], 3, [2, 1], 3)
    assert index.lookup([2, 3, -4], 2, min_match=1) is None
    index.add([2, 3, 4, 7, 1])  # ties now go 7 (newest) over 5
    got = index.lookup([0, 2, 3, 4], 5)
    assert got is not None and got.tokens == [7, 1] and got.support == [2, 1]
    assert (index.n_documents, index.n_tokens) == (4, 22)
    index.add([])
    assert index.n_documents == 4


def test_bad_token_ids_rejected() -> None:
    with pytest.raises(ValueError):
        SuffixIndex([[1, -2, 3]])
    with pytest.raises(ValueError):
        SuffixIndex().add([2**31])


def test_many_occurrences_are_sampled() -> None:
    docs = [[1, 2, 3, 4, 5]] * 30 + [[1, 2, 3, 9]] * 10
    index = SuffixIndex(docs, max_occurrences=8)
    got = index.lookup([1, 2, 3], 3)
    assert got is not None and got.n_occurrences == 40 and got.tokens == [4, 5]
    assert 20 <= got.support[0] <= 40  # estimated from 8 of the 40
    assert got.support == sorted(got.support, reverse=True)
    assert SuffixIndex(docs).lookup([1, 2, 3], 3) == Continuation([4, 5], 3, [30, 30], 40)


# ---------------------------------------------------------------- HistoryStore


def saved_docs(path: Path) -> list[list[int]]:
    _, lengths, tokens = read_store(path)
    return [d.tolist() for d in np.split(tokens, np.cumsum(lengths)[:-1])] if len(lengths) else []


def test_store_round_trip(tmp_path: Path) -> None:
    store = HistoryStore.open("qwen-abc123", tmp_path)
    assert store.notes == [] and store.index.n_tokens == 0
    store.save()  # nothing to save: no file
    assert not store.path.exists()
    store.add([1, 2, 3, 4, 5])
    store.add([])
    store.add(np.array([7, 8, 9]))
    assert store.index.lookup([1, 2, 3], 2) == Continuation([4, 5], 3, [1, 1], 1)
    store.save()
    assert store.path == tmp_path / "qwen-abc123.hist" and store.pending == []
    again = HistoryStore.open("qwen-abc123", tmp_path)
    assert again.notes == [] and [d.tolist() for d in again.index.documents()] == [[1, 2, 3, 4, 5], [7, 8, 9]]
    stats = again.stats()
    assert stats["n_documents"] == 2 and stats["n_tokens"] == 8 and stats["max_tokens"] == 10_000_000
    assert stats["file_bytes"] == store.path.stat().st_size > 0
    # Another vocabulary is another file; an odd key gets a hashed file name.
    odd = HistoryStore.open("a/b c", tmp_path)
    odd.add([1])
    odd.save()
    assert odd.path.parent == tmp_path and odd.path.suffix == ".hist" and "/" not in odd.path.name


def test_eviction_keeps_the_bound_and_drops_oldest(tmp_path: Path) -> None:
    store = HistoryStore.open("v", tmp_path, max_tokens=100)
    for i in range(5):
        store.add([i] * 30)
    store.save()
    assert saved_docs(store.path) == [[2] * 30, [3] * 30, [4] * 30]
    store.add([9] * 50)
    store.save()
    assert saved_docs(store.path) == [[4] * 30, [9] * 50]
    smaller = HistoryStore.open("v", tmp_path, max_tokens=60)
    assert [d.tolist() for d in smaller.index.documents()] == [[9] * 50]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.integers(1, 40), max_size=6), min_size=1, max_size=4),
       cap=st.integers(1, 120))
def test_eviction_property(tmp_path: Path, batches: list[list[int]], cap: int) -> None:
    HistoryStore.clear(tmp_path)
    added: list[list[int]] = []
    for batch in batches:
        store = HistoryStore.open("p", tmp_path, max_tokens=cap)
        for n in batch:
            added.append([len(added)] * n)
            store.add(added[-1])
        store.save()
    kept = saved_docs(store.path) if store.path.exists() else []
    assert sum(map(len, kept)) <= cap
    # The newest documents, as many as fit: the next older one would not.
    assert kept == added[len(added) - len(kept) :]
    if len(kept) < len(added):
        assert sum(map(len, kept)) + len(added[-len(kept) - 1]) > cap


def good_file(tmp_path: Path) -> Path:
    store = HistoryStore.open("v", tmp_path)
    store.add([1, 2, 3, 4])
    store.add([5, 6, 7])
    store.save()
    return store.path


def damage_truncate(data: bytes) -> bytes:
    return data[:-5]


def damage_short(data: bytes) -> bytes:
    return data[:10]


def damage_flip(data: bytes) -> bytes:
    return data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:]


def damage_magic(data: bytes) -> bytes:
    return b"NOTSTORE" + data[8:]


def damage_version(data: bytes) -> bytes:
    return data[:8] + struct.pack("<I", 99) + data[12:]


def damage_lengths(data: bytes) -> bytes:  # a huge document count, so the size disagrees
    return data[:16] + struct.pack("<Q", 2**40) + data[24:]


@pytest.mark.parametrize("damage", [damage_truncate, damage_short, damage_flip, damage_magic, damage_version,
                                    damage_lengths, lambda d: b"", lambda d: b"\0" * 4096])
def test_damaged_store_is_noted_and_rewritten(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    path = good_file(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    store = HistoryStore.open("v", tmp_path)
    assert len(store.notes) == 1 and "damaged" in store.notes[0] and store.index.n_tokens == 0
    assert HistoryStore.all_stats(tmp_path)[0]["status"] != "ok"
    store.save()  # nothing new, but the damaged file is replaced
    assert saved_docs(path) == []
    store.add([4, 4])
    store.save()
    assert saved_docs(path) == [[4, 4]] and HistoryStore.open("v", tmp_path).notes == []


def test_damaged_on_disk_at_save_time(tmp_path: Path) -> None:
    path = good_file(tmp_path)
    store = HistoryStore.open("v", tmp_path)
    path.write_bytes(b"garbage")
    store.add([8, 8, 8])
    store.save()
    assert saved_docs(path) == [[8, 8, 8]] and "damaged" in store.notes[-1]


def test_store_of_another_vocabulary_is_not_used(tmp_path: Path) -> None:
    path = good_file(tmp_path)
    path.rename(tmp_path / "w.hist")
    store = HistoryStore.open("w", tmp_path)
    assert store.index.n_tokens == 0 and "vocabulary 'v'" in store.notes[0]


def test_unwritable_store_costs_a_note(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    store = HistoryStore.open("v", tmp_path / "file" / "sub")
    store.add([1, 2, 3])
    store.save()
    assert "not saved" in store.notes[-1] and len(store.pending) == 1


def _save_many(directory: str, worker: int, count: int) -> None:
    for i in range(count):
        store = HistoryStore.open("shared", Path(directory))
        store.add([worker, i, *range(i % 7)])
        store.add([worker, i, 99])
        store.save()


def test_two_processes_saving_at_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_save_many, args=(str(tmp_path), w, 15)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = HistoryStore.open("shared", tmp_path)
    assert store.notes == []
    docs = {tuple(d.tolist()) for d in store.index.documents()}
    expected = {(w, i, *range(i % 7)) for w in (1, 2) for i in range(15)} | {
        (w, i, 99) for w in (1, 2) for i in range(15)}
    assert docs == expected
    assert not list(tmp_path.glob("*.tmp-*"))


def test_stats_and_clear(tmp_path: Path) -> None:
    assert HistoryStore.all_stats(tmp_path / "none") == [] and HistoryStore.clear(tmp_path / "none") == 0
    for key, doc in (("a", [1, 2]), ("b", [3, 4, 5])):
        store = HistoryStore.open(key, tmp_path)
        store.add(doc)
        store.save()
    (tmp_path / "c.hist").write_bytes(b"junk")
    (tmp_path / "a.hist.tmp-123").write_bytes(b"left over")
    stats = HistoryStore.all_stats(tmp_path)
    assert [(s["vocab_key"], s["n_documents"], s["n_tokens"], s["status"]) for s in stats[:2]] == [
        ("a", 1, 2, "ok"), ("b", 1, 3, "ok")]
    assert stats[2]["vocab_key"] == "c" and str(stats[2]["status"]).startswith("damaged")
    assert HistoryStore.clear(tmp_path) == 3
    assert not list(tmp_path.glob("*.hist*")) or all(p.suffix == ".lock" for p in tmp_path.glob("*.hist*"))
    assert HistoryStore.open("a", tmp_path).index.n_tokens == 0


def test_history_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPECLI_HISTORY_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert history_dir() == tmp_path / "specli" / "history"
    monkeypatch.setenv("SPECLI_HISTORY_DIR", str(tmp_path / "h"))
    assert history_dir() == tmp_path / "h"
    store = HistoryStore.open("k")
    assert store.path == tmp_path / "h" / "k.hist"


def test_suffix_drafter_keeps_the_prompt_tail_so_a_repeat_drafts_from_its_first_token() -> None:
    from specli.drafters.ngram import NgramDrafter
    from specli.drafters.suffix import SuffixDrafter

    index = SuffixIndex()
    drafter = SuffixDrafter(index, NgramDrafter(3, 12), index.add, min_match=3, max_match=12)
    prompt, output = list(range(1000, 1040)), list(range(2000, 2030))
    drafter.begin(prompt)
    drafter.end(prompt + output)
    assert index.documents()[0].tolist() == prompt[-12:] + output  # not the whole prompt
    drafter.begin(prompt)
    d = drafter.propose(prompt + output[:1], 64)  # one output token: the rest is drafted
    assert d.tokens == output[1:] and drafter.last is not None and drafter.last.match_len == 12
    drafter.begin(prompt)
    drafter.end(prompt)  # nothing generated: nothing stored
    assert index.n_documents == 1


def test_suffix_drafts_stop_where_few_stored_occurrences_still_agree() -> None:
    from specli.drafters.ngram import NgramDrafter
    from specli.drafters.suffix import SuffixDrafter

    common = [5, 6, 7, 8]
    # 20 occurrences of `common`, all going on with 9, 10, then each with a token of its own
    docs = [common + [9, 10, 100 + i, 50, 51] for i in range(20)]
    drafter = SuffixDrafter(SuffixIndex(docs), NgramDrafter(3, 12), lambda doc: None)
    assert drafter.from_store([1, 2, *common], 8).tokens == [9, 10]  # 1 of 20 past that: under 10 %
    docs = [common + [9, 10, 11, 50, 51]] * 2 + docs[:10]
    drafter = SuffixDrafter(SuffixIndex(docs), NgramDrafter(3, 12), lambda doc: None)
    assert drafter.from_store([1, 2, *common], 8).tokens == [9, 10, 11, 50, 51]  # 2 of 12 agree on 11
