"""The web page's view of speculation (`"specli": {"sources": true}` in a streamed request):
each token's text and where it came from (a drafter's name, or "target" for the token the
target wrote itself), the steps since the last chunk with the drafter each used, and the
answer's figures so far. Tokens are detokenized one by one here, apart from the answer's
text, and handed out as that text is sent, so a token's marks line up with the chunk that
carries its text; text held back (a possible stop string) holds its marks back too."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specli.engine.adjust import TokenLogprob
from specli.engine.metrics import Counters
from specli.engine.text import StepEvent
from specli.runtime.kv.prompt_cache import CacheUse

TARGET = "target"  # the source of a token the target wrote itself
LEARNED = {"medusa": "heads", "eagle": "heads"}  # the page marks every learned drafter's tokens alike


@dataclass
class Mark:
    text: str
    source: str
    logprob: float | None = None
    runner_up: tuple[str, float] | None = None  # the likeliest other token and its log-probability

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "source": self.source}
        if self.logprob is not None:
            out["logprob"] = round(self.logprob, 4)
        if self.runner_up is not None:
            out["runner_up"] = {"text": self.runner_up[0], "logprob": round(self.runner_up[1], 4)}
        return out


def runner_up(lp: TokenLogprob, piece: Callable[[int], bytes]) -> tuple[str, float] | None:
    """The row's likeliest token other than the one emitted."""
    for token, value in lp.top:
        if token != lp.token:
            return piece(token).decode("utf-8", "replace"), value
    return None


def live_figures(c: Counters) -> dict[str, Any]:
    """The answer so far: tokens, decode speed, acceptance and tokens per target forward."""
    decode_s = c.t_total - c.t_prefill
    return {"generated": c.n_generated,
            "tokens_per_s": round(c.n_generated / decode_s, 2) if decode_s > 0 else None,
            "acceptance": round(c.n_accepted / c.n_drafted, 4) if c.n_drafted else None,
            "tokens_per_forward": round(c.n_step_tokens / c.n_target_forwards, 3) if c.n_target_forwards else None,
            "drafted": c.n_drafted, "accepted": c.n_accepted, "forwards": c.n_target_forwards}


class SourceMarks:
    """Marks of the tokens emitted, waiting for their text to be sent."""

    def __init__(self, detokenize: Callable[[list[int]], str], piece: Callable[[int], bytes],
                 use: CacheUse | None, n_prompt: int) -> None:
        self._detokenize, self._piece = detokenize, piece
        self._marks: deque[Mark] = deque()
        self._steps: list[list[Any]] = []
        restored = use.n_restored if use is not None and use.entry else 0
        self._prompt: dict[str, Any] | None = {"tokens": n_prompt, "restored": restored,
                                               "from": use.source if restored and use is not None else None}

    def add(self, ev: StepEvent) -> None:
        """A step's tokens: the first `n_accepted` came from its drafter."""
        if ev.drafter != "prefill":
            self._steps.append([ev.drafter, ev.n_drafted, ev.n_accepted, len(ev.tokens)])
        for i, token in enumerate(ev.tokens):
            lp = ev.logprobs[i] if ev.logprobs is not None and i < len(ev.logprobs) else None
            source = LEARNED.get(ev.drafter, ev.drafter) if i < ev.n_accepted else TARGET
            mark = Mark(self._detokenize([token]), source,
                        lp.logprob if lp is not None else None, runner_up(lp, self._piece) if lp is not None else None)
            self._marks.append(mark)

    def take(self, text: str, counters: Counters) -> dict[str, Any]:
        """The marks of the next `len(text)` characters sent, with the steps since the last
        chunk and the figures so far (the first chunk also says how much of the prompt the
        prompt cache restored)."""
        out: list[dict[str, Any]] = []
        n = len(text)
        while n > 0 and self._marks:
            mark = self._marks[0]
            if not mark.text:  # a token whose bytes end in the next one's character
                self._marks.popleft()
                continue
            if len(mark.text) <= n:
                self._marks.popleft()
                n -= len(mark.text)
                out.append(mark.as_json())
            else:  # a token split by a held-back stop string: its head now, its tail later
                out.append(Mark(mark.text[:n], mark.source, mark.logprob, mark.runner_up).as_json())
                mark.text = mark.text[n:]
                n = 0
        sent: dict[str, Any] = {"tokens": out, "steps": self._steps, "live": live_figures(counters)}
        if self._prompt is not None:
            sent["prompt"], self._prompt = self._prompt, None
        self._steps = []
        return sent
