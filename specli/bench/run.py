"""Running a bench plan: load the models once, warm up, warm the modes' histories on
the warm prompts (--warm-history, unrecorded), then run every generation (interleaved
per prompt and repeat) and record it as it finishes."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from specli import profiles
from specli.bench import peers
from specli.bench.modes import LLAMA_CPP, Mode
from specli.bench.peers import Generated
from specli.bench.plan import Plan
from specli.bench.records import BenchRecord, record_from_counters
from specli.bench.suites import Prompt
from specli.engine import Verifier
from specli.engine.verify import MarginRecorder
from specli.errors import SpecliError
from specli.history import SuffixIndex
from specli.profiles import Settings
from specli.runtime.measure import calibration
from specli.runtime.prompting import Message

if TYPE_CHECKING:
    from specli.runtime import Runtime

WARMUP_TOKENS = 16


@dataclass
class BenchResult:
    plan: Plan
    records: list[BenchRecord] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    stopped_by: str | None = None  # "Ctrl-C" or "SIGTERM" when interrupted
    error: str | None = None
    started: str = ""
    seconds: float = 0.0
    # the target's batching noise on this build: exact_batch, max_logit_diff, tie_bound
    numerics: dict[str, Any] = field(default_factory=dict)
    # the calibrated costs auto started from: t1 and one batch of sizes[i] tokens in plain steps
    costs: dict[str, Any] = field(default_factory=dict)
    warm_generations: int = 0  # warm-prompt generations finished (--warm-history)


def warm_json(result: BenchResult) -> dict[str, Any] | None:
    """The JSON's `warm_history`: which prompts warmed which modes' histories before
    measuring (None without --warm-history)."""
    plan = result.plan
    if plan.opts.warm_history is None:
        return None
    return {
        "how": plan.opts.warm_history,
        "modes": [m.name for m in plan.warm_modes],
        "n_prompts": len(plan.warm_prompts),
        "prompt_ids": [p.id for p in plan.warm_prompts],
        "categories": list(dict.fromkeys(p.category for p in plan.warm_prompts)),
        "generations": plan.n_warm_generations,
        "generations_run": result.warm_generations,
    }


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
    }
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        info["llama_cpp_python"] = importlib.metadata.version("llama_cpp_python")
    from specli.backend import system_info

    info["llama_system_info"] = system_info()
    return info


class _Runner:
    """Runs generations on loaded models; one instance per bench run."""

    def __init__(self, plan: Plan, rt: Runtime, peer: peers.LlamaCppPythonPeer | None,
                 verifier: Verifier | None) -> None:
        self.plan = plan
        self.rt = rt
        self.peer = peer
        self.verifier = verifier
        # each mode drafts from its own earlier outputs in this run, never from the user's
        # history store: cold at the start, so a second --repeat shows what history brings
        self.histories: dict[str, SuffixIndex] = {}
        self.baseline_answers: dict[tuple[int, int, int], str] = {}  # greedy: (prompt, repeat, turn) -> text

    def reset(self) -> None:
        self.rt.target.reset()
        if self.rt.draft is not None:
            self.rt.draft.reset()

    def generate(self, mode: Mode, s: Settings, drafter: Any, tokens: list[int], keep_cache: bool,
                 max_tokens: int | None = None) -> Generated:
        if mode.drafter == LLAMA_CPP:
            return peers.generate_llama_cpp(mode, s, self.rt, tokens, max_tokens or s.max_tokens)
        if mode.peer and self.peer is not None:
            return self.peer.generate(s, tokens, keep_cache, max_tokens or s.max_tokens)
        from specli import engine

        cfg = self.rt.generation_config(s)
        if max_tokens is not None:
            cfg = replace(cfg, max_tokens=max_tokens)
        verifier = self.verifier or engine.verify_step
        recorder = MarginRecorder(verifier) if mode.is_baseline and s.temperature == 0 else None
        res = engine.run(self.rt.target, tokens, cfg, drafter, recorder or verifier)
        c = res.counters
        if recorder is not None:  # the recording is bench's own work: not the baseline's time
            c.t_total -= recorder.seconds
            c.t_verify -= recorder.seconds - recorder.first_seconds
            c.t_prefill -= recorder.first_seconds
            if c.t_first_token is not None:
                c.t_first_token -= recorder.first_seconds
        if recorder is None:
            return Generated(res.tokens, res.text, res.finish_reason, c)
        n = len(res.tokens)
        return Generated(res.tokens, res.text, res.finish_reason, c, recorder.margins[:n], recorder.contenders[:n])

    def conversation(self, mode: Mode, prompt: Prompt, index: int, repeat: int,
                     on_record: Callable[[BenchRecord], None], before_turn: Callable[[int], None]) -> None:
        s = self.plan.settings[mode.name]
        self.reset()
        drafter = None if mode.peer else self.rt.drafter(s, self.histories.setdefault(mode.name, SuffixIndex()))
        history: list[Message] = []
        greedy = s.temperature == 0
        for turn, user in enumerate(self.plan.turns_of(prompt)):
            before_turn(turn)
            tokens = self.rt.prompt_tokens(user, s, history)
            try:
                g = self.generate(mode, s, drafter, tokens, keep_cache=turn > 0)
            except SpecliError as e:
                raise type(e)(f"prompt {prompt.id!r} ({mode.name}): {e.message}", e.hint) from None
            on_record(record_from_counters(
                g.counters, mode=mode, prompt=prompt, prompt_index=index, repeat=repeat, turn=turn,
                tokens=None if g.no_tokens else g.tokens, text=g.text, finish_reason=g.finish_reason,
                temperature=s.temperature,
                verify="batch" if mode.peer else s.verify, margins=g.margins, contenders=g.contenders,
            ))
            # greedy: every mode goes on from the baseline's answer, so each later turn's lossless
            # check compares one conversation (a near-tie in turn 1 would otherwise part them for good)
            key = (index, repeat, turn)
            if mode.is_baseline and greedy:
                self.baseline_answers[key] = g.text
            answer = self.baseline_answers.get(key, g.text) if greedy else g.text
            history += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]

    def warm_history(self, update: Callable[..., None], on_done: Callable[[BenchRecord], None]) -> None:
        """Every warm prompt through every history-reading mode, by the measured path
        (same settings and length), so each mode's in-run history holds the outputs;
        their records go to `on_done` only, never to the results."""
        warm = self.plan.warm_prompts
        for i, prompt in enumerate(warm):
            for m in self.plan.warm_modes:
                def before(turn: int, m: Mode = m, prompt: Prompt = prompt, i: int = i) -> None:
                    t = f" turn {turn + 1}" if self.plan.opts.turns == "all" else ""
                    update(f"warm-up {i + 1}/{len(warm)} {prompt.id}{t} · {m.name}")

                self.conversation(m, prompt, i, 0, on_done, before)

    def warmup(self) -> None:
        """One short generation, not recorded: the mode that loads the most (the draft
        model if any mode uses it), then the peer's own model if there is one."""
        plan = self.plan
        prompt = plan.prompts[0]
        engine_modes = [m for m in plan.modes if not m.peer]
        first = next((m for m in engine_modes if profiles.needs_draft_model(plan.settings[m.name])),
                     next((m for m in engine_modes if not m.is_baseline), engine_modes[0]))
        n = min(WARMUP_TOKENS, plan.base.max_tokens)
        for m in [first, *([plan.peer] if plan.peer else [])]:
            s = plan.settings[m.name]
            self.reset()
            drafter = None if m.peer else self.rt.drafter(s, SuffixIndex())
            self.generate(m, s, drafter, self.rt.prompt_tokens(prompt.turns[0], s), keep_cache=False, max_tokens=n)
        self.reset()


@contextlib.contextmanager
def _progress(console: Console | None, total: int, enabled: bool) -> Iterator[Callable[..., None]]:
    if not enabled or console is None:
        yield lambda *a, **k: None
        return
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True,
    ) as bar:
        task = bar.add_task("loading", total=total)

        def update(description: str | None = None, advance: int = 0) -> None:
            bar.update(task, description=description, advance=advance)

        yield update


def execute(plan: Plan, result: BenchResult, verifier: Verifier | None = None,
            progress_console: Console | None = None) -> None:
    """Load the models and run every generation, appending records to `result` as
    they finish (so an interrupted run keeps what it measured)."""
    from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT, open_runtime

    result.machine = machine_info()
    rt = open_runtime(plan.runtime, recalibrate=plan.opts.recalibrate)
    peer = None
    try:
        for m in plan.modes:  # surface unsupported drafters before measuring anything
            if not m.peer:
                rt.drafter(plan.settings[m.name], SuffixIndex())
        if plan.peer is not None:
            peer = peers.LlamaCppPythonPeer(plan.settings[plan.peer.name], plan.peer.drafter, rt)
        if plan.base.temperature == 0:
            cal = rt.calibration()
            result.numerics = {"exact_batch": cal.exact_batch, "max_logit_diff": cal.max_logit_diff,
                               "tie_bound": cal.tie_bound}
            if peer is not None and plan.peer is not None:  # it prefills and verifies in batches of its own
                context = rt.target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
                noise = max(cal.max_logit_diff, calibration.prefill_logit_diff(rt.target, context))
                result.numerics["peer_tie_bounds"] = {plan.peer.name: calibration.tie_bound(noise)}
            result.costs = {"t1": cal.t1, "sizes": list(cal.sizes), "ratios": list(cal.ratios)}
        runner = _Runner(plan, rt, peer, verifier)
        if any(m.drafter == LLAMA_CPP for m in plan.peers):
            peers.llama_cpp_bin()  # missing programs: say how to build them before measuring anything
        total = plan.n_generations + plan.n_warm_generations
        with _progress(progress_console, total, plan.opts.progress) as update:
            if plan.opts.warmup:
                update("warm-up")
                runner.warmup()

            def warmed(rec: BenchRecord) -> None:  # not recorded: only counted
                result.warm_generations += 1
                update(advance=1)

            runner.warm_history(update, warmed)
            n = len(plan.prompts)
            for i, prompt in enumerate(plan.prompts):
                for r in range(plan.opts.repeat):
                    for m in plan.modes:
                        rep = f" repeat {r + 1}/{plan.opts.repeat}" if plan.opts.repeat > 1 else ""

                        def before(turn: int, m: Mode = m, rep: str = rep, prompt: Prompt = prompt, i: int = i) -> None:
                            t = f" turn {turn + 1}" if plan.opts.turns == "all" else ""
                            update(f"prompt {i + 1}/{n} {prompt.id}{rep}{t} · {m.name}")

                        def record(rec: BenchRecord) -> None:
                            result.records.append(rec)
                            update(advance=1)

                        runner.conversation(m, prompt, i, r, record, before)
    finally:
        if peer is not None:
            peer.close()
        rt.close()

