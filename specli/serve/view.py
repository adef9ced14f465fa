"""What the server shows: one log line per request, or (`--dashboard`) the same rows live
in a rich table with the running requests' figures updated as they generate, and how the
last batch split its rows across the slots."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table

from specli.engine import metrics
from specli.serve.jobs import Job, RequestRecord

ROWS = 15  # the last requests kept in the live table: what fits a terminal beside the caption


def drafter_split(c: metrics.Counters) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.drafter_steps.items(), key=lambda kv: -kv[1])) or "-"


def cells(r: RequestRecord) -> list[str]:
    c = r.counters
    return [r.id, r.endpoint, str(r.status), f"{c.n_prompt} ({c.n_prompt_reused})", str(c.n_generated),
            f"{metrics.acceptance_rate(c):.0%} ({c.n_accepted}/{c.n_drafted})",
            f"{metrics.mean_accepted_length(c):.2f}", f"{metrics.decode_tokens_per_second(c):.1f}",
            drafter_split(c), f"{r.queue_s:.2f}", f"{r.total_s:.2f}", r.finish]


HEADERS = ["#", "endpoint", "status", "prompt (cached)", "generated", "acceptance", "tok/forward",
           "decode tok/s", "drafters (steps)", "queue s", "total s", "finish"]


def log_line(r: RequestRecord) -> str:
    """`#12 chat 200 prompt 812 (cached 790) gen 256 acceptance 91% (230/252) 5.20 tok/forward ...`"""
    v = dict(zip(HEADERS, cells(r)))
    text = (f"#{r.id} {r.endpoint} {r.status} prompt {v['prompt (cached)'].replace('(', '(cached ')} "
            f"gen {v['generated']} acceptance {v['acceptance']} {v['tok/forward']} tok/forward "
            f"decode {v['decode tok/s']} tok/s drafters [{v['drafters (steps)']}] queue {v['queue s']}s "
            f"total {v['total s']}s {r.finish}")
    if r.cache is not None and (r.cache.entry or r.cache.saved):
        restored = f" restored {r.cache.n_restored} from {r.cache.source} {r.cache.entry}" if r.cache.entry else ""
        saved = f" saved {r.cache.saved}" if r.cache.saved else ""
        text += f" cache:{saved}{restored} ({r.cache.seconds:.2f}s)"
    text += f"; notes: {'; '.join(r.notes)}" if r.notes else ""
    return text + (f": {r.error}" if r.error else "")


class ServeDashboard:
    """The last requests and the running one, redrawn by rich's own thread (4 per second)."""

    def __init__(self, console: Console, status: Callable[[], str] = lambda: "") -> None:
        self.console = console
        self.status = status
        self.rows: deque[RequestRecord] = deque(maxlen=ROWS)
        self.running: dict[str, tuple[Job, metrics.Counters]] = {}  # by job id
        self._lock = threading.Lock()
        self._live = Live(console=console, refresh_per_second=4, get_renderable=self.render, transient=False)

    def __enter__(self) -> ServeDashboard:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(None, None, None)

    def progress(self, job: Job, counters: metrics.Counters) -> None:
        with self._lock:
            self.running[job.id] = (job, counters)

    def record(self, r: RequestRecord) -> None:
        with self._lock:
            self.rows.append(r)
            self.running.pop(r.id, None)

    def render(self) -> RenderableType:
        t = Table(*HEADERS, title="specli serve", title_justify="left", caption=self.status(), caption_justify="left")
        with self._lock:
            for r in self.rows:
                t.add_row(*cells(r))
            running = list(self.running.values())
        for job, c in running:
            row = RequestRecord(job.id, job.request.kind, 0, c, "generating", 0.0, 0.0)
            t.add_row(*cells(row), style="bold")
        return Group(t)


def batch_split(last: dict[int, int], n_slots: int) -> str:
    """The last batch's rows by slot, `slot 0: 5 | 1: 1 | 2: - | 3: 3` (- : not in it)."""
    return " | ".join(f"{i}: {last.get(i, '-')}" for i in range(n_slots))
