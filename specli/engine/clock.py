"""The generation's timers: every moment from its start lands in exactly one counter,
so that prefill, drafting, verification, learning, the engine's bookkeeping and the
caller's time between steps add up to the wall time (the host-work account)."""

from __future__ import annotations

import time

from specli.engine.metrics import Counters
from specli.types import Drafter, LanguageModel

_now = time.perf_counter


class StepClock:
    """Owns one generation's `Counters` and the marks between its phases. The phases
    call it in order: `prefilled`, then per step `resumed`, `drafting`, `drafted`,
    `verified`, (`learning`, `learned`,) and `stamp` for the step's snapshot."""

    def __init__(self, target: LanguageModel, drafter: Drafter | None, n_prompt: int) -> None:
        self.counters = Counters(n_prompt=n_prompt)
        self._target, self._drafter = target, drafter
        self._start = self._mark = _now()
        self._llama0 = self._llama()
        self._verify0 = 0.0
        self._draft_llama0, self._control0 = self._drafter_seconds()

    def _llama(self) -> float:
        return self._target.decode_seconds + (self._drafter.decode_seconds if self._drafter is not None else 0.0)

    def _drafter_seconds(self) -> tuple[float, float]:
        d = self._drafter
        return (d.decode_seconds, d.control_seconds) if d is not None else (0.0, 0.0)

    # Each phase's seconds run from the last mark to now, and the mark moves to now
    # (written out in each method: this runs several times a step).
    def prefilled(self) -> None:
        self._mark = _now()
        self.counters.t_prefill = self._mark - self._start
        self._draft_llama0, self._control0 = self._drafter_seconds()

    def resumed(self) -> None:
        """The caller hands control back: the time since the last step was stamped was its."""
        self._mark = _now()
        self.counters.t_outside += self._mark - (self._start + self.counters.t_total)

    def drafting(self) -> None:
        now = _now()
        self.counters.t_loop += now - self._mark
        self._mark = now
        if self._drafter is not None:  # its decode calls and controller time, drafting and learning
            self._draft_llama0, self._control0 = self._drafter.decode_seconds, self._drafter.control_seconds

    def drafted(self) -> None:
        now = _now()
        self.counters.t_draft += now - self._mark
        self._mark = now
        self._verify0 = self._target.decode_seconds

    def verified(self) -> float:
        """The verify batch, its rollback and the grammar's settling are done: their seconds."""
        now = _now()
        seconds, self._mark = now - self._mark, now
        self.counters.t_verify += seconds
        self.counters.t_llama_verify += self._target.decode_seconds - self._verify0
        return seconds

    def learning(self) -> None:
        now = _now()
        self.counters.t_loop += now - self._mark
        self._mark = now

    def learned(self) -> None:
        now = _now()
        self.counters.t_accept += now - self._mark
        self._mark = now

    def stamp(self, n_emitted: int) -> Counters:
        """A step emitted `n_emitted` tokens: a snapshot of the counters after it."""
        c = self.counters
        c.n_generated += n_emitted
        d = self._drafter
        if d is not None:
            llama, control = d.decode_seconds, d.control_seconds
            c.t_llama_draft += llama - self._draft_llama0
            c.t_control += control - self._control0
            self._draft_llama0, self._control0 = llama, control
        now = _now()
        c.t_loop += now - self._mark
        self._mark = now
        c.t_total = now - self._start
        if c.t_first_token is None:
            c.t_first_token = c.t_total
        c.t_llama = self._llama() - self._llama0
        return c.snapshot()
