"""Bench records: one per generation, the lossless comparison with the baseline, and
the aggregate rows per mode and category. Dataclasses here; JSON and CSV at the edge
(`to_json`)."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from specli.bench.modes import BASELINE, Mode
from specli.bench.suites import Prompt
from specli.engine import metrics
from specli.engine.metrics import Counters
from specli.errors import SpecliError
from specli.types import FinishReason

EXIT_LOSSLESS = 9

# how a generation compares with its baseline's at temperature 0
Lossless = Literal["unchecked", "baseline", "match", "near-tie", "mismatch"]
COMPARED = ("match", "near-tie", "mismatch")


class LosslessError(SpecliError):
    """A drafting mode produced different tokens than the baseline at temperature 0."""

    exit_code = EXIT_LOSSLESS


@dataclass
class BenchRecord:
    """One generation: which mode, prompt, repeat and turn; what it produced and its
    counters; its speedups and lossless verdict once the run is finished."""

    mode: str
    kind: str  # baseline | peer-baseline | peer | drafter
    compare_to: str | None  # the mode this one's speedup is against
    prompt_index: int
    prompt_id: str
    category: str
    repeat: int
    turn: int
    temperature: float
    verify: str
    finish_reason: FinishReason | None
    counters: Counters
    tokens: list[int] | None  # None: a peer reporting text only
    text: str
    margins: list[tuple[int, float]] | None = None  # baseline: (runner-up token, top logit - its logit)
    contenders: list[dict[int, float]] | None = None  # baseline: the next likeliest tokens -> their gaps
    speedup: float | None = None
    decode_speedup: float | None = None
    lossless: Lossless = "unchecked"
    first_diff: int | None = None

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.prompt_index, self.repeat, self.turn)

    def to_json(self) -> dict[str, Any]:
        """Every figure of `metrics.summary` plus the raw counts aggregates pool."""
        c = self.counters
        out: dict[str, Any] = {
            "mode": self.mode, "kind": self.kind, "compare_to": self.compare_to,
            "prompt_index": self.prompt_index, "prompt_id": self.prompt_id, "category": self.category,
            "repeat": self.repeat, "turn": self.turn, "temperature": self.temperature, "verify": self.verify,
            "finish_reason": self.finish_reason,
            **metrics.summary(c),
            "n_step_tokens": c.n_step_tokens,
            "drafted_by_pos": list(c.drafted_by_pos),
            "accepted_by_pos": list(c.accepted_by_pos),
            "t_llama_s": c.t_llama,
            "speedup": self.speedup,
            "decode_speedup": self.decode_speedup,
            "lossless": self.lossless,
            "first_diff": self.first_diff,
            "tokens": self.tokens,
            "text": self.text,
        }
        if self.margins is not None:
            out["margins"] = [[int(t), float(g)] for t, g in self.margins]
        if self.contenders is not None:
            out["contenders"] = [[[int(t), float(g)] for t, g in c.items()] for c in self.contenders]
        return out


@dataclass(frozen=True)
class Divergence:
    """Where a mode's greedy output first left its baseline's, and the verdict."""

    mode: str
    prompt_id: str
    prompt_index: int
    category: str
    repeat: int
    turn: int
    first_diff: int
    verdict: Lossless  # near-tie | mismatch
    verify: str
    baseline_token: int | None
    mode_token: int | None
    baseline_runner_up: int | None
    baseline_gap: float | None
    tie_bound: float | None
    baseline_length: int
    mode_length: int
    mode_token_gap: float | None = None  # the baseline's top logit - its logit of the mode's token, if recorded

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def record_from_counters(
    c: Counters, *, mode: Mode, prompt: Prompt, prompt_index: int, repeat: int, turn: int,
    tokens: Sequence[int] | None, text: str, finish_reason: FinishReason | None, temperature: float, verify: str = "batch",
    margins: Sequence[tuple[int, float]] | None = None, contenders: Sequence[dict[int, float]] | None = None,
) -> BenchRecord:
    return BenchRecord(
        mode.name, mode.kind, None if mode.is_baseline else mode.compare_to, prompt_index, prompt.id,
        prompt.category, repeat, turn, temperature, verify, finish_reason, c,
        None if tokens is None else [int(t) for t in tokens], text,
        None if margins is None else [(int(t), float(g)) for t, g in margins],
        None if contenders is None else [dict(c) for c in contenders],
    )


def replay_proposals(c: Counters, tokens: Sequence[int], proposals: Iterable[tuple[int, Sequence[int]]],
                     name: str = "peer") -> None:
    """Fill draft counters from a peer's drafts: each (tokens generated so far, draft)
    was followed by one target forward; at greedy decoding the accepted prefix is the
    part of the draft that the output repeats."""
    n = len(tokens)
    for offset, draft in proposals:
        if offset >= n:
            continue
        acc = 0
        while acc < len(draft) and offset + acc < n and tokens[offset + acc] == draft[acc]:
            acc += 1
        emitted = min(acc + 1, n - offset)
        c.record_step(name if draft else "none", len(draft), min(acc, emitted), emitted)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where the sequences differ (the shorter length if
    one is a prefix of the other); None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def add_speedups(records: Sequence[BenchRecord]) -> None:
    """speedup = this generation's tok/s / its baseline's tok/s on the same prompt, repeat
    and turn; decode_speedup the same with prefill excluded on both sides. A llama.cpp
    peer's baseline is llama.cpp's own plain decoding (`compare_to`), every other mode's
    specli's baseline. None without a baseline or when it made no tokens."""
    base = {(r.mode, *r.key): r for r in records if r.kind in ("baseline", "peer-baseline")}
    for r in records:
        b = base.get((r.compare_to or r.mode, *r.key))
        if b is None:
            r.speedup = r.decode_speedup = None
            continue
        r.speedup = _ratio(metrics.tokens_per_second(r.counters), metrics.tokens_per_second(b.counters))
        r.decode_speedup = _ratio(metrics.decode_tokens_per_second(r.counters),
                                  metrics.decode_tokens_per_second(b.counters))


def classify_divergence(baseline: BenchRecord, rec: BenchRecord, diff: int, tie_bound: float | None) -> Lossless:
    """`near-tie` when a one-batch mode's first differing token is one the baseline
    ranked right behind its top token at that position (the runner-up, or another of
    the recorded contenders) with a logit gap within the batching noise measured for
    this model and build; `mismatch` otherwise (always in exact mode)."""
    margins, tokens = baseline.margins, rec.tokens or []
    if rec.verify == "exact" or tie_bound is None or not margins or diff >= min(len(margins), len(tokens)):
        return "mismatch"
    mode_gap = mode_token_gap(baseline, diff, tokens[diff])
    return "near-tie" if mode_gap is not None and mode_gap <= tie_bound else "mismatch"


def mode_token_gap(baseline: BenchRecord, diff: int, token: int | None) -> float | None:
    """The baseline's gap from its top token to `token` at position `diff`, if recorded."""
    gaps: dict[int, float] = {}
    if baseline.margins is not None and diff < len(baseline.margins):
        gaps[baseline.margins[diff][0]] = baseline.margins[diff][1]
    if baseline.contenders is not None and diff < len(baseline.contenders):
        gaps.update(baseline.contenders[diff])
    return gaps.get(token) if token is not None else None


def check_lossless(records: Sequence[BenchRecord], tie_bound: float | None = None,
                   mode_bounds: Mapping[str, float] | None = None) -> list[Divergence]:
    """Compare each generation with its baseline's (both at temperature 0) and mark it
    `match`, `near-tie`, `mismatch` or `unchecked`; `mode_bounds` gives a mode its own
    near-tie bound (a peer that batches differently). Returns the divergences (near-ties
    included, each with its `verdict`)."""
    base = {r.key: r for r in records if r.mode == BASELINE}
    out = []
    for r in records:
        bound = (mode_bounds or {}).get(r.mode, tie_bound)
        r.first_diff = None
        if r.mode == BASELINE:
            r.lossless = "baseline"
            continue
        b = base.get(r.key)
        if b is None or r.temperature > 0 or b.temperature > 0 or r.tokens is None or b.tokens is None:
            r.lossless = "unchecked"
            continue
        bt, mt = b.tokens, r.tokens
        diff = first_difference(bt, mt)
        r.first_diff = diff
        r.lossless = "match" if diff is None else classify_divergence(b, r, diff, bound)
        if diff is not None:
            margins = b.margins or []
            out.append(Divergence(
                r.mode, r.prompt_id, r.prompt_index, r.category, r.repeat, r.turn, diff, r.lossless, r.verify,
                bt[diff] if diff < len(bt) else None, mt[diff] if diff < len(mt) else None,
                margins[diff][0] if diff < len(margins) else None, margins[diff][1] if diff < len(margins) else None,
                bound, len(bt), len(mt), mode_token_gap(b, diff, mt[diff] if diff < len(mt) else None),
            ))
    return out


def divergences_of(records: Sequence[BenchRecord], tie_bound: float | None,
                   mode_bounds: Mapping[str, float] | None = None) -> list[Divergence]:
    """Speedups and the lossless check, in place; returns every divergence."""
    add_speedups(records)
    return check_lossless(records, tie_bound, mode_bounds)


def finish_records(records: Sequence[BenchRecord], tie_bound: float | None = None,
                   mode_bounds: Mapping[str, float] | None = None) -> list[Divergence]:
    """`divergences_of`, keeping only the mismatches (near-ties stay in the records)."""
    return [x for x in divergences_of(records, tie_bound, mode_bounds) if x.verdict == "mismatch"]


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


@dataclass
class Row:
    """Figures of a group of generations (one mode, one category or `all`): medians of
    per-generation rates, pooled ratios of counts."""

    mode: str
    category: str
    n: int
    n_generated: int
    tokens_per_second: float | None
    tokens_per_second_pooled: float | None
    speedup_median: float | None
    speedup_min: float | None
    speedup_max: float | None
    decode_speedup_median: float | None
    decode_speedup_min: float | None
    decode_speedup_max: float | None
    n_drafted: int
    n_accepted: int
    acceptance_rate: float | None
    mean_accepted_length: float | None
    acceptance_by_position: list[float]
    time_to_first_token_s: float | None
    time_s: dict[str, float]
    time_split: dict[str, float]
    python_overhead_fraction: float | None
    mismatches: int
    near_ties: int
    identical: int
    compared: int
    mean_draft_length: float | None = None  # tokens drafted per target forward
    ms_per_forward: float | None = None  # one target forward's wall time (network included over RPC)
    host_ms: dict[str, float] | None = None  # specli's own work per forward (metrics.host_ms_per_forward)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _spread(xs: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    return (_median(xs), min(xs), max(xs)) if xs else (None, None, None)


def aggregate_group(mode: str, category: str, records: Sequence[BenchRecord]) -> Row:
    cs = [r.counters for r in records]
    n_drafted = sum(c.n_drafted for c in cs)
    n_accepted = sum(c.n_accepted for c in cs)
    width = max((len(c.drafted_by_pos) for c in cs), default=0)
    drafted = [sum(c.drafted_by_pos[i] for c in cs if i < len(c.drafted_by_pos)) for i in range(width)]
    accepted = [sum(c.accepted_by_pos[i] for c in cs if i < len(c.accepted_by_pos)) for i in range(width)]
    t_total = sum(c.t_total for c in cs)
    splits = [metrics.time_split(c) for c in cs]
    times = {k: sum(s[k] for s in splits) for k in ("prefill", "draft", "verify", "other")}
    ttft = [c.t_first_token for c in cs if c.t_first_token is not None]
    verdicts = [r.lossless for r in records]
    pooled = functools.reduce(metrics.merge, cs, Counters())
    return Row(
        mode, category, len(records), sum(c.n_generated for c in cs),
        _median([metrics.tokens_per_second(c) for c in cs]),
        _ratio(sum(c.n_generated for c in cs), t_total),
        *_spread([r.speedup for r in records if r.speedup is not None]),
        *_spread([r.decode_speedup for r in records if r.decode_speedup is not None]),
        n_drafted, n_accepted, _ratio(n_accepted, n_drafted),
        _ratio(sum(c.n_step_tokens for c in cs), sum(c.n_target_forwards for c in cs)),
        [a / d if d else 0.0 for a, d in zip(accepted, drafted)],
        _median(ttft),
        {**times, "total": t_total},
        {k: (v / t_total if t_total > 0 else 0.0) for k, v in times.items()},
        _ratio(max(0.0, t_total - sum(c.t_llama for c in cs)), t_total),
        verdicts.count("mismatch"), verdicts.count("near-tie"), verdicts.count("match"),
        sum(1 for v in verdicts if v in COMPARED),
        mean_draft_length=metrics.mean_draft_length(pooled) if pooled.n_target_forwards else None,
        ms_per_forward=metrics.ms_per_forward(pooled) if pooled.n_target_forwards else None,
        host_ms=metrics.host_ms_per_forward(pooled) if metrics.has_host_account(pooled) else None,
    )


def aggregate(records: Sequence[BenchRecord], modes: Sequence[str] | None = None) -> list[Row]:
    """Per mode: one row per category (in order of appearance) and one `all` row."""
    mode_order = list(modes) if modes is not None else list(dict.fromkeys(r.mode for r in records))
    categories = list(dict.fromkeys(r.category for r in records))
    rows = []
    for m in mode_order:
        mine = [r for r in records if r.mode == m]
        if not mine:
            continue
        for cat in categories:
            group = [r for r in mine if r.category == cat]
            if group:
                rows.append(aggregate_group(m, cat, group))
        rows.append(aggregate_group(m, "all", mine))
    return rows

