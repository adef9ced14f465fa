"""Chat sessions driven through their input function; the dashboard on a recording console."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import replace

import pytest
from conftest import SMOL, model_file
from rich.console import Console

from specli import profiles
from specli.cli.chat import ChatSession
from specli.cli.dashboard import GenerationDashboard, Reply, bar, stats_table
from specli.cli.stats_view import compact_stats, position_line, sparkline
from specli.engine import StepEvent
from specli.engine.metrics import Counters
from specli.errors import UsageError
from specli.runtime import Runtime, open_runtime, prompting
from specli.types import FinishReason


@pytest.fixture(scope="module")
def rt() -> Iterator[Runtime]:
    model_file(SMOL)
    s = profiles.resolve_settings(None, {"target": SMOL, "draft": SMOL, "ctx": 1024, "max_tokens": 24,
                                         "drafter": "draft", "draft_max": 3})
    r = open_runtime(s)
    yield r
    r.close()


def recording() -> Console:
    return Console(file=io.StringIO(), record=True, width=120, color_system=None)


def feed(lines: list[str]):  # type: ignore[no-untyped-def]
    it = iter(lines)

    def read(prompt: str) -> str:
        try:
            return next(it)
        except StopIteration:
            raise EOFError from None

    return read


def test_two_turns_reuse_the_cache_and_stats_show_it(rt: Runtime) -> None:
    rt.target.reset()
    con = recording()
    chat = ChatSession(rt, con)
    chat.run(feed(["Say hello.", "Now say goodbye.", "/stats"]))
    assert len(chat.turns) == 2
    first, second = chat.turns
    assert first.counters.n_prompt_reused == 0
    assert second.counters.n_prompt_reused > first.counters.n_prompt
    out = con.export_text()
    assert "reused from cache" in out and "session" in out and "last turn" in out


def test_reset_clears_history_and_caches(rt: Runtime) -> None:
    con = recording()
    chat = ChatSession(rt, con)
    chat.run(feed(["Say hello.", "/reset", "Say hello."]))
    assert len(chat.turns) == 1
    assert chat.turns[0].counters.n_prompt_reused == 0
    assert "cleared" in con.export_text()


def test_interrupted_reply_keeps_the_session(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    import specli.cli.chat as chat_mod

    real = chat_mod.generate

    def interrupting(*a, **kw):  # type: ignore[no-untyped-def]
        for i, ev in enumerate(real(*a, **kw)):
            if i == 2:
                raise KeyboardInterrupt
            yield ev

    con = recording()
    chat = ChatSession(rt, con)
    monkeypatch.setattr(chat_mod, "generate", interrupting)
    chat.run(feed(["Write a long poem about the sea."]))
    monkeypatch.setattr(chat_mod, "generate", real)
    assert chat.turns[0].finish_reason == "interrupted"
    assert chat.turns[0].assistant  # what was generated is kept
    chat.run(feed(["Say hi."]))
    assert len(chat.turns) == 2 and chat.turns[1].finish_reason in ("stop", "length")
    assert "session goes on" in con.export_text()


def test_set_system_save_and_help(rt: Runtime, tmp_path) -> None:  # type: ignore[no-untyped-def]
    con = recording()
    chat = ChatSession(rt, con)
    chat.run(feed(["/set temperature 0.5", "/set temperature -2", "/set ctx 10", "/system Be terse.",
                   "Hi", f"/save {tmp_path / 't.json'}", f"/save {tmp_path / 't.md'}", "/help", "/bogus", "/exit",
                   "never read"]))
    assert chat.settings.temperature == 0.5
    out = con.export_text()
    assert "temperature" in out and "expected" in out  # the bad value was refused
    assert "restart" in out  # ctx needs a reload
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["system"] == "Be terse." and data["turns"][0]["user"] == "Hi"
    assert "## assistant" in (tmp_path / "t.md").read_text()
    assert "/stats" in out and "unknown command" in out
    assert len(chat.turns) == 1


def test_old_turns_are_dropped_when_the_context_fills(rt: Runtime) -> None:
    con = recording()
    chat = ChatSession(rt, con)
    long = "Repeat this sentence back to me please. " * 30
    chat.run(feed([long] * 5))
    assert chat.n_dropped > 0
    assert "leaving out the oldest" in con.export_text()
    assert all(t.finish_reason in ("stop", "length") for t in chat.turns)


def test_set_takes_new_key_names_and_refuses_what_needs_a_reload(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    con = recording()
    chat = ChatSession(rt, con)
    chat.run(feed(["/set p-min 0.2", "/set draft-p-min 0.3", "/set raw yes"]))
    assert chat.settings.draft_p_min == 0.3 and chat.settings.raw
    assert chat.overrides == {"draft_p_min": "0.3", "raw": "yes"}
    assert "draft_p_min = 0.2" in con.export_text()
    monkeypatch.setattr(rt, "draft", None)  # as if the session had started without the draft model
    chat = ChatSession(rt, con, overrides={"drafter": "ngram"})
    chat.set("drafter hybrid")
    assert chat.settings.drafter == "draft" and "needs the draft model" in con.export_text()


def test_prompt_tokens_raw_and_templated(rt: Runtime) -> None:
    m = rt.target
    history = [{"role": "user", "content": "One, two,"}, {"role": "assistant", "content": " three."}]
    raw = prompting.prompt_tokens(m, "Four,", history, system="ignored", raw=True)
    assert raw == m.tokenize("One, two, three.\n\nFour,", add_special=True, parse_special=True)
    assert prompting.prompt_tokens(m, "Hi") == m.chat_tokens([{"role": "user", "content": "Hi"}])
    templated = prompting.prompt_tokens(m, "Four,", history, system="Be terse.")
    assert templated == m.chat_tokens([{"role": "system", "content": "Be terse."}, *history,
                                       {"role": "user", "content": "Four,"}])
    assert rt.prompt_tokens("Four,", replace(rt.settings, raw=True), history) == raw
    with pytest.raises(UsageError, match="empty"):
        prompting.prompt_tokens(m, "  ")


def test_raw_chat_continues_the_plain_text(rt: Runtime) -> None:
    con = recording()
    chat = ChatSession(rt, con)
    chat.run(feed(["/set raw true", "One, two, three,", "four,"]))
    assert len(chat.turns) == 2 and all(t.finish_reason in ("stop", "length") for t in chat.turns)
    assert chat.turns[1].counters.n_prompt_reused > 0  # the first turn's text stays a prefix


def test_reply_keeps_what_came_before_an_interrupt() -> None:
    def events() -> Iterator[StepEvent]:
        yield _event(2, 2, 1)
        yield _event(4, 4, 2)
        raise KeyboardInterrupt

    reply, shown = Reply(), list[StepEvent]()
    with pytest.raises(KeyboardInterrupt):
        reply.follow(events(), None, shown.append)
    assert reply.text == "abab" and len(shown) == 2
    assert reply.counters.n_generated == 4 and reply.finish_reason is None
    done = Reply()
    done.follow([_event(2, 2, 1, "length")], GenerationDashboard(recording()), shown.append)
    assert done.finish_reason == "length" and len(shown) == 2  # the dashboard showed it


def _event(n: int, drafted: int, accepted: int, reason: FinishReason | None = None) -> StepEvent:
    c = Counters(n_prompt=10, n_generated=n, n_target_forwards=3, n_step_tokens=n, n_drafted=drafted,
                 n_accepted=accepted, drafted_by_pos=[3, 3], accepted_by_pos=[3, 1], t_total=2.0,
                 t_prefill=0.5, t_draft=0.5, t_verify=0.8, t_first_token=0.5)
    return StepEvent([1, 2], "ab", [("a", True), ("b", False)], [True, False], drafted, accepted, "draft", c, reason)


def test_dashboard_renders_the_figures() -> None:
    con = recording()
    dash = GenerationDashboard(con)
    dash.update(_event(6, 6, 4))
    dash.update(_event(8, 6, 4, "stop"))
    con.print(dash.render())
    out = con.export_text()
    assert "66.7%" in out and "(4/6 drafted)" in out  # acceptance
    assert "2.67 over 3 target forwards" in out  # tokens per forward
    assert "pos 1" in out and "100%" in out and "pos 2" in out and "33%" in out
    assert "4.0 tok/s overall" in out
    assert "abab" in out and "stats (stop)" in out


def test_dashboard_colours_draft_tokens() -> None:
    con = Console(file=io.StringIO(), record=True, width=80, color_system="truecolor", force_terminal=True)
    dash = GenerationDashboard(con)
    dash.update(_event(2, 2, 1))
    assert any(seg.style and "green" in str(seg.style) for seg in dash.text().render(con))
    plain = GenerationDashboard(con, color_draft=False)
    plain.update(_event(2, 2, 1))
    assert not any(seg.style and "green" in str(seg.style) for seg in plain.text().render(con))


def test_bar_and_table() -> None:
    assert bar(0.5, 10) == "█████·····"
    con = recording()
    con.print(stats_table(Counters()))
    assert "0.0%" in con.export_text()


def test_save_and_load_a_conversation_by_name(rt: Runtime) -> None:
    """/save NAME keeps the turns and both KV caches; after /reset and another chat,
    /load NAME brings them back, and the next turn prefills only its own message."""
    con = recording()
    chat = ChatSession(rt, con)
    chat.run(feed(["/system Be terse.", "Name a colour.", "And another one?", "/save colours", "/reset",
                   "What is 2 + 2?", "/load colours", "/load nothing-kept", "/exit"]))
    out = con.export_text()
    assert "kept the conversation as 'colours' (2 turns" in out and "back in 'colours': 2 turns" in out
    assert "no conversation 'nothing-kept' kept (kept: colours" in out
    assert [t.user for t in chat.turns] == ["Name a colour.", "And another one?"] and chat.system == "Be terse."
    n_cached = rt.target.n_past
    turn = chat.reply("And a third?")
    assert turn is not None and turn.counters.n_prompt_reused >= n_cached - 1
    assert turn.counters.n_prompt - turn.counters.n_prompt_reused < 40  # only the new message prefilled


def _long_drafts() -> Counters:
    """The follow-up turn of issue 64: drafts up to 48 tokens, 32 positions never accepted."""
    drafted = [8] * 8 + [4] * 8 + [1] * 32
    accepted = [6, 5, 4, 4, 3, 3, 2, 2] + [1] * 8 + [0] * 32
    return Counters(n_prompt=420, n_prompt_reused=380, n_generated=246, n_target_forwards=160, n_step_tokens=246,
                    n_drafted=sum(drafted), n_accepted=sum(accepted), drafted_by_pos=drafted,
                    accepted_by_pos=accepted, t_total=13.2, t_prefill=0.4, t_draft=0.2, t_verify=12.4,
                    t_first_token=0.6, t_llama_verify=12.0, drafter_steps={"none": 152, "ngram": 8},
                    drafted_by={"ngram": sum(drafted)}, accepted_by={"ngram": sum(accepted)}, n_forced=3,
                    n_forced_accepted=2)


def test_the_compact_block_fits_in_ten_lines_at_80_columns() -> None:
    con = Console(file=io.StringIO(), record=True, width=80, color_system=None)
    con.print(compact_stats(_long_drafts()))
    lines = con.export_text().rstrip("\n").splitlines()
    assert len(lines) <= 10, "\n".join(lines)
    by_pos = next(line for line in lines if "by position" in line)
    assert "1 75%" in by_pos and "4-48 21% (22/104)" in by_pos and "pos" not in by_pos.replace("position", "")
    assert any("ngram 8 (37/128 kept)" in line for line in lines)
    full = recording()
    full.print(stats_table(_long_drafts()))
    assert "pos 48" in full.export_text()  # the full table (--stats full, /stats) keeps every position


def test_position_line_and_sparkline() -> None:
    assert position_line([], []) == "no drafts"
    assert position_line([4, 2], [2, 2]) == "▅█ 1 50% · 2 100%"
    assert position_line([4, 4, 4, 4], [4, 3, 2, 1]).endswith("· 4 25% (1/4)")
    assert sparkline([0.0] * 20).endswith("▁…") and len(sparkline([0.0] * 20)) == 17


def test_the_dashboard_leaves_the_compact_block_unless_full() -> None:
    for full, marker in ((False, "by position"), (True, "pos 48")):
        con = recording()
        with GenerationDashboard(con, full_stats=full) as dash:
            dash.update(StepEvent([1], "ab", [("ab", True)], [True], 0, 0, "ngram", _long_drafts(), "stop"))
        out = con.export_text()
        assert marker in out and ("pos 48" in out) == full
