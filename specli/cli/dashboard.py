"""A live rich view fed by the engine's StepEvents, and the one loop that consumes
them (`Reply.follow`). Knows nothing of models."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from specli.cli.stats_view import compact_stats
from specli.engine import StepEvent, metrics
from specli.types import FinishReason

DRAFT_STYLE = "green"
BAR_WIDTH = 20


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    fraction = min(max(fraction, 0.0), 1.0)
    full = int(round(fraction * width))
    return "█" * full + "·" * (width - full)


class RollingRate:
    """Tokens per second over the last `window` seconds of events."""

    def __init__(self, window: float = 2.0) -> None:
        self.window = window
        self._points: deque[tuple[float, int]] = deque()

    def add(self, t: float, total_tokens: int) -> None:
        self._points.append((t, total_tokens))
        while len(self._points) > 2 and t - self._points[0][0] > self.window:
            self._points.popleft()

    def rate(self) -> float:
        if len(self._points) < 2:
            return 0.0
        (t0, n0), (t1, n1) = self._points[0], self._points[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


def stats_table(c: metrics.Counters, rolling_tps: float | None = None) -> Table:
    """The figures of one generation (or turn), as a two-column table."""
    t = Table(show_header=False, box=None, padding=(0, 1))
    t.add_column(style="bold")
    t.add_column()
    tps = f"{metrics.tokens_per_second(c):.1f} tok/s overall"
    if rolling_tps is not None:
        tps = f"{rolling_tps:.1f} tok/s now, " + tps
    t.add_row("speed", tps)
    t.add_row("tokens", f"{c.n_generated} generated, prompt {c.n_prompt} ({c.n_prompt_reused} reused from cache)")
    t.add_row("acceptance", f"{metrics.acceptance_rate(c):.1%} ({c.n_accepted}/{c.n_drafted} drafted)")
    t.add_row("tokens/forward", f"{metrics.mean_accepted_length(c):.2f} over {c.n_target_forwards} target forwards "
                                f"({metrics.ms_per_forward(c):.0f} ms each, {metrics.mean_draft_length(c):.1f} drafted)")
    for i, a in enumerate(metrics.acceptance_by_position(c)):
        t.add_row(f"  pos {i + 1}", f"{bar(a)} {a:.0%}")
    split = metrics.time_split(c)
    total = sum(split.values()) or 1.0
    t.add_row("time", "  ".join(f"{k} {v:.2f}s ({v / total:.0%})" for k, v in split.items()))
    if c.n_target_forwards:
        h = metrics.host_ms_per_forward(c)
        t.add_row("host/forward", f"{h['total']:.2f} ms outside llama.cpp (" +
                  ", ".join(f"{k} {h[k]:.2f}" for k in metrics.HOST_PARTS) + f"), llama.cpp {h['llama']:.1f} ms")
    if c.t_first_token is not None:
        t.add_row("first token", f"{c.t_first_token * 1000:.0f} ms")
    if c.drafter_steps:
        t.add_row("steps", ", ".join(f"{k} {v}" for k, v in sorted(c.drafter_steps.items())))
    if c.accepted_by:  # which drafter each accepted token came from
        t.add_row("accepted by", ", ".join(f"{k} {c.accepted_by[k]}/{c.drafted_by.get(k, 0)}"
                                           for k in sorted(c.accepted_by)))
    if c.n_forced:
        t.add_row("grammar", f"{c.n_forced} forced tokens drafted, {c.n_forced_accepted} kept")
    return t


def colored_text(segments: list[tuple[str, bool]], color_draft: bool = True) -> Text:
    out = Text()
    for piece, from_draft in segments:
        out.append(piece, style=DRAFT_STYLE if (from_draft and color_draft) else None)
    return out


class GenerationDashboard:
    """`with GenerationDashboard(console) as d: for ev in events: d.update(ev)`."""

    def __init__(self, console: Console, color_draft: bool = True, title: str = "specli",
                 max_text_lines: int = 30, full_stats: bool = False) -> None:
        self.console = console
        self.full_stats = full_stats  # the full table after the answer, not the compact block
        self.color_draft = color_draft
        self.title = title
        self.max_text_lines = max_text_lines
        self.segments: list[tuple[str, bool]] = []
        self.last: StepEvent | None = None
        self.rolling = RollingRate()
        self._live: Live | None = None

    def update(self, ev: StepEvent) -> None:
        self.last = ev
        self.segments.extend(ev.segments)
        self.rolling.add(time.perf_counter(), ev.counters.n_generated)
        # drawn by Live's own refresh (8 a second), not per step: a redraw costs more the
        # longer the answer, and steps can be 3 ms apart

    def text(self) -> Text:
        return colored_text(self.segments, self.color_draft)

    def render(self) -> RenderableType:
        text = self.text()
        lines = text.split("\n")
        if len(lines) > self.max_text_lines:
            text = Text("\n").join(lines[-self.max_text_lines :])
        parts: list[RenderableType] = [Panel(text, title=self.title, border_style="dim")]
        if self.last is not None:
            status = self.last.finish_reason or "generating"
            parts.append(Panel(stats_table(self.last.counters, self.rolling.rate()),
                               title=f"stats ({status})", border_style="dim"))
        return Group(*parts)

    def __enter__(self) -> GenerationDashboard:
        self._live = Live(console=self.console, refresh_per_second=8, transient=True, get_renderable=self.render)
        self._live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None
        # leave the full text and the final figures on screen (compact: the answer stays in view)
        self.console.print(self.text())
        if self.last is not None:
            c = self.last.counters
            self.console.print(stats_table(c) if self.full_stats else compact_stats(c))


def summary_line(c: metrics.Counters, finish_reason: FinishReason | None) -> str:
    return (
        f"{c.n_generated} tokens, {metrics.tokens_per_second(c):.1f} tok/s, "
        f"acceptance {metrics.acceptance_rate(c):.0%}, "
        f"{metrics.mean_accepted_length(c):.2f} tokens/forward, "
        f"{c.n_target_forwards} target forwards, finish: {finish_reason}"
    )


@dataclass
class Reply:
    """One generation as it streams: text, figures and finish reason so far, kept up to
    date event by event so that an interrupted generation keeps what it produced."""

    parts: list[str] = field(default_factory=list)
    counters: metrics.Counters = field(default_factory=metrics.Counters)
    finish_reason: FinishReason | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def follow(self, events: Iterable[StepEvent], dashboard: GenerationDashboard | None,
               echo: Callable[[StepEvent], None]) -> None:
        """Consume `events`, shown live in `dashboard` when there is one, else passed to `echo`."""
        show = dashboard.update if dashboard is not None else echo
        with dashboard if dashboard is not None else contextlib.nullcontext():
            for ev in events:
                self.parts.append(ev.text)
                self.counters, self.finish_reason = ev.counters, ev.finish_reason
                show(ev)
