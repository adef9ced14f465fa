"""A client's JSON Schemas as the server takes them: a tool's parameters, a lenient
response format.

Agents, MCP servers and SDKs put whatever JSON Schema their authors wrote into `tools`
(`propertyNames`, `if` / `then`, `dependentSchemas`, formats, ...), and llguidance does
not implement every keyword. Refusing them broke Claude Code 2.1.197 at its first
request; llama-server serves them. So a schema is first checked as JSON Schema against
its draft's metaschema (a 400 where it is not one), then compiled leniently: what the
grammar engine cannot enforce is left out of the constraint and named, and the instance
the model writes (a call's arguments, a lenient format's answer) is checked after
against the whole schema by `jsonschema`, a failure named in the response's notes.
`strict: true` formats keep refusing what cannot be enforced (tools.schema_grammar).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema.exceptions
import referencing.exceptions

from specli.engine.grammar import JSON_OPTIONS, Grammar, compile_grammar
from specli.errors import UsageError

ANY_OBJECT: dict[str, Any] = {"type": "object"}
_DRAFT = jsonschema.Draft202012Validator  # a schema without "$schema" is read as the newest draft


class NotASchema(ValueError):
    """The value is not JSON Schema at all (its draft's metaschema refuses it)."""


@dataclass(frozen=True)
class Served:
    """A client's schema as it is served: `constraint` is what the grammar enforces (the
    schema itself, or any object where the engine cannot compile it), `unenforced` names
    what it leaves out."""

    schema: dict[str, Any]
    constraint: dict[str, Any]
    grammar: Grammar
    unenforced: tuple[str, ...]
    validator: Any  # jsonschema's, of the schema's own draft

    def problem(self, instance: Any) -> str | None:
        """Why `instance` fails the whole schema (its first error), or None where it fits
        or where the schema cannot be checked here (a reference to another document)."""
        if not self.unenforced:
            return None  # the grammar enforced all of it
        try:
            error = jsonschema.exceptions.best_match(self.validator.iter_errors(instance))
        except (referencing.exceptions.Unresolvable, jsonschema.exceptions.SchemaError, re.error):
            return None  # a reference to another document, a pattern Python's re cannot read
        return None if error is None else _placed(error)


def _placed(error: jsonschema.exceptions._Error) -> str:
    """A jsonschema error's message and where it is (a path into the instance or schema)."""
    at = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message}{f' (at {at})' if at else ''}"


def served(schema: dict[str, Any]) -> Served:
    """`schema` served leniently; NotASchema (naming the problem) where it is not JSON Schema."""
    return _served(json.dumps(schema), False)  # key order kept: the grammar writes keys in it


def served_arguments(schema: dict[str, Any]) -> Served:
    """A tool's parameter schema served leniently: its calls' arguments are always an
    object (a root without a type is one; a root of another type is not enforced)."""
    return _served(json.dumps(schema), True)


@functools.lru_cache(maxsize=512)
def _served(text: str, arguments: bool) -> Served:
    schema = json.loads(text)
    try:
        validator = _validator(schema)
    except jsonschema.exceptions.SchemaError as e:
        raise NotASchema(f"it is not a JSON Schema: {_placed(e)}") from None
    constraint, dropped = _without_patterns_it_cannot_read(schema)
    if arguments:
        kind = constraint.get("type", "object")
        if kind != "object" and not (isinstance(kind, list) and "object" in kind):
            return _any_object(schema, validator, f"a call's arguments are an object, its root's type is "
                                                  f"{json.dumps(kind)}")
        constraint["type"] = "object"
    try:
        grammar = compile_grammar("json_schema", json.dumps(constraint), lenient=True)
        return Served(schema, constraint, grammar, tuple(dropped) + grammar.unenforced, validator)
    except UsageError as e:  # valid JSON Schema the engine cannot compile: a remote $ref, an unsatisfiable one
        return _any_object(schema, validator, e.message.removeprefix("the JSON schema is invalid: "))


def _any_object(schema: dict[str, Any], validator: Any, reason: str) -> Served:
    return Served(schema, ANY_OBJECT, compile_grammar("json_schema", json.dumps(ANY_OBJECT)),
                  (f"the whole schema ({reason})",), validator)


_DATA_KEYS = frozenset({"const", "enum", "default", "examples"})  # values, not schemas


def _without_patterns_it_cannot_read(schema: Any) -> tuple[Any, list[str]]:
    """`schema` less each `pattern` the grammar engine's regex dialect cannot read (ECMA
    look-around and back-references), and those patterns named."""
    dropped: list[str] = []

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str) and not _readable(value):
                dropped.append(f"pattern {json.dumps(value)}")
            else:
                out[key] = value if key in _DATA_KEYS else walk(value)
        return out

    return walk(schema), list(dict.fromkeys(dropped))


@functools.lru_cache(maxsize=1024)
def _readable(pattern: str) -> bool:
    try:
        compile_grammar("json_schema", json.dumps({"type": "string", "pattern": pattern}), lenient=True)
    except UsageError:
        return False
    return True


def _validator(schema: dict[str, Any]) -> Any:
    """A validator of the schema's own draft, its schema checked (SchemaError; run once
    per schema, under _served's cache)."""
    cls = jsonschema.validators.validator_for(schema, default=_DRAFT)
    # the metaschema without format checks: an ECMA pattern Python's re cannot read
    # (\p{Letter}) is still a pattern
    error = jsonschema.exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if error is not None:
        raise jsonschema.exceptions.SchemaError.create_from(error)
    return cls(schema)


def lenient_options() -> dict[str, Any]:
    """x-guidance for a schema embedded in a Lark grammar (a tool call's arguments)."""
    return {**JSON_OPTIONS, "lenient": True}
