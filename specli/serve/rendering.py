"""A request's prompt tokens and its answer's grammar, from the loaded model: chat
messages through the chat template (tools rendered as its template shows them), a
completion's text, a fill-in-the-middle request through the model's FIM tokens."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specli.engine.grammar import Grammar
from specli.errors import TemplateError, UsageError
from specli.profiles import Settings
from specli.runtime import Runtime, prompting
from specli.serve.errors import invalid
from specli.serve.fim import model_fim_prompt
from specli.serve.request import Request
from specli.serve.tools import check_template, tool_grammar


def answer_grammar(rt: Runtime, request: Request) -> Grammar | None:
    """The grammar a chat request's answer follows: its response_format's, or its tool
    calls' (400 where the model's vocabulary lacks the call tags as tokens)."""
    structure = request.structure
    if structure is None:
        return None
    if structure.response_format is not None:
        return structure.response_format
    if not structure.calls_tools:
        return None
    tags = [rt.target.tokenize(tag, add_special=False, parse_special=True) for tag in ("<tool_call>", "</tool_call>")]
    if any(len(t) != 1 for t in tags):
        raise invalid("tools", "this model's vocabulary has no <tool_call> tokens, so its calls cannot be parsed",
                      "unsupported_parameter")
    return tool_grammar(structure, tags[0][0], tags[1][0])


def request_tokens(rt: Runtime, request: Request, s: Settings) -> list[int]:
    """The target's tokens for a request: a completion's prompt as text (special-token
    text parsed, as llama-server does), a chat through the same builder as `chat` and
    `generate` (a system message, alternating turns ending with the user's), or any
    other order of messages through the model's chat template; where the template
    refuses a system message past the first, with it folded into a user turn."""
    try:
        return _request_tokens(rt, request, s)
    except TemplateError as e:
        folded = fold_system(request.messages)
        if folded == request.messages:
            raise invalid(request.fields.prompt, e.one_line()) from None
        return _request_tokens(rt, replace(request, messages=folded), s)


def fim_tokens(rt: Runtime, request: Request) -> list[int]:
    """A fill-in-the-middle request's prompt, as llama-server's /infill builds it (400 for
    a model without FIM tokens)."""
    assert request.fim is not None
    try:
        return model_fim_prompt(rt.target, request.fim, request.options.max_tokens or -1)
    except UsageError as e:
        raise invalid(request.fields.suffix, e.one_line(), "unsupported_parameter") from None


def _request_tokens(rt: Runtime, request: Request, s: Settings) -> list[int]:
    try:
        if request.fim is not None:
            return fim_tokens(rt, request)
        if request.kind == "completion":
            return rt.target.tokenize(request.prompt, add_special=True, parse_special=True)
        msgs = list(request.messages)
        system = msgs.pop(0)["content"] if msgs and msgs[0]["role"] == "system" else s.system
        roles = [m["role"] for m in msgs]
        simple = roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]
        structure = request.structure
        if structure is not None and structure.template_tools and not s.raw:
            tools = structure.template_tools
            full = [*([{"role": "system", "content": system}] if system else []), *msgs]
            rendered = rt.target.apply_chat_template(full, True, tools) if rt.target.chat_template else ""
            check_template(rt.target.chat_template, rendered, structure)
            return rt.target.chat_tokens(full, tools=tools)
        if simple and not any("tool_calls" in m for m in msgs):
            return prompting.prompt_tokens(rt.target, msgs[-1]["content"], msgs[:-1], system=system, raw=s.raw)
        if s.raw or not rt.target.chat_template:
            field = request.fields.prompt
            raise invalid(field, f"without a chat template, {field} must be alternating user and assistant "
                                 "turns that end with the user's (or use /v1/completions)")
        return rt.target.chat_tokens([*([{"role": "system", "content": system}] if system else []), *msgs])
    except TemplateError:
        raise
    except UsageError as e:
        raise invalid(request.fields.prompt, e.one_line()) from None


def fold_system(messages: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    """The messages with every system message but a leading one folded into the next
    user message (else the one before, else the leading system message): for chat
    templates that refuse a system message anywhere but first."""
    out = [dict(m) for m in messages]
    keep = [i == 0 or m["role"] != "system" for i, m in enumerate(out)]
    for i, m in enumerate(out):
        if keep[i]:
            continue
        users = [j for j in range(i + 1, len(out)) if out[j]["role"] == "user"][:1] or \
            [j for j in range(i - 1, -1, -1) if out[j]["role"] == "user"][:1]
        if users:
            j = users[0]
            joined = (m["content"], out[j]["content"]) if j > i else (out[j]["content"], m["content"])
            out[j]["content"] = "\n\n".join(p for p in joined if p)
        elif out[0]["role"] == "system":
            out[0]["content"] = "\n\n".join(p for p in (out[0]["content"], m["content"]) if p)
        else:
            keep[i] = True  # nowhere else to go: the template decides
    return tuple(m for m, k in zip(out, keep) if k)
