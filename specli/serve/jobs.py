"""What travels through the worker: a job on its way through the queue, a slot as /slots
shows it, and the record of a finished job."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from specli.engine import metrics
from specli.engine.grammar import Grammar
from specli.profiles import Settings
from specli.runtime.kv.prompt_cache import CacheUse
from specli.serve.outcome import Pushed
from specli.serve.request import Request


@dataclass
class Job:
    """One request on its way through the queue."""

    id: str
    request: Request
    prompt: list[int]
    settings: Settings
    max_tokens: int
    push: Callable[[Pushed], None]  # thread-safe, to the request's reader
    t_arrival: float = field(default_factory=time.perf_counter)
    cancelled: threading.Event = field(default_factory=threading.Event)
    t_start: float | None = None
    grammar: Grammar | None = None  # the answer's: response_format or the tool calls'


@dataclass(frozen=True)
class SlotView:
    """One slot as /slots shows it: its cached tokens, and the job it serves if any."""

    index: int
    n_cached: int
    job_id: str | None = None
    n_prompt: int = 0
    endpoint: str = ""


@dataclass
class RequestRecord:
    """One finished job, for the log line, the dashboard and /metrics."""

    id: str
    endpoint: str
    status: int
    counters: metrics.Counters
    finish: str
    queue_s: float
    total_s: float
    error: str = ""
    cache: CacheUse | None = None  # what the prompt cache did for it
    notes: tuple[str, ...] = ()  # the response's specli.notes
