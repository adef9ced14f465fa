"""The text layer over the token-level loop: detokenizes each `Step` as it comes, runs
stop strings (holding back text that may begin one), and splits the text by origin
(draft or target) for colouring. `generate` is what the commands consume."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field

from specli.engine.adjust import TokenLogprob
from specli.engine.core import FINISH_STOP, GenerationConfig, Step, generate_steps
from specli.engine.grammar import Constraint
from specli.engine.metrics import Counters
from specli.engine.stopstrings import StopStrings
from specli.engine.verify import Verifier, verify_step
from specli.types import Drafter, FinishReason, LanguageModel


@dataclass
class StepEvent:
    """One target forward pass worth of output (the first event is the prefill's)."""

    tokens: list[int]
    text: str
    segments: list[tuple[str, bool]]  # `text` split by origin: (piece, came from the draft)
    from_draft: list[bool]
    n_drafted: int
    n_accepted: int
    drafter: str
    counters: Counters
    finish_reason: FinishReason | None = None
    stop_token: int | None = None  # the end-of-generation token, when one ended it
    logprobs: list[TokenLogprob] | None = None  # of `tokens`, where asked
    stop_string: str | None = None  # the stop string that ended the generation, if one did


class _Segments:
    """Text decoded but not shown yet, with its from-draft flags."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, bool]] = []

    def add(self, pieces: Sequence[tuple[str, bool]]) -> None:
        self.pending.extend(p for p in pieces if p[0])

    def take(self, n_chars: int) -> list[tuple[str, bool]]:
        out: list[tuple[str, bool]] = []
        while n_chars > 0 and self.pending:
            text, flag = self.pending[0]
            if len(text) <= n_chars:
                out.append(self.pending.pop(0))
                n_chars -= len(text)
            else:
                out.append((text[:n_chars], flag))
                self.pending[0] = (text[n_chars:], flag)
                n_chars = 0
        return out


def stream_text(target: LanguageModel, steps: Iterator[Step], stop: Sequence[str] = ()) -> Iterator[StepEvent]:
    """Steps -> events with text; ends the generation at the first stop string."""
    detok = target.stream_detokenizer()
    stops = StopStrings(stop)
    segments = _Segments()
    t_text = 0.0
    clock = time.perf_counter
    for step in steps:
        t0 = clock()
        reason = step.finish_reason
        tokens, n = step.tokens, step.n_accepted
        from_draft_text = detok.push(tokens[:n]) if n else ""
        own_text = detok.push(tokens[n:]) if len(tokens) > n else ""
        if reason is not None:
            own_text += detok.flush()
        new = [p for p in ((from_draft_text, True), (own_text, False)) if p[0]]
        if stops.stops:  # text that may begin a stop string is held back
            segments.add(new)
            safe = stops.push(from_draft_text + own_text)
            if stops.stopped:
                reason = FINISH_STOP
            if reason is not None:
                safe += stops.flush()
            shown = segments.take(len(safe))
        else:
            safe, shown = from_draft_text + own_text, new
        t_text += clock() - t0
        step.counters.t_text = t_text  # this step's own snapshot: the text layer's share of t_outside
        yield StepEvent(tokens, safe, shown, [True] * n + [False] * (len(tokens) - n), step.n_drafted, n,
                        step.drafter, step.counters, reason, step.stop_token, step.logprobs, stops.matched)
        if reason is not None:
            return


def generate(target: LanguageModel, prompt: Sequence[int], config: GenerationConfig = GenerationConfig(),
             drafter: Drafter | None = None, verifier: Verifier = verify_step,
             constraint: Constraint | None = None) -> Generator[StepEvent, None, None]:
    """Generate from `prompt` (token ids), as text events."""
    steps = generate_steps(target, prompt, config, drafter, verifier, constraint)
    try:
        yield from stream_text(target, steps, config.stop)
    finally:
        steps.close()


@dataclass
class GenerationResult:
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: FinishReason | None = None
    counters: Counters = field(default_factory=Counters)
    from_draft: list[bool] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None  # where the config asks for them


def run(target: LanguageModel, prompt: Sequence[int], config: GenerationConfig = GenerationConfig(),
        drafter: Drafter | None = None, verifier: Verifier = verify_step,
        constraint: Constraint | None = None) -> GenerationResult:
    """Drain `generate` into one result."""
    out = GenerationResult()
    parts: list[str] = []
    for ev in generate(target, prompt, config, drafter, verifier, constraint):
        out.tokens.extend(ev.tokens)
        out.from_draft.extend(ev.from_draft)
        if ev.logprobs is not None:
            out.logprobs = (out.logprobs or []) + ev.logprobs
        parts.append(ev.text)
        out.counters = ev.counters
        out.finish_reason = ev.finish_reason
    out.text = "".join(parts)
    return out
