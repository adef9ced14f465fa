"""What a command says while it works: the runtime's announcements (a measurement it
starts by itself) at once, and its notes as they come, each once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console

from specli.cli.guard import err_console, print_notes
from specli.profiles import Settings, needs_draft_model


def announcer(console: Console | None = None, style: str = "") -> Callable[[str], None]:
    """Print a runtime's announcement as one line, at once (stderr unless `console`)."""

    def say(text: str) -> None:
        (console or err_console()).print(f"specli: {text}", style=style, markup=False, highlight=False,
                                         soft_wrap=True)

    return say


@dataclass
class Notes:
    """The notes of a list that grows (Runtime.notes), printed once each by `show`."""

    notes: list[str]
    shown: int = 0

    def show(self) -> None:
        print_notes(self.notes[self.shown :])
        self.shown = len(self.notes)


def loading_line(s: Settings) -> str:
    """The first line a command prints, before the weights load (seconds for a large pair)."""
    draft = ""
    if needs_draft_model(s) and s.draft:
        draft = " and a draft model" if s.draft == "auto" else f" and draft {s.draft}"
    return f"loading {s.target}{draft}"
