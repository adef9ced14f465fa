"""What every protocol's answer carries beside its own fields: llama-server's `timings`
and specli's `specli` object (what speculation did), attached in one place."""

from __future__ import annotations

from typing import Any

from specli.engine import metrics
from specli.serve.outcome import Outcome


def timings(c: metrics.Counters) -> dict[str, Any]:
    """llama-server's `timings` object, draft counts included."""
    decode_s = max(0.0, c.t_total - (c.t_first_token or 0.0))
    n_decode = max(0, c.n_generated - 1)
    n_new = c.n_prompt - c.n_prompt_reused
    return {"cache_n": c.n_prompt_reused, "prompt_n": n_new, "prompt_ms": 1000 * c.t_prefill,
            "prompt_per_second": n_new / c.t_prefill if c.t_prefill > 0 else 0.0,
            "predicted_n": c.n_generated, "predicted_ms": 1000 * decode_s,
            "predicted_per_second": n_decode / decode_s if decode_s > 0 else 0.0,
            "draft_n": c.n_drafted, "draft_n_accepted": c.n_accepted}


def specli_figures(out: Outcome) -> dict[str, Any]:
    """The `specli` object: what speculation did for this answer."""
    c = out.counters
    fig: dict[str, Any] = {
        "drafted": c.n_drafted, "accepted": c.n_accepted, "acceptance_rate": metrics.acceptance_rate(c),
        "target_forwards": c.n_target_forwards, "tokens_per_forward": metrics.mean_accepted_length(c),
        "drafter_steps": dict(c.drafter_steps), "drafted_by": dict(c.drafted_by), "accepted_by": dict(c.accepted_by),
        "decode_tokens_per_second": metrics.decode_tokens_per_second(c),
        "time_to_first_token_s": c.t_first_token, "queue_s": out.queue_s, "finish_reason": out.specli_finish,
        "notes": list(out.notes),
    }
    if out.cache is not None:
        fig["prompt_cache"] = out.cache.to_json()
    if out.tokens is not None:
        fig["tokens"] = out.tokens
    return fig


def with_figures(body: dict[str, Any], out: Outcome, notes: list[str] | None = None) -> dict[str, Any]:
    """`body` with `timings` and `specli` added (after its own fields, as clients saw them
    before); `notes` replace the outcome's own in `specli.notes`."""
    body["timings"] = timings(out.counters)
    body["specli"] = specli_figures(out)
    if notes is not None:
        body["specli"]["notes"] = notes
    return body
