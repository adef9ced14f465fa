"""llama-server's `POST /infill` answers: the whole answer and its stream in llama-server's
/completion shape (`content`, `tokens_predicted`, `stop_type`, `timings`), no [DONE]."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from specli.serve.errors import ApiError
from specli.serve.figures import with_figures
from specli.serve.outcome import Delta, Outcome
from specli.serve.protocols import sse
from specli.serve.protocols.base import Ids, Queue
from specli.serve.request import Request


def stop_type(out: Outcome) -> str:
    """llama-server's: eos (the model ended), word (a stop string, or the suffix's first
    line), limit (n_predict, n_indent, t_max_predict_ms, the context)."""
    return {"stop_string": "word", "end": "eos"}.get(out.finish, "limit")


def _partial(ids: Ids, content: str, n_predicted: int) -> dict[str, Any]:
    return {"index": 0, "content": content, "tokens": [], "stop": False, "id_slot": -1,
            "tokens_predicted": n_predicted, "tokens_evaluated": ids.n_prompt}


def whole(ids: Ids, req: Request, out: Outcome) -> dict[str, Any]:
    c = out.counters
    o = req.options
    settings = {"n_predict": o.max_tokens or -1, "temperature": o.temperature, "top_k": o.top_k, "top_p": o.top_p,
                "min_p": o.min_p, "seed": o.seed, "n_indent": o.editor.n_indent,
                "t_max_predict_ms": o.editor.t_max_ms, "stop": list(o.stop)}
    return with_figures({"index": 0, "content": out.text, "tokens": out.tokens or [], "id_slot": -1, "stop": True,
                         "model": ids.model, "tokens_predicted": c.n_generated, "tokens_evaluated": c.n_prompt,
                         "generation_settings": settings, "prompt": "", "has_new_line": "\n" in out.text,
                         "truncated": False, "stop_type": stop_type(out), "stopping_word": out.stop_string or "",
                         "tokens_cached": c.n_prompt + c.n_generated}, out)


async def events(ids: Ids, req: Request, queue: Queue) -> AsyncIterator[bytes]:
    """Each piece as llama-server streams /completion (`data: {content, stop: false}`),
    then the whole answer's fields with empty content and `stop: true`."""
    n = 0
    async for item in sse.pushes(queue):
        if isinstance(item, ApiError):
            yield sse.data(item.body())
        elif isinstance(item, Delta):
            n += 1
            yield sse.data(_partial(ids, item.text, n))
        elif isinstance(item, Outcome):
            yield sse.data({**whole(ids, req, item), "content": ""})
