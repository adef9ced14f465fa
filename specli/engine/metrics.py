"""Counters of one generation and the pure functions that turn them into figures.

Definitions (used everywhere, printed by the CLI and README):
- acceptance rate = accepted draft tokens / drafted tokens
- mean accepted length (tau) = tokens emitted per target forward pass in the decode
  phase, bonus/correction token included (plain decoding: 1.0)
- tokens/s = generated tokens / (time from request start to last token)
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Counters:
    n_prompt: int = 0  # prompt tokens of this request
    n_prompt_reused: int = 0  # of those, found already in the target's KV cache
    n_generated: int = 0  # tokens emitted (end-of-generation token excluded)
    n_target_forwards: int = 0  # target decode calls after the prefill
    n_step_tokens: int = 0  # tokens emitted by those calls
    n_drafted: int = 0
    n_accepted: int = 0
    drafted_by_pos: list[int] = field(default_factory=list)
    accepted_by_pos: list[int] = field(default_factory=list)
    drafter_steps: dict[str, int] = field(default_factory=dict)  # steps per drafter / mode
    drafted_by: dict[str, int] = field(default_factory=dict)  # draft tokens verified, per source
    accepted_by: dict[str, int] = field(default_factory=dict)  # of those, accepted
    n_forced: int = 0  # of n_drafted: tokens a grammar forced (the "grammar" drafter), in any step
    n_forced_accepted: int = 0
    t_prefill: float = 0.0
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_total: float = 0.0
    t_first_token: float | None = None
    t_llama: float = 0.0  # seconds inside llama_decode (target + draft)
    # the decode phase, step by step (host work per forward, see `host_ms_per_forward`):
    t_llama_draft: float = 0.0  # the draft model's decode calls (drafting and catching up)
    t_llama_verify: float = 0.0  # the target's verify batches
    t_accept: float = 0.0  # drafters learning from the verdict
    t_control: float = 0.0  # of t_draft + t_accept: the controller's pricing and learning (auto)
    t_loop: float = 0.0  # the engine's own bookkeeping around each step
    t_outside: float = 0.0  # the generator's caller between steps (the text layer and its caller)
    t_text: float = 0.0  # of t_outside: the text layer (detokenizing, stop strings)
    steps_by_k: dict[str, list[int]] = field(default_factory=dict)  # drafter -> forwards per draft length k

    def snapshot(self) -> Counters:
        """A copy (one per step: `dataclasses.replace` cost 26 us of a 330 us step)."""
        out = object.__new__(Counters)
        out.__dict__.update(self.__dict__)
        out.drafted_by_pos = list(self.drafted_by_pos)
        out.accepted_by_pos = list(self.accepted_by_pos)
        out.drafter_steps = dict(self.drafter_steps)
        out.drafted_by = dict(self.drafted_by)
        out.accepted_by = dict(self.accepted_by)
        out.steps_by_k = {k: list(v) for k, v in self.steps_by_k.items()}
        return out

    def record_step(self, drafter: str, n_drafted: int, n_accepted: int, n_emitted: int) -> None:
        self.n_target_forwards += 1
        self.n_step_tokens += n_emitted
        self.n_drafted += n_drafted
        self.n_accepted += n_accepted
        self.drafter_steps[drafter] = self.drafter_steps.get(drafter, 0) + 1
        if n_drafted:
            self.drafted_by[drafter] = self.drafted_by.get(drafter, 0) + n_drafted
            self.accepted_by[drafter] = self.accepted_by.get(drafter, 0) + n_accepted
        by_k = self.steps_by_k.setdefault(drafter, [])
        if len(by_k) <= n_drafted:
            by_k.extend([0] * (n_drafted + 1 - len(by_k)))
        by_k[n_drafted] += 1
        grow = n_drafted - len(self.drafted_by_pos)
        if grow > 0:
            self.drafted_by_pos.extend([0] * grow)
            self.accepted_by_pos.extend([0] * grow)
        for i in range(n_drafted):
            self.drafted_by_pos[i] += 1
        for i in range(n_accepted):
            self.accepted_by_pos[i] += 1


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else 0.0


def acceptance_rate(c: Counters) -> float:
    return _ratio(c.n_accepted, c.n_drafted)


def mean_accepted_length(c: Counters) -> float:
    return _ratio(c.n_step_tokens, c.n_target_forwards)


def mean_draft_length(c: Counters) -> float:
    """Tokens drafted per target forward: the draft length the drafter chose."""
    return _ratio(c.n_drafted, c.n_target_forwards)


def ms_per_forward(c: Counters) -> float:
    """Wall time of one target forward (verify batch) in ms: over RPC, the network's
    round trips are in it (llama.cpp does not report them apart)."""
    return 1000 * _ratio(c.t_verify, c.n_target_forwards)


def n_drafts(c: Counters) -> int:
    """Target forwards that verified a draft (vLLM's num_drafts): the rest were plain steps."""
    return c.n_target_forwards - c.drafter_steps.get("none", 0)


def acceptance_by_position(c: Counters) -> list[float]:
    """P(draft token i accepted | drafted at position i), i = 0..k-1."""
    return [_ratio(a, d) for a, d in zip(c.accepted_by_pos, c.drafted_by_pos)]


def tokens_per_second(c: Counters) -> float:
    return _ratio(c.n_generated, c.t_total)


def decode_tokens_per_second(c: Counters) -> float:
    """Generation speed after the first token (prefill excluded)."""
    first = c.t_first_token or 0.0
    return _ratio(c.n_generated - 1, c.t_total - first) if c.n_generated > 1 else 0.0


def time_split(c: Counters) -> dict[str, float]:
    other = max(0.0, c.t_total - c.t_prefill - c.t_draft - c.t_verify)
    return {"prefill": c.t_prefill, "draft": c.t_draft, "verify": c.t_verify, "other": other}


def python_overhead_fraction(c: Counters) -> float:
    """Share of wall time spent outside llama.cpp decode calls."""
    return _ratio(max(0.0, c.t_total - c.t_llama), c.t_total)


HOST_PARTS = ("draft", "verify", "control", "text", "rest")


def has_host_account(c: Counters) -> bool:
    """Whether `c` comes from specli's own loop: a peer (a C++ program, llama-cpp-python's
    own generator) has no host account."""
    return c.t_llama_verify > 0


def host_ms_per_forward(c: Counters) -> dict[str, float]:
    """specli's own work per target forward in the decode phase, outside llama.cpp's
    decode calls, in ms: drafting (lookups, the draft model's glue, learning from
    verdicts), verification (reading rows, argmax or rejection), the controller's
    pricing, the text layer, and the rest (the engine's bookkeeping and whatever the
    caller does between steps: a dashboard, a server's streaming). `llama` is the decode
    calls' own time; all of them add up to the decode phase's wall time."""
    n = max(1, c.n_target_forwards)
    draft = c.t_draft + c.t_accept - c.t_llama_draft - c.t_control
    parts = {
        "draft": draft,
        "verify": c.t_verify - c.t_llama_verify,
        "control": c.t_control,
        "text": c.t_text,
        "rest": c.t_loop + c.t_outside - c.t_text,
    }
    out = {k: 1000 * max(0.0, v) / n for k, v in parts.items()}
    out["total"] = sum(out[k] for k in HOST_PARTS)
    out["llama"] = 1000 * (c.t_llama_draft + c.t_llama_verify) / n
    return out


def summary(c: Counters) -> dict[str, object]:
    """Every figure, JSON-friendly."""
    return {
        "n_prompt": c.n_prompt,
        "n_prompt_reused": c.n_prompt_reused,
        "n_generated": c.n_generated,
        "n_target_forwards": c.n_target_forwards,
        "n_drafted": c.n_drafted,
        "n_accepted": c.n_accepted,
        "acceptance_rate": acceptance_rate(c),
        "mean_accepted_length": mean_accepted_length(c),
        "mean_draft_length": mean_draft_length(c),
        "ms_per_target_forward": ms_per_forward(c),
        "acceptance_by_position": acceptance_by_position(c),
        "drafter_steps": dict(c.drafter_steps),
        "n_forced": c.n_forced,
        "n_forced_accepted": c.n_forced_accepted,
        "tokens_per_second": tokens_per_second(c),
        "decode_tokens_per_second": decode_tokens_per_second(c),
        "time_to_first_token_s": c.t_first_token,
        "time_s": time_split(c) | {"total": c.t_total},
        "python_overhead_fraction": python_overhead_fraction(c),
        "host_ms_per_forward": host_ms_per_forward(c),
        "steps_by_k": {k: list(v) for k, v in c.steps_by_k.items()},
    }


def merge(a: Counters, b: Counters) -> Counters:
    """Sum two runs' counters (for session totals)."""
    out = a.snapshot()
    for name in (
        "n_prompt", "n_prompt_reused", "n_generated", "n_target_forwards", "n_step_tokens",
        "n_drafted", "n_accepted", "n_forced", "n_forced_accepted", "t_prefill", "t_draft", "t_verify", "t_total", "t_llama",
        "t_llama_draft", "t_llama_verify", "t_accept", "t_control", "t_loop", "t_outside", "t_text",
    ):
        setattr(out, name, getattr(a, name) + getattr(b, name))
    n = max(len(a.drafted_by_pos), len(b.drafted_by_pos))
    pad = lambda xs: xs + [0] * (n - len(xs))  # noqa: E731
    out.drafted_by_pos = [x + y for x, y in zip(pad(a.drafted_by_pos), pad(b.drafted_by_pos))]
    out.accepted_by_pos = [x + y for x, y in zip(pad(a.accepted_by_pos), pad(b.accepted_by_pos))]
    out.drafter_steps = dict(a.drafter_steps)
    for k, v in b.drafter_steps.items():
        out.drafter_steps[k] = out.drafter_steps.get(k, 0) + v
    add_steps_by_k(out.steps_by_k, b.steps_by_k)
    if out.t_first_token is None:
        out.t_first_token = b.t_first_token
    return out


def add_steps_by_k(into: dict[str, list[int]], more: dict[str, list[int]]) -> None:
    """Add `more`'s forwards per (drafter, draft length) to `into`."""
    for name, counts in more.items():
        mine = into.setdefault(name, [])
        mine.extend([0] * (len(counts) - len(mine)))
        for k, count in enumerate(counts):
            mine[k] += count
