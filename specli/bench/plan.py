"""The bench plan: every option checked and every mode's settings resolved before any
model loads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specli import profiles
from specli.bench.modes import (
    BASELINE,
    LLAMA_CPP,
    LLAMA_CPP_BASELINE,
    Mode,
    dedupe_modes,
    parse_modes,
    parse_peer,
    parse_sweep,
    sweep_modes,
)
from specli.bench.prompts import load_prompt_file, select_prompts, split_list, split_warm, suite_prompts
from specli.bench.suites import Prompt
from specli.errors import ProfileError, UsageError
from specli.profiles import Settings, reads_history
from specli.profiles.settings import NEEDS_DRAFT_MODEL

WARM_HISTORY_CHOICES = ("split", "others")
WARM_HISTORY_HELP = (
    "Before measuring, every mode that drafts from history (suffix; auto with history on) generates "
    "warm-up prompts, unrecorded, into its in-run history: split = each category's first half warms, "
    "the second half is measured (held apart); others = the --categories named are measured, the other "
    "categories of the prompt set warm (at most --limit each). Never touches the user's history store."
)


@dataclass
class BenchOptions:
    """Everything `specli bench` was asked for (the CLI fills this in)."""

    profile: str | None = None
    prompts: Path | None = None
    suite: str | None = None
    modes: str | None = None
    max_tokens: int | None = None
    repeat: int = 1
    temperature: float | None = None
    json_out: str | None = None  # a path, or - for stdout
    csv_out: Path | None = None
    markdown_out: Path | None = None
    sweep: str | None = None
    write_profile: str | None = None
    peer: str | list[str] | None = None  # one peer, or several
    limit: int | None = None
    categories: str | None = None
    turns: str = "first"
    warmup: bool = True
    warm_history: str | None = None  # split | others: warm-up prompts fill the modes' in-run history
    progress: bool = True
    recalibrate: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)  # target, draft, ctx, threads, ...

    def base_overrides(self) -> dict[str, Any]:
        out = {k: v for k, v in self.overrides.items() if v is not None}
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            out["temperature"] = self.temperature
        return out


@dataclass
class Plan:
    opts: BenchOptions
    prompts: list[Prompt]
    modes: list[Mode]  # baseline first; a peer last
    settings: dict[str, Settings]  # per mode name
    base: Settings  # the profile with the command-line overrides
    runtime: Settings  # what open_runtime loads
    peers: list[Mode] = field(default_factory=list)
    warm_prompts: list[Prompt] = field(default_factory=list)  # generated before measuring, never recorded

    @property
    def peer(self) -> Mode | None:
        """The llama-cpp-python peer, which bench loads in-process."""
        return next((m for m in self.peers if m.drafter == "llama-cpp-python"), None)

    @property
    def n_generations(self) -> int:
        turns = sum(len(self.turns_of(p)) for p in self.prompts)
        return turns * self.opts.repeat * len(self.modes)

    @property
    def warm_modes(self) -> list[Mode]:
        """The modes that generate the warm prompts: those drafting from history."""
        return [m for m in self.modes if not m.peer and reads_history(self.settings[m.name])] if self.warm_prompts else []

    @property
    def n_warm_generations(self) -> int:
        return sum(len(self.turns_of(p)) for p in self.warm_prompts) * len(self.warm_modes)

    def turns_of(self, p: Prompt) -> tuple[str, ...]:
        return p.turns if self.opts.turns == "all" else p.turns[:1]


def _resolve(profile: str | None, overrides: dict[str, Any], mode: Mode | None = None) -> Settings:
    try:
        return profiles.resolve_settings(profile, overrides)
    except ProfileError as e:
        if mode is None:
            raise
        raise ProfileError(f"mode {mode.name!r}: {e.message}", e.hint) from None


def bench_prompts(opts: BenchOptions) -> tuple[list[Prompt], list[Prompt]]:
    """(warm-up prompts for the history, prompts to run) as the options select them."""
    prompts: list[Prompt] = []
    if opts.prompts is not None:
        prompts += load_prompt_file(opts.prompts)
    if opts.suite is not None or opts.prompts is None:
        prompts += suite_prompts(opts.suite or "all")
    warm: list[Prompt] = []
    if opts.warm_history is not None:
        warm, prompts = split_warm(prompts, opts.warm_history, split_list(opts.categories), opts.limit)
    else:
        prompts = select_prompts(prompts, split_list(opts.categories), opts.limit)
    if not prompts:
        raise UsageError("no prompts to run")
    return warm, prompts


def plan_bench(opts: BenchOptions) -> Plan:
    """Check every option and resolve every mode's settings; loads no model."""
    if opts.repeat < 1:
        raise UsageError(f"--repeat must be at least 1, got {opts.repeat}")
    if opts.turns not in ("first", "all"):
        raise UsageError(f"--turns must be first or all, got {opts.turns!r}")
    if opts.write_profile is not None and not profiles.PROFILE_NAME_RE.match(opts.write_profile):
        raise UsageError(f"--write-profile {opts.write_profile!r}: not a profile name",
                         "letters, digits and . _ + - (no path)")
    warm, prompts = bench_prompts(opts)

    base_over = opts.base_overrides()
    base = _resolve(opts.profile, base_over)
    modes = parse_modes(opts.modes) if (opts.modes is not None or opts.sweep is None) else [Mode(BASELINE, "none")]
    if opts.sweep is not None:
        modes = dedupe_modes([*modes, *sweep_modes(parse_sweep(opts.sweep), base.drafter)])
    peer_texts = [opts.peer] if isinstance(opts.peer, str) else list(opts.peer or [])
    peers = dedupe_modes(parse_peer(t) for t in peer_texts)
    if peers and (base.rpc or base.draft_rpc):
        raise UsageError("peers load the whole target on this machine, not on the RPC servers",
                         "leave out --peer with --rpc")
    if any(m.drafter == LLAMA_CPP for m in peers):
        if opts.turns == "all":
            raise UsageError("llama.cpp peers run single prompts", "use --turns first with a llama.cpp peer")
        peers.insert(0, Mode(LLAMA_CPP_BASELINE, LLAMA_CPP, peer=True))
    settings = {m.name: _resolve(opts.profile, {**base_over, **m.overrides()}, m) for m in modes}
    for peer in peers:
        settings[peer.name] = _resolve(opts.profile, {**base_over, "drafter": "ngram", **dict(peer.options)}, peer)
        modes.append(peer)
    need_draft = any(profiles.needs_draft_model(s) for s in settings.values())
    # auto alone loads a draft model only where one pairs (--draft auto); draft and hybrid need one
    must = any(s.drafter in NEEDS_DRAFT_MODEL for s in settings.values())
    runtime = _resolve(opts.profile, {**base_over, "drafter": ("draft" if must else "auto") if need_draft else "none"})
    plan = Plan(opts, prompts, modes, settings, base, runtime, peers, warm)
    if opts.warm_history is not None and not plan.warm_modes:
        raise UsageError(f"--warm-history {opts.warm_history}: no mode drafts from history",
                         "add a suffix mode, or auto with history on")
    return plan

