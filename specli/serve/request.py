"""The one internal request every protocol's body becomes (serve/protocols/): what to
generate and how, in no protocol's words but for the field names its errors must use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from specli.serve.fim import EditorStops, FimFields
from specli.serve.tools import Structure


@dataclass(frozen=True)
class Fields:
    """A protocol's names for the fields a later check may fault: the prompt, the token
    limit and a fill-in-the-middle's suffix."""

    prompt: str = "messages"
    max_tokens: str = "max_tokens"
    suffix: str = "suffix"


@dataclass(frozen=True)
class Options:
    """What a request asks of the generation; None = the server's setting."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    drafter: str | None = None  # specli: {...}
    draft_max: int | None = None
    exact: bool | None = None
    history: bool = True  # False: this request's output stays out of the history store
    return_tokens: bool = False
    grammar_drafts: bool | None = None  # under a grammar, draft the tokens it forces
    prediction: str | None = None  # OpenAI's predicted output: a draft source
    suffix_stop: bool = True  # a fill-in-the-middle completion ends where it writes the suffix's first line
    logprobs: int | None = None  # None: none returned; else the emitted tokens' and this many alternatives
    logit_bias: tuple[tuple[int, float], ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    editor: EditorStops = EditorStops()  # llama-server's n_indent and t_max_predict_ms, a FIM's suffix stop
    sources: bool = False  # stream each token's source, the steps and live figures (the web page)


@dataclass(frozen=True)
class Request:
    """One checked request: a chat (`messages`) or a completion (`prompt`), from any
    protocol; `fields` names its fields as that protocol does, for the 400s found later."""

    kind: Literal["chat", "completion"]
    model: str | None
    options: Options
    messages: tuple[dict[str, str], ...] = ()
    prompt: str = ""
    stream: bool = False
    structure: Structure | None = None  # response_format, tools, tool_choice
    endpoint: str = ""  # the route's name in logs and /metrics (default: kind)
    reasoning: bool = False  # a leading <think>...</think> of the answer is reasoning, apart from the text
    reply: Any = None  # what the protocol keeps for its own answer (OpenAI's include_usage, the Responses API's echo)
    fim: FimFields | None = None  # a fill-in-the-middle completion: its prompt comes from these
    fields: Fields = field(default_factory=lambda: Fields())
