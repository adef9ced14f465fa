"""Multi-turn chat on one Runtime: both KV caches persist across turns, slash
commands change settings, Ctrl-C stops a reply but keeps the session."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from specli import profiles
from specli.cli.dashboard import GenerationDashboard, Reply, colored_text, stats_table, summary_line
from specli.cli.voice import Notes, announcer
from specli.engine import generate, metrics
from specli.errors import SpecliError, Terminated
from specli.profiles import Settings
from specli.runtime import Runtime, prompting
from specli.runtime.kv.prompt_cache import CacheOptions, PromptCache, open_prompt_cache
from specli.types import FinishReason

HELP = """\
/stats              all figures of the last turn and of the whole session
/reset              forget the conversation (and clear both KV caches)
/system TEXT        set the system prompt (empty TEXT removes it)
/save NAME          keep the conversation (its turns and both KV caches) in the prompt cache
/load NAME          go back to a conversation kept with /save NAME: no prefill
/save FILE          save the transcript (a path or a suffix: .json, else Markdown)
/set KEY VALUE      change a sampling or draft setting, e.g. /set temperature 0.7
/help               this list
/exit               leave (Ctrl-D works too)"""


@dataclass
class Turn:
    user: str
    assistant: str
    counters: metrics.Counters
    finish_reason: FinishReason | None


NAME = re.compile(r"[\w.-]+")
TRANSCRIPT_SUFFIXES = (".json", ".md", ".markdown", ".txt")


def is_name(arg: str) -> bool:
    """A conversation's name for /save and /load, not a transcript's file."""
    return bool(NAME.fullmatch(arg)) and not arg.lower().endswith(TRANSCRIPT_SUFFIXES)


LOST = "the RPC server is gone: start it again, then type /reset to reconnect (the conversation is cleared)"


@dataclass
class ChatSession:
    rt: Runtime
    console: Console
    profile: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    live: bool = False
    color_draft: bool = True
    full_stats: bool = False  # the full table after each reply (--stats full), not the compact block
    turns: list[Turn] = field(default_factory=list)
    session: metrics.Counters = field(default_factory=metrics.Counters)
    system: str | None = None
    n_dropped: int = 0  # oldest turns left out of the prompt to fit the context
    _cache: PromptCache | None = field(default=None, repr=False)  # /save NAME, /load NAME

    def __post_init__(self) -> None:
        self.settings: Settings = self.rt.settings
        self.system = self.settings.system
        self._listen()

    def _listen(self) -> None:
        """Hear the runtime: a first use's measurement said at once (only what a reply needs),
        its notes after the reply that raised them (those before the session: shown already)."""
        self.rt.announce = announcer(self.console, "dim")
        self._notes = Notes(self.rt.notes, len(self.rt.notes))

    # -- the loop ------------------------------------------------------------------
    def run(self, read: Callable[[str], str]) -> None:
        self.console.print(f"specli chat: {self.rt.target.name}"
                           + (f" + draft {self.rt.draft.name}" if self.rt.draft else "")
                           + "  (/help for commands, Ctrl-D to leave)", style="dim")
        while True:
            try:
                line = read("> ")
            except Terminated:
                raise
            except (EOFError, KeyboardInterrupt):
                self.console.print()
                return
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                if not self.command(line):
                    return
                continue
            self.reply(line)

    def command(self, line: str) -> bool:
        """Run a slash command; False means leave."""
        name, _, arg = line[1:].partition(" ")
        arg = arg.strip()
        if name in ("exit", "quit", "q"):
            return False
        if name == "help":
            self.console.print(HELP)
        elif name == "stats":
            self.show_stats()
        elif name == "reset":
            self.turns.clear()
            self.n_dropped = 0
            try:
                if not self.rt.lost:
                    self.rt.target.reset()
                    if self.rt.draft is not None:
                        self.rt.draft.reset()
                    self.console.print("conversation and caches cleared")
            except SpecliError as e:  # a server lost while the chat was idle
                self.console.print(f"[red]{e.one_line()}[/]")
            if self.rt.lost:
                self.reconnect()
        elif name == "system":
            self.system = arg or None
            self.console.print(f"system prompt {'set' if arg else 'removed'}")
        elif name == "save":
            if not arg:
                self.console.print("usage: /save NAME or /save FILE")
            elif is_name(arg):
                self.keep(arg)
            else:
                self.save(Path(arg).expanduser())
        elif name == "load":
            if is_name(arg):
                self.restore(arg)
            else:
                self.console.print("usage: /load NAME (letters, digits, - _ . and no suffix)")
        elif name == "set":
            self.set(arg)
        else:
            self.console.print(f"unknown command /{name} (try /help)")
        return True

    def set(self, arg: str) -> None:
        key, _, value = arg.partition(" ")
        key = profiles.setting_name(key)
        if not key or not value:
            self.console.print("usage: /set KEY VALUE")
            return
        if key in profiles.RELOAD_KEYS:
            self.console.print(f"{key} needs the models reloaded: restart with --{key.replace('_', '-')}")
            return
        try:
            new = profiles.resolve_settings(self.profile, {**self.overrides, key: value})
        except SpecliError as e:
            self.console.print(f"[red]{e.one_line()}[/]")
            return
        if profiles.needs_draft_model(new) and new.drafter != "auto" and self.rt.draft is None:  # auto drafts without
            self.console.print(f"{key} {value} needs the draft model, which this session has not loaded: "
                               f"restart with --{key.replace('_', '-')} {value}")
            return
        self.overrides[key] = value
        self.settings = new
        self.console.print(f"{key} = {getattr(new, key)}")

    # -- replies ---------------------------------------------------------------------
    def history(self) -> list[prompting.Message]:
        """The turns still in the prompt, as messages."""
        out: list[prompting.Message] = []
        for t in self.turns[self.n_dropped :]:
            out += [{"role": "user", "content": t.user}, {"role": "assistant", "content": t.assistant}]
        return out

    def tokens(self, user: str) -> list[int]:
        return prompting.prompt_tokens(self.rt.target, user, self.history(), system=self.system,
                                       raw=self.settings.raw)

    def turn_tokens(self, user: str) -> list[int]:
        """Chat tokens for the next reply. When the prompt would leave less room than
        the reply may need (at most a quarter of the context), the oldest turns are
        left out until it fills at most half the context: the turns after that reuse
        the KV cache again instead of re-decoding the history every turn."""
        n_ctx = self.rt.target.n_ctx
        room = min(self.settings.max_tokens, n_ctx // 4)
        tokens = self.tokens(user)
        if len(tokens) + room <= n_ctx:
            return tokens
        before = self.n_dropped
        while self.n_dropped < len(self.turns) and len(tokens) > n_ctx // 2:
            self.n_dropped += 1
            tokens = self.tokens(user)
        if self.n_dropped > before:
            n = self.n_dropped - before
            self.console.print(f"[yellow]context full: leaving out the oldest {n} turn{'s' * (n > 1)} "
                               f"({self.n_dropped} so far)[/]")
        return tokens

    def reconnect(self) -> None:
        """Load the models again after an RPC server was lost."""
        try:
            self.rt = self.rt.reopen()
        except SpecliError as e:
            self.console.print(f"[red]{e.one_line()}[/]")
            return
        self._listen()
        self.console.print("reconnected: models loaded again, conversation cleared")

    def reply(self, user: str) -> Turn | None:
        if self.rt.lost:
            self.console.print(f"[red]{LOST}[/]")
            return None
        s = self.settings
        tokens = self.turn_tokens(user)
        events = generate(self.rt.target, tokens, self.rt.generation_config(s), self.rt.drafter(s))
        reply = Reply()
        dash = (GenerationDashboard(self.console, self.color_draft, title="reply", full_stats=self.full_stats)
                if self.live else None)
        try:
            reply.follow(events, dash, lambda ev: self.console.print(colored_text(ev.segments, self.color_draft),
                                                                     end=""))
            if dash is None:
                self.console.print()
        except Terminated:
            self.turns.append(Turn(user, reply.text, reply.counters, "terminated"))
            raise
        except KeyboardInterrupt:
            reply.finish_reason = "interrupted"
            self.console.print("\n[yellow]reply stopped; the session goes on[/]")
        except SpecliError as e:
            reply.finish_reason = "error"
            self.console.print(f"\n[red]{e.one_line()}[/]")
            if self.rt.lost:
                self.console.print(f"[yellow]{LOST}[/]")
        turn = Turn(user, reply.text, reply.counters, reply.finish_reason)
        self.turns.append(turn)
        self.session = metrics.merge(self.session, reply.counters)
        if dash is None:
            self.console.print(summary_line(reply.counters, reply.finish_reason), style="dim")
            if self.full_stats:
                self.console.print(stats_table(reply.counters))
        self._notes.show()
        return turn

    # -- output --------------------------------------------------------------------
    def show_stats(self) -> None:
        if self.turns:
            self.console.print("[bold]last turn[/]")
            self.console.print(stats_table(self.turns[-1].counters))
        self.console.print(f"[bold]session[/] ({len(self.turns)} turns)")
        self.console.print(stats_table(self.session))

    def transcript(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "target": str(self.rt.target.path),
            "draft": str(self.rt.draft.path) if self.rt.draft else None,
            "turns": [
                {"user": t.user, "assistant": t.assistant, "finish_reason": t.finish_reason,
                 "metrics": metrics.summary(t.counters)}
                for t in self.turns
            ],
        }

    def prompt_cache(self) -> PromptCache:
        if self._cache is None:  # on disk only: a chat keeps its conversations, not a RAM cache
            self._cache = open_prompt_cache(self.rt.target, self.rt.draft, CacheOptions(ram_mib=0))
        return self._cache

    def keep(self, name: str) -> None:
        turns = [[t.user, t.assistant] for t in self.turns]
        if self.prompt_cache().save_named(name, {"system": self.system, "turns": turns}):
            self.console.print(f"kept the conversation as {name!r} ({len(turns)} turns, "
                               f"{self.rt.target.n_past} tokens of cache)")
        else:
            self.console.print(f"[red]could not keep {name!r}: the prompt cache's disk is off or full[/]")

    def restore(self, name: str) -> None:
        extra = self.prompt_cache().load_named(name)
        if extra is None:
            names = sorted({e.name for e in self.prompt_cache().entries.values() if e.name})
            self.console.print(f"no conversation {name!r} kept" + (f" (kept: {', '.join(names)})" if names else ""))
            return
        self.system = extra.get("system")
        self.turns = [Turn(u, a, metrics.Counters(), "stop") for u, a in extra.get("turns", [])]
        self.n_dropped = 0
        self.console.print(f"back in {name!r}: {len(self.turns)} turns, {self.rt.target.n_past} tokens of cache "
                           "restored")

    def save(self, path: Path) -> None:
        data = self.transcript()
        if path.suffix.lower() == ".json":
            text = json.dumps(data, indent=2, ensure_ascii=False)
        else:
            lines = [f"# specli chat\n\ntarget: `{data['target']}`\n"]
            if self.system:
                lines.append(f"**system:** {self.system}\n")
            for t in self.turns:
                lines.append(f"## user\n\n{t.user}\n\n## assistant\n\n{t.assistant}\n")
            text = "\n".join(lines)
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            self.console.print(f"[red]could not save {path}: {e.strerror}[/]")
            return
        self.console.print(f"saved {len(self.turns)} turns to {path}")

