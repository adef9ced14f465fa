"""The response shapes: OpenAI's completion, chunk, usage and model list objects, with
llama-server's `timings` and specli's own figures, built from a generation's outcome.
Pure: no models, no HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from specli.drafters.ngram import PREDICTION
from specli.engine import metrics
from specli.engine.adjust import TokenLogprob
from specli.runtime.prompt_cache import CacheUse
from specli.serve.tools import ToolCall

OpenAIFinish = Literal["stop", "length", "tool_calls"]


@dataclass
class Outcome:
    """A finished (or cut) generation, as the response needs it."""

    text: str
    finish_reason: OpenAIFinish
    counters: metrics.Counters
    specli_finish: str  # specli's own reason: stop, length, context, cancelled, terminated
    queue_s: float = 0.0  # waiting for the generation thread
    tokens: list[int] | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    cache: CacheUse | None = None
    logprobs: list[dict[str, Any]] | None = None  # chat-shaped entries (logprob_entries), where asked
    stop_string: str | None = None  # the stop string that ended it, if one did
    notes: list[str] = field(default_factory=list)  # what a client should know: a schema not enforced, a call unfit


def logprob_entries(lps: Sequence[TokenLogprob], piece: Callable[[int], bytes]) -> list[dict[str, Any]]:
    """OpenAI's chat logprobs entries: each token's text, bytes and log-probability, and
    its row's likeliest alternatives."""
    def one(token: int, logprob: float) -> dict[str, Any]:
        raw = piece(token)
        return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}

    return [{**one(lp.token, lp.logprob), "top_logprobs": [one(t, v) for t, v in lp.top]} for lp in lps]


def logprobs_object(kind: str, entries: list[dict[str, Any]] | None, offset: int = 0) -> dict[str, Any] | None:
    """A choice's `logprobs`: chat's {"content": entries}, or the completions API's
    {"tokens", "token_logprobs", "top_logprobs", "text_offset"} (offsets from `offset`)."""
    if entries is None:
        return None
    if kind == "chat":
        return {"content": entries, "refusal": None}
    offsets, at = [], offset
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}


def usage(c: metrics.Counters) -> dict[str, Any]:
    """OpenAI's usage. Of a predicted output (a draft source here): its tokens drafted and
    accepted, and those drafted and rejected."""
    accepted = c.accepted_by.get(PREDICTION, 0)
    return {"prompt_tokens": c.n_prompt, "completion_tokens": c.n_generated,
            "total_tokens": c.n_prompt + c.n_generated,
            "prompt_tokens_details": {"cached_tokens": c.n_prompt_reused},
            "completion_tokens_details": {"accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": c.drafted_by.get(PREDICTION, 0) - accepted}}


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
    """The `specli` object: what speculation did for this response."""
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


@dataclass(frozen=True)
class Ids:
    """What every object of one response shares."""

    id: str
    created: int
    model: str
    fingerprint: str
    n_prompt: int = 0  # the prompt's tokens


def chat_response(ids: Ids, out: Outcome) -> dict[str, Any]:
    return {"id": ids.id, "object": "chat.completion", "created": ids.created, "model": ids.model,
            "system_fingerprint": ids.fingerprint,
            "choices": [{"index": 0, "message": _message(out), "logprobs": logprobs_object("chat", out.logprobs),
                         "finish_reason": out.finish_reason}],
            "usage": usage(out.counters), "timings": timings(out.counters), "specli": specli_figures(out)}


def _message(out: Outcome) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": out.text if out.text or not out.tool_calls else None,
                           "refusal": None}
    if out.tool_calls:
        msg["tool_calls"] = [c.to_json() for c in out.tool_calls]
    return msg


def completion_response(ids: Ids, out: Outcome) -> dict[str, Any]:
    return {"id": ids.id, "object": "text_completion", "created": ids.created, "model": ids.model,
            "system_fingerprint": ids.fingerprint,
            "choices": [{"index": 0, "text": out.text, "logprobs": logprobs_object("completion", out.logprobs),
                         "finish_reason": out.finish_reason}],
            "usage": usage(out.counters), "timings": timings(out.counters), "specli": specli_figures(out)}


def chunk(ids: Ids, kind: str, text: str | None, *, first: bool = False, out: Outcome | None = None,
          include_usage: bool = False, calls: Sequence[tuple[int, ToolCall]] = (),
          logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One streamed chunk: text (`first` adds the assistant role), finished tool calls
    (`calls`: (index, ToolCall)), or the last one (`out`: its finish reason, timings and
    specli figures)."""
    choice: dict[str, Any] = {"index": 0}
    if kind == "chat":
        delta: dict[str, Any] = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        if calls:
            delta["tool_calls"] = [call.to_json(index) for index, call in calls]
        choice["delta"] = delta
    else:
        choice["text"] = text or ""
    choice["logprobs"] = logprobs
    choice["finish_reason"] = out.finish_reason if out is not None else None
    obj: dict[str, Any] = {"id": ids.id, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
                           "created": ids.created, "model": ids.model, "system_fingerprint": ids.fingerprint,
                           "choices": [choice]}
    if include_usage:
        obj["usage"] = None
    if out is not None:
        obj["timings"] = timings(out.counters)
        obj["specli"] = specli_figures(out)
    return obj


def usage_chunk(ids: Ids, kind: str, out: Outcome) -> dict[str, Any]:
    """stream_options.include_usage: a last chunk with no choices and the usage."""
    return {"id": ids.id, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
            "created": ids.created, "model": ids.model, "system_fingerprint": ids.fingerprint, "choices": [],
            "usage": usage(out.counters)}


def models_list(names: Sequence[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": n, "object": "model", "created": created, "owned_by": "specli"}
                                       for n in names]}


def sse(obj: Any) -> bytes:
    """`obj` as one server-sent event: compact JSON, UTF-8 left as it is."""
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"  # OpenAI's end of a stream
