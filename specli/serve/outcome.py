"""What a job hands the request that waits for it, in no protocol's shape: `Delta`s of new
text while it runs, then one `Outcome` (or an `ApiError`). Each protocol turns these into
its own frames and answer (serve/protocols/)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from specli.engine import FINISH_STOP, metrics
from specli.engine.adjust import TokenLogprob
from specli.runtime.kv.prompt_cache import CacheUse
from specli.serve.errors import ApiError
from specli.serve.tools import ToolCall

# how an answer ended, for every protocol to name in its own words: the model's end (or
# its grammar's), a stop string (or a fill-in-the-middle's suffix line), the token limit
# (or the context, or an editor's limit), tool calls, or the client gone / the server stopping
Finish = Literal["end", "stop_string", "length", "tool_call", "cancelled"]
# the engine's reasons for an answer that ended by itself (a FIM's suffix line is a stop too)
ENDED_BY_ITSELF = frozenset({FINISH_STOP, "suffix"})


@dataclass
class Outcome:
    """A finished (or cut) generation."""

    text: str
    finish: Finish
    counters: metrics.Counters
    specli_finish: str  # the engine's own reason: stop, length, context, suffix, cancelled, terminated, ...
    queue_s: float = 0.0  # waiting for a slot
    tokens: list[int] | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    cache: CacheUse | None = None
    logprobs: list[dict[str, Any]] | None = None  # token_logprobs entries, where asked
    stop_string: str | None = None  # the stop string that ended it, if one did
    notes: list[str] = field(default_factory=list)  # what a client should know: a schema not enforced, a call unfit


@dataclass(frozen=True)
class Delta:
    """New text of a running job, and tool calls it finished."""

    text: str
    calls: tuple[tuple[int, ToolCall], ...] = ()  # (index in the answer, call)
    logprobs: list[dict[str, Any]] | None = None  # of the tokens since the last delta, where asked
    sources: dict[str, Any] | None = None  # where asked (the web page): its tokens' sources, steps, figures


Pushed = Delta | Outcome | ApiError  # what a job hands its request's reader


def finish_of(engine_finish: str, found_calls: bool, stop_string: str | None) -> Finish:
    """The neutral finish of an answer the engine ended with `engine_finish`."""
    if engine_finish in ("cancelled", "terminated"):
        return "cancelled"
    if engine_finish not in ENDED_BY_ITSELF:
        return "length"
    if found_calls:
        return "tool_call"
    return "stop_string" if stop_string is not None or engine_finish == "suffix" else "end"


def token_logprobs(lps: Sequence[TokenLogprob], piece: Callable[[int], bytes]) -> list[dict[str, Any]]:
    """Each token's text, bytes and log-probability, and its row's likeliest alternatives
    (the shape OpenAI's chat logprobs use; the completions API reshapes it)."""
    def one(token: int, logprob: float) -> dict[str, Any]:
        raw = piece(token)
        return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}

    return [{**one(lp.token, lp.logprob), "top_logprobs": [one(t, v) for t, v in lp.top]} for lp in lps]
