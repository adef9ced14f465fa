"""Structured output for the server: `response_format`, `tools` and `tool_choice` checked
into a grammar, and a model's tool calls parsed out of its text.

Tool calls use the format of the model's own chat template, rendered with the tools as
llama-server's --jinja does. The format known here is the one Qwen2.5, Qwen3, Hermes
and SmolLM3 templates describe: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`,
whose tags are single tokens of those vocabularies. A call's JSON is constrained to the
function's name and parameter schema (`tool_choice` required or named: from the first
token; auto: once the model opens a call).

Small models often write their calls as fenced JSON instead (Qwen2.5-Coder 1.5B under
Claude Code and opencode: ```` ```json {"name": "Write", "arguments": {...}} ``` ````), as
llama.cpp's Hermes parser allowed for: an answer that is nothing but such blocks (or one
bare object), each naming a given function whose parameter schema its arguments fit,
is read as those calls; any other answer stays text.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specli.engine.grammar import Grammar, accepts, compile_grammar
from specli.serve.errors import invalid
from specli.serve.schemas import lenient_options, served, served_arguments

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL_RE = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
_FENCE = r"```(?:json)?[ \t]*\n(.*?)\n[ \t]*```"
_FENCED_ONLY = re.compile(rf"(?:\s*{_FENCE})+\s*", re.DOTALL)
_FENCE_HEAD = re.compile(r"```(?:json)?[ \t]*(?:\n|$)")


@dataclass(frozen=True)
class CustomTool:
    """A freeform tool (OpenAI's `custom`): its input is plain text, held to a Lark or
    regex grammar where it has one. The model calls it as
    `<tool_call>\n{"name": NAME}\n` + input + `\n</tool_call>`."""

    name: str
    description: str
    syntax: str | None = None  # lark, regex, or None (any text)
    definition: str = ""

    def as_function(self) -> dict[str, Any]:
        """How a chat template shows it: a function whose description says how to call it."""
        how = (f'Call it with {{"name": "{self.name}"}} and no arguments, then its input as plain text on the '
               "next lines, not JSON.")
        return {"type": "function", "function": {"name": self.name, "description": f"{self.description}\n{how}".strip(),
                                                 "parameters": {"type": "object", "properties": {}}}}

    def grammar_rule(self) -> str:
        """The Lark right-hand side its input follows."""
        if self.syntax == "lark":
            return "%lark {\n" + self.definition + "\n}"
        if self.syntax == "regex":
            return "/" + self.definition.replace("/", "\\/") + "/"
        return "/(.|\\n)*/"


@dataclass(frozen=True)
class Structure:
    """What a request asks of its answer's form (None / () when nothing)."""

    response_format: Grammar | None = None
    tools: tuple[dict[str, Any], ...] = ()  # as the template reads them: {"type": "function", "function": {...}}
    tool_choice: str = "auto"  # auto, none, required, or a tool's name
    parallel: bool = True
    custom: tuple[CustomTool, ...] = ()  # freeform tools (the Responses API's)

    @property
    def calls_tools(self) -> bool:
        return bool(self.tools or self.custom) and self.tool_choice != "none"

    @property
    def names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools] + [c.name for c in self.custom]

    @property
    def custom_names(self) -> list[str]:
        return [c.name for c in self.custom]

    @property
    def template_tools(self) -> tuple[dict[str, Any], ...]:
        """Every tool as the chat template reads it, custom ones as functions."""
        return self.tools + tuple(c.as_function() for c in self.custom)

    @property
    def notes(self) -> list[str]:
        """What of the given schemas the grammar does not enforce (each checked after)."""
        out = [f"tool {t['function']['name']}: {', '.join(kw)} not enforced while it is written (its calls are "
               "checked after)" for t in self.tools if (kw := served_arguments(t["function"]["parameters"]).unenforced)]
        if self.response_format is not None and self.response_format.unenforced:
            out.append(f"response format: {', '.join(self.response_format.unenforced)} not enforced while it is "
                       "written (the answer is checked after)")
        return out

    def problems(self, text: str, calls: Sequence[ToolCall]) -> list[str]:
        """Where the answer or a call's arguments fail their whole schema (what the grammar
        left out of the constraint)."""
        by_name = {t["function"]["name"]: t["function"]["parameters"] for t in self.tools}
        out = []
        for call in calls:
            if call.custom or call.name not in by_name:
                continue
            try:
                problem = served_arguments(by_name[call.name]).problem(json.loads(call.arguments))
            except ValueError:
                problem = "its arguments are not JSON"
            if problem:
                out.append(f"tool {call.name}: the call does not fit its schema: {problem}")
        fmt = self.response_format
        if fmt is not None and fmt.unenforced and not calls:
            try:
                problem = served(json.loads(fmt.source)).problem(json.loads(text))
            except ValueError:
                problem = None  # cut short: the finish reason says so
            if problem:
                out.append(f"response format: the answer does not fit its schema: {problem}")
        return out


def check_template(template: str | None, rendered_with_tools: str, structure: Structure) -> None:
    """400 unless the model's chat template shows the tools and calls them in a known format."""
    if not structure.tools and not structure.custom:
        return
    if not template:
        raise invalid("tools", "this model has no chat template, so it cannot be given tools", "unsupported_parameter")
    if not all(name in rendered_with_tools for name in structure.names):
        raise invalid("tools", "this model's chat template cannot express tools (it does not render them)",
                      "unsupported_parameter")
    if structure.calls_tools and OPEN not in template:
        raise invalid("tools", f"this model's chat template calls tools in a format specli does not know "
                               f"(it knows {OPEN}...{CLOSE}); use tool_choice none", "unsupported_parameter")


def tool_grammar(structure: Structure, open_token: int, close_token: int) -> Grammar | None:
    """The answer's grammar: text or calls (auto), calls (required), one call of the named
    tool; a function call's JSON is {"name": <a tool>, "arguments": <its parameters>}, a
    custom tool's call its name line and then its input under its own grammar."""
    if not structure.calls_tools:
        return None
    names = structure.names if structure.tool_choice in ("auto", "required") else [structure.tool_choice]
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in structure.tools}
    rules, alternatives = [], []
    functions = [n for n in names if n in by_name]
    for i, n in enumerate(functions):
        # each tool's arguments a root schema of its own, so its "#/$defs/..." pointers hold
        head = json.dumps(json.dumps({"name": n}, ensure_ascii=False)[:-1] + ', "arguments": ')
        arguments = {**served_arguments(by_name[n]).constraint, "x-guidance": lenient_options()}
        rules.append(f'function_call_{i}: <[{open_token}]> "\\n" {head} %json {json.dumps(arguments)} "}}" '
                     f'"\\n" <[{close_token}]>')
        alternatives.append(f"function_call_{i}")
    for i, tool in enumerate(c for c in structure.custom if c.name in names):
        head = json.dumps(json.dumps({"name": tool.name}) + "\n")
        rules.append(f'custom_call_{i}: <[{open_token}]> "\\n" {head} custom_input_{i} "\\n" <[{close_token}]>')
        rules.append(f"custom_input_{i}: {tool.grammar_rule()}")
        alternatives.append(f"custom_call_{i}")
    several = structure.parallel and structure.tool_choice in ("auto", "required")
    # a newline may end the calls: some models (Qwen2.5-Coder) write one after </tool_call>
    # before their end token; where a newline could only start another call, they called on and on
    calls = 'calls: call ("\\n" call)* "\\n"?' if several else 'calls: call "\\n"?'
    start = "start: TEXT | calls\nTEXT: /[^<](.|\\n)*/" if structure.tool_choice == "auto" else "start: calls"
    body = "\n".join([start, calls, "call: " + " | ".join(alternatives), *rules])
    return compile_grammar("lark", body + "\n")


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as the OpenAI API carries it; a custom tool's input text
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")
    custom: bool = False  # a freeform tool's call

    def to_json(self, index: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": "custom", "custom": {"name": self.name, "input": self.arguments}} \
            if self.custom else {"id": self.id, "type": "function",
                                 "function": {"name": self.name, "arguments": self.arguments}}
        if index is not None:
            out["index"] = index
        return out


def parse_calls(text: str, names: Sequence[str], custom: Sequence[str] = ()) -> tuple[str, list[ToolCall]]:
    """(content, calls) of an answer: each `<tool_call>` block naming a known tool with an
    object of arguments is a call, as is a custom tool's name line with the input after
    it; everything else is content."""
    calls: list[ToolCall] = []
    for block in _CALL_RE.findall(text):
        if (call := _custom_call(block, custom)) is not None:
            calls.append(call)
            continue
        try:
            obj = json.loads(block)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("name") in names and isinstance(obj.get("arguments", {}), dict):
            calls.append(ToolCall(obj["name"], json.dumps(obj.get("arguments", {}), ensure_ascii=False)))
    content = _CALL_RE.sub("", text).strip() if calls else text
    return content, calls


def _custom_call(block: str, custom: Sequence[str]) -> ToolCall | None:
    """A custom tool's call: `\n{"name": ...}\n` + input + `\n` (the grammar's form)."""
    if not custom:
        return None
    head, newline, rest = block.lstrip("\n").partition("\n")
    try:
        obj = json.loads(head)
    except ValueError:
        return None
    if not newline or not isinstance(obj, dict) or obj.get("name") not in custom or "arguments" in obj:
        return None
    return ToolCall(obj["name"], rest.removesuffix("\n"), custom=True)


def custom_call_text(name: str, text: str) -> str:
    """A custom tool's earlier call as the model wrote it (for the conversation so far)."""
    return f"{OPEN}\n{json.dumps({'name': name})}\n{text}\n{CLOSE}"


def fenced_calls(text: str, structure: Structure) -> list[ToolCall]:
    """The calls of an answer that is nothing but fenced JSON blocks (or one bare object),
    each {"name": <a given function>, "arguments": <what its parameter schema accepts>};
    [] where any part is not such a call (the answer is then text)."""
    body = text.strip()
    blocks = re.findall(_FENCE, body, re.DOTALL) if _FENCED_ONLY.fullmatch(body) else [body] if body else []
    if not blocks or (len(blocks) > 1 and not structure.parallel):
        return []
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in structure.tools}
    calls = []
    for block in blocks:
        try:
            obj = json.loads(block)
        except ValueError:
            return []
        if not (isinstance(obj, dict) and set(obj) == {"name", "arguments"} and obj["name"] in schemas
                and isinstance(obj["arguments"], dict) and _fits(schemas[obj["name"]], obj["arguments"])):
            return []
        calls.append(ToolCall(obj["name"], json.dumps(obj["arguments"], ensure_ascii=False)))
    return calls


def _fits(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """Whether `arguments` is an instance of `schema` (its grammar's: keys put in the
    schema's order first, since the grammar writes them in that order)."""
    grammar = served_arguments(schema).grammar
    return accepts(grammar, json.dumps(_in_schema_order(arguments, schema), ensure_ascii=False))


def _in_schema_order(value: Any, schema: Any) -> Any:
    """`value` with each object's keys in the order its schema lists them, the rest after."""
    if isinstance(value, dict) and isinstance(schema, dict):
        found = schema.get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        keys = [k for k in props if k in value] + [k for k in value if k not in props]
        return {k: _in_schema_order(value[k], props.get(k)) for k in keys}
    if isinstance(value, list) and isinstance(schema, dict):
        return [_in_schema_order(v, schema.get("items")) for v in value]
    return value


def could_open_fenced(head: str) -> bool:
    """Whether an answer beginning with `head` (stripped) may still be nothing but
    fenced calls: the fence so far, then nothing or the start of {"name"."""
    fence = _FENCE_HEAD.match(head)
    if fence is None and any(f.startswith(head) for f in ("```json\n", "```\n")):
        return True
    rest = re.sub(r"^\{\s*", "{", (head[fence.end():] if fence else head).lstrip())
    return '{"name"'.startswith(rest) or rest.startswith('{"name"')


class CallStream:
    """Splits streamed text into content and finished tool calls: text that may still
    open a call is held back; once it does, nothing is content and each closed block is
    a call. An answer that may be fenced calls is held to its end (`finish`)."""

    def __init__(self, structure: Structure) -> None:
        self.structure = structure
        self.names, self.custom = structure.names, structure.custom_names
        self.text = ""
        self._sent = 0  # characters of `text` let out as content, or consumed as calls
        self.calls: list[ToolCall] = []
        self.in_calls = False
        self.fenced = False  # the answer was fenced calls

    def push(self, delta: str) -> tuple[str, list[ToolCall]]:
        """New content to send, and calls finished by this delta."""
        self.text += delta
        if not self.in_calls:
            head = self.text.lstrip()
            if head.startswith(OPEN):
                self.in_calls = True
            elif OPEN.startswith(head) or (self._sent == 0 and self.structure.tools and could_open_fenced(head)):
                return "", []  # may still open a call
            else:
                out, self._sent = self.text[self._sent:], len(self.text)
                return out, []
        new: list[ToolCall] = []
        while (end := self.text.find(CLOSE, self._sent)) >= 0:
            _, found = parse_calls(self.text[self._sent:end + len(CLOSE)], self.names, self.custom)
            new += found
            self._sent = end + len(CLOSE)
        self.calls += new
        return "", new

    def finish(self) -> tuple[str, list[ToolCall]]:
        """At the answer's end: what was held back, as content, or the calls it is."""
        if self.in_calls or self._sent >= len(self.text):
            return "", []
        held, self._sent = self.text[self._sent:], len(self.text)
        if held == self.text and (found := fenced_calls(held, self.structure)):
            self.fenced = True
            self.calls += found
            return "", found
        return held, []

    def outcome(self, text: str) -> tuple[str, list[ToolCall]]:
        """The whole answer's content and calls (those streamed keep their ids)."""
        if self.fenced:
            return "", list(self.calls)
        content, found = parse_calls(text, self.names, self.custom)
        found[:len(self.calls)] = self.calls
        return content, found
