"""The prompt cache on a real model: conversations saved and restored through llama.cpp's
sequence states, in RAM and on disk, and files that must be refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specli.engine import GenerationConfig
from specli.engine.core import generate_steps
from specli.runtime.kv.cache_files import DiskStore
from specli.runtime.kv.prompt_cache import MIN_ENTRY, PromptCache, identity, worth_saving

CONFIG = GenerationConfig(max_tokens=24)


def conversation(model: Any, topic: str, turns: int = 40) -> list[int]:
    text = "".join(f"Q{i}: what is {topic} number {i}? A{i}: {topic} {i} is {i * 7}.\n" for i in range(turns))
    tokens: list[int] = model.tokenize(text + f"Q{turns}: what is {topic} number {turns}? A{turns}:")
    assert len(tokens) > 2 * MIN_ENTRY
    return tokens


def answer(model: Any, prompt: list[int]) -> list[int]:
    return [t for step in generate_steps(model, prompt, CONFIG) for t in step.tokens]


def fresh_answer(model: Any, prompt: list[int]) -> list[int]:
    model.reset()
    return answer(model, prompt)


NEAR_TIE = 0.1  # logits: the bench's tie bound on this model is of this order


def assert_same_or_near_tie(model: Any, prompt: list[int], restored: list[int], fresh: list[int]) -> None:
    """Equal, or the first difference is a near-tie of the fresh prefill: the restored
    run's token is the runner-up within NEAR_TIE of the top logit (the KV of a prefix
    decoded token by token differs from one batch's in the last bits)."""
    diff = next((i for i, (a, b) in enumerate(zip(restored, fresh)) if a != b), None)
    if diff is None:
        assert len(restored) == len(fresh)
        return
    model.reset()
    row = model.decode([*prompt, *fresh[:diff]], [len(prompt) + diff - 1])[0]
    top = row.max()
    assert top - row[restored[diff]] < NEAR_TIE, f"differs at token {diff} by {top - row[restored[diff]]}"


def test_side_call_saves_and_main_turn_restores(smol: Any) -> None:
    main, side = conversation(smol, "apple"), conversation(smol, "river", 30)
    cache = PromptCache(smol, None, ram_bytes=2**30)
    smol.reset()
    assert cache.prepare(main).source == "none"
    first = answer(smol, main)
    held = list(smol.tokens)
    use = cache.prepare(side)  # the side call would throw the main conversation away: saved first
    assert use.saved and use.source in ("none", "live")
    answer(smol, side)
    follow = [*held, *smol.tokenize(" Q99: and apple number 99? A99:", add_special=False)]
    use = cache.prepare(follow)
    assert use.source == "ram" and use.n_restored == len(held)
    assert smol.tokens == held
    restored = answer(smol, follow)
    assert_same_or_near_tie(smol, follow, restored, fresh_answer(smol, follow))  # as after a full prefill
    assert first  # the main turn answered at all
    s = cache.stats
    assert (s.hits, s.restored_tokens) == (1, len(held)) and s.saves == 2 and s.ram_entries == 2


def test_a_new_conversation_on_the_same_system_prompt_saves_the_last_one(smol: Any) -> None:
    """Agents' conversations share a long system prompt and tools and differ after it: the
    request keeps most of the live cache, but the conversation it drops comes back whole."""
    system = conversation(smol, "tool", 30)
    def own(topic: str) -> list[int]:
        tail = "".join(f"U{i}: {topic} {i}? B{i}: {topic} {i} is {i * 3}.\n" for i in range(14)) + "U14:"
        return [*system, *smol.tokenize(tail, add_special=False)]
    first, second = own("lamp"), own("stone")
    cache = PromptCache(smol, None, ram_bytes=2**30)
    smol.reset()
    cache.prepare(first)
    answer(smol, first)
    held = list(smol.tokens)
    kept = len(system) + 1  # at most: the tails differ from their first word
    assert len(held) - kept >= MIN_ENTRY and kept > len(held) // 2  # llama-server's rule would not save it
    use = cache.prepare(second)
    assert use.saved and use.source == "live"
    answer(smol, second)
    use = cache.prepare([*held, *smol.tokenize(" and more?", add_special=False)])
    assert use.source == "ram" and use.n_restored == len(held)


def test_worth_saving() -> None:
    assert worth_saving(11_717, 9_434)  # a new Claude Code conversation: 2.3k of 11.7k dropped
    assert worth_saving(2_000, 0) and worth_saving(600, 300)
    assert not worth_saving(11_717, 11_717 - 255)  # fewer than MIN_ENTRY tokens
    assert not worth_saving(30_000, 28_000)  # a next turn re-rendering a 2k-token answer: under an eighth
    assert not worth_saving(0, 0)


def test_prefix_entry_dropped_and_small_match_keeps_large_entry(smol: Any) -> None:
    main = conversation(smol, "pear")
    cache = PromptCache(smol, None, ram_bytes=2**30)
    smol.reset()
    answer(smol, main)
    short = list(smol.tokens)
    cache.save_live()
    answer(smol, [*short, *smol.tokenize(" Q77: and pear 77? A77:", add_special=False)])
    cache.save_live()  # the longer conversation holds the shorter one: it is dropped
    assert len(cache.entries) == 1 and len(next(iter(cache.entries.values())).tokens) > len(short)
    tiny = smol.tokenize("Hello there, how are you?")
    cache.prepare(tiny)
    answer(smol, tiny)
    assert len(cache.entries) == 1  # a small request neither evicts nor replaces the large entry
    assert cache.prepare(main).source == "ram"


def test_disk_entries_survive_a_restart_and_bad_files_are_refused(smol: Any, tmp_path: Path) -> None:
    ident = identity(smol, None)
    main, side = conversation(smol, "stone"), conversation(smol, "cloud", 30)
    cache = PromptCache(smol, None, ram_bytes=0, disk=DiskStore(tmp_path, ident, 2**30))
    smol.reset()
    answer(smol, main)
    held = list(smol.tokens)
    prompt = held + [smol.tokenize(" Q5:", add_special=False)[0]]
    expected = answer(smol, prompt)  # the live conversation going on: what a restore must give
    smol.rollback(len(held))
    cache.prepare(side)  # saved, and spilled at once (no RAM)
    assert cache.stats.disk_entries == 1 and cache.stats.ram_entries == 0

    def restart() -> PromptCache:
        smol.reset()
        return PromptCache(smol, None, ram_bytes=0, disk=DiskStore(tmp_path, ident, 2**30))

    again = restart()
    use = again.prepare(prompt)
    assert use.source == "disk" and use.n_restored == len(held)
    assert answer(smol, prompt) == expected
    (path,) = (tmp_path / ident.key()).glob("*.kv")
    good = path.read_bytes()
    for bad in (good[:-1000], good[:-500] + bytes(500), good[: len(good) // 2]):
        path.write_bytes(bad)
        use = restart().prepare(prompt)
        assert use.source in ("none", "live") and use.n_restored == 0
        assert not path.exists()  # refused and removed
        assert_same_or_near_tie(smol, prompt, answer(smol, prompt), fresh_answer(smol, prompt))  # recomputed
        path.write_bytes(good)
    # a file of another model pair, moved into this pair's folder, is refused at the scan
    other = DiskStore(tmp_path, ident.__class__("another-model", "", ident.build, ident.params), 2**30)
    (other_path,) = [p for p in (tmp_path / ident.key()).glob("*.kv")]
    moved = other.dir / other_path.name
    other_path.rename(moved)
    assert other.scan() == [] and not moved.exists() and other.refused == 1


def test_disk_bound(smol: Any, tmp_path: Path) -> None:
    ident = identity(smol, None)
    smol.reset()
    answer(smol, conversation(smol, "ant"))
    size = len(smol.save_state())
    disk = DiskStore(tmp_path, ident, int(size * 2.5))
    cache = PromptCache(smol, None, ram_bytes=0, disk=disk)
    for topic in ("bee", "cat", "dog", "eel"):
        cache.prepare(conversation(smol, topic))
        answer(smol, conversation(smol, topic))
        assert disk.used_bytes() <= disk.max_bytes
    files = list(disk.dir.glob("*.kv"))
    assert 1 <= len(files) <= 2
    # the entries whose files the bound removed are forgotten: none is restored from a missing file
    assert cache.stats.disk_entries == len(files) and {e.header.path for e in cache.entries.values() if e.header} == set(files)
    assert cache.prepare(conversation(smol, "bee")).source in ("none", "live") and cache.stats.refused == 0


def test_refused_state_leaves_an_empty_cache(smol: Any) -> None:
    smol.reset()
    answer(smol, conversation(smol, "lamp"))
    state = smol.save_state()
    tokens = list(smol.tokens)
    assert not smol.load_state(bytearray(state[: len(state) // 3]), tokens)
    assert smol.tokens == [] and smol.cache_pos_max() == -1
    assert not smol.load_state(state, tokens[:-3])  # a token list that does not match the state
    assert smol.load_state(state, tokens) and smol.tokens == tokens


@pytest.mark.parametrize("exact", [False])
def test_named_entry_kept(smol: Any, exact: bool) -> None:
    cache = PromptCache(smol, None, ram_bytes=2**30)
    smol.reset()
    answer(smol, smol.tokenize("A short conversation."))
    entry_id = cache.save_live("notes")
    assert entry_id and cache.named("notes") is not None
