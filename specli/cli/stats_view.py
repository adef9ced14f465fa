"""The compact figures printed after an answer (generate, chat): a handful of lines at
80 columns, acceptance by draft position on one line. The full table is
dashboard.stats_table (the live dashboard, `--stats full`, chat's /stats)."""

from __future__ import annotations

from rich.table import Table

from specli.engine import metrics

SPARKS = "▁▂▃▄▅▆▇█"
SPARK_MAX = 16  # positions drawn in the sparkline; more are summed up in the tail
HEAD = 3  # positions named one by one before the tail's pooled rate


def sparkline(values: list[float], width: int = SPARK_MAX) -> str:
    """One block character per value in [0, 1] (the first `width`; "…" when cut)."""
    out = "".join(SPARKS[min(len(SPARKS) - 1, int(max(0.0, v) * len(SPARKS)))] for v in values[:width])
    return out + ("…" if len(values) > width else "")


def position_line(drafted_by_pos: list[int], accepted_by_pos: list[int]) -> str:
    """Acceptance by draft position in one line: a sparkline, the first HEAD positions,
    and the rest pooled (accepted / drafted over all positions after them)."""
    rates = [a / d if d else 0.0 for a, d in zip(accepted_by_pos, drafted_by_pos)]
    if not rates:
        return "no drafts"
    named = [f"{i + 1} {r:.0%}" for i, r in enumerate(rates[:HEAD])]
    if len(rates) > HEAD:
        drafted, accepted = sum(drafted_by_pos[HEAD:]), sum(accepted_by_pos[HEAD:])
        first = HEAD + 1
        span = str(first) if len(rates) == first else f"{first}-{len(rates)}"
        named.append(f"{span} {accepted / drafted if drafted else 0.0:.0%} ({accepted}/{drafted})")
    return f"{sparkline(rates)} " + " · ".join(named)


def steps_line(c: metrics.Counters) -> str:
    """Target forwards per drafter, with each drafter's accepted/drafted tokens."""
    parts = []
    for name in sorted(set(c.drafter_steps) | set(c.accepted_by)):
        part = f"{name} {c.drafter_steps.get(name, 0)}"
        if c.drafted_by.get(name):
            part += f" ({c.accepted_by.get(name, 0)}/{c.drafted_by[name]} kept)"
        parts.append(part)
    return " · ".join(parts)


def compact_stats(c: metrics.Counters) -> Table:
    """The figures of one answer in at most 7 lines at 80 columns."""
    t = Table(show_header=False, box=None, padding=(0, 1))
    t.add_column(style="bold", no_wrap=True)
    t.add_column()
    speed = f"{metrics.tokens_per_second(c):.1f} tok/s (decode {metrics.decode_tokens_per_second(c):.1f})"
    if c.t_first_token is not None:
        speed += f", first token {c.t_first_token * 1000:.0f} ms"
    t.add_row("speed", speed)
    t.add_row("tokens", f"{c.n_generated} generated; prompt {c.n_prompt}, {c.n_prompt_reused} reused")
    t.add_row("drafts", f"{c.n_accepted}/{c.n_drafted} accepted ({metrics.acceptance_rate(c):.0%}), "
                        f"{metrics.mean_accepted_length(c):.2f} tokens/forward, {c.n_target_forwards} forwards "
                        f"of {metrics.ms_per_forward(c):.0f} ms")
    if c.n_drafted:
        t.add_row("by position", position_line(c.drafted_by_pos, c.accepted_by_pos))
    split = metrics.time_split(c)
    t.add_row("time", " · ".join(f"{k} {v:.2f}s" for k, v in split.items()))
    if c.drafter_steps:
        t.add_row("steps", steps_line(c))
    if c.n_forced:
        t.add_row("grammar", f"{c.n_forced} forced tokens drafted, {c.n_forced_accepted} kept")
    return t
