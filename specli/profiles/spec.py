"""How one setting is typed, checked and worded in error messages and docs."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specli.rpc_endpoints import BadEndpoint, parse_endpoints

_TRUE_WORDS = ("true", "yes", "on", "1")
_FALSE_WORDS = ("false", "no", "off", "0")


class Bad(Exception):
    """A value does not fit its spec; the caller words the message (with the reason,
    when there is one)."""


def show_value(value: Any) -> str:
    """A value as error messages quote it: `'hot' (str)`, `null`."""
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _num(x: float) -> str:
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


@dataclass(frozen=True)
class Spec:
    """How one setting is typed, checked and documented."""

    kind: str  # int | float | str | bool | choice | strs | floats | endpoints
    doc: str = ""
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    nullable: bool = False
    null_words: tuple[str, ...] = ()  # strings that also mean null, e.g. "none"
    choices: tuple[str, ...] = ()
    aliases: tuple[tuple[Any, str], ...] = ()  # e.g. YAML's bare `on` -> True -> "on"
    reload: bool = False  # a change needs the models loaded again

    # -- wording

    def _range(self, compact: bool) -> str:
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None and compact:
            if self.kind == "int":
                return f" {_num(lo)}..{_num(hi)}"
            left = "(" if self.lo_open else "["
            right = ")" if self.hi_open else "]"
            return f" {left}{_num(lo)}, {_num(hi)}{right}"
        parts = []
        if lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {_num(lo)}")
        if hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {_num(hi)}")
        return (" " + " and ".join(parts)) if parts else ""

    def _null_text(self) -> str:
        words = "/".join((*self.null_words, "null")) if self.null_words else "null"
        return f", or {words}" if self.nullable else ""

    def expected(self) -> str:
        """What a valid value looks like, as used in error messages."""
        if self.kind == "int":
            base = "an integer" + self._range(compact=False)
        elif self.kind == "float":
            base = "a number" + self._range(compact=False)
        elif self.kind == "str":
            base = "a non-empty string"
        elif self.kind == "bool":
            base = "true or false"
        elif self.kind == "choice":
            base = "one of " + ", ".join(self.choices)
        elif self.kind == "strs":
            base = "a string or a list of strings"
        elif self.kind == "floats":
            base = "a list of numbers >= 0, not all 0"
        elif self.kind == "endpoints":
            base = "HOST:PORT or a comma-separated list of them (e.g. 192.168.1.20:50052)"
        else:  # pragma: no cover - programming error
            raise AssertionError(self.kind)
        return base + self._null_text()

    def type_text(self) -> str:
        """Compact type for docs: `int 0..64`, `float (0, 1]`, `str or null`."""
        if self.kind in ("int", "float"):
            base = self.kind + self._range(compact=True)
        elif self.kind == "choice":
            base = "|".join(self.choices)
        elif self.kind == "strs":
            base = "list[str]"
        elif self.kind == "floats":
            base = "list[float]"
        elif self.kind == "endpoints":
            base = "list[host:port]"
        else:
            base = self.kind
        if self.nullable:
            base += " or " + "/".join((*self.null_words, "null"))
        return base

    # -- checking

    def check(self, value: Any, from_cli: bool = False) -> Any:
        """Return the normalised value or raise `Bad`. `from_cli` also accepts
        strings for numbers, booleans and lists (`"4"`, `"yes"`, `"3,1"`)."""
        if value is None:
            if self.nullable:
                return None
            raise Bad
        if self.null_words and isinstance(value, str) and value.strip().lower() in self.null_words:
            return None
        for alias, target in self.aliases:
            if type(value) is type(alias) and value == alias:
                return target
        checker = getattr(self, "_check_" + self.kind)
        return checker(value, from_cli)

    def _in_range(self, x: float) -> bool:
        if self.lo is not None and (x <= self.lo if self.lo_open else x < self.lo):
            return False
        return not (self.hi is not None and (x >= self.hi if self.hi_open else x > self.hi))

    @staticmethod
    def _parsed(value: Any, from_cli: bool, parse: Callable[[str], Any]) -> Any:
        """From the command line, a string is parsed (`"4"` -> 4); anything else stays."""
        if not (from_cli and isinstance(value, str)):
            return value
        try:
            return parse(value.strip())
        except ValueError:
            raise Bad from None

    @staticmethod
    def _finite(value: Any) -> float:
        """`value` as a finite float; a bool is not a number."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Bad
        try:
            x = float(value)
        except OverflowError:
            raise Bad from None
        if not math.isfinite(x):
            raise Bad
        return x

    def _check_int(self, value: Any, from_cli: bool) -> int:
        value = self._parsed(value, from_cli, int)
        if isinstance(value, bool) or not isinstance(value, int) or not self._in_range(value):
            raise Bad
        return int(value)

    def _check_float(self, value: Any, from_cli: bool) -> float:
        x = self._finite(self._parsed(value, from_cli, float))
        if not self._in_range(x):
            raise Bad
        return x

    def _check_str(self, value: Any, from_cli: bool) -> str:
        if not isinstance(value, str) or not value.strip():
            raise Bad
        return value

    def _check_bool(self, value: Any, from_cli: bool) -> bool:
        if from_cli and isinstance(value, str):
            word = value.strip().lower()
            if word in _TRUE_WORDS:
                return True
            if word in _FALSE_WORDS:
                return False
        if not isinstance(value, bool):
            raise Bad
        return value

    def _check_choice(self, value: Any, from_cli: bool) -> str:
        if not isinstance(value, str):
            raise Bad
        word = value.strip().lower()
        if word not in self.choices:
            raise Bad
        return word

    def _check_strs(self, value: Any, from_cli: bool) -> tuple[str, ...]:
        if isinstance(value, str):
            return (value,) if value else ()
        if not isinstance(value, (list, tuple)):
            raise Bad
        if not all(isinstance(s, str) and s for s in value):
            raise Bad
        return tuple(value)

    def _check_floats(self, value: Any, from_cli: bool) -> tuple[float, ...]:
        if isinstance(value, str):  # "3,1" from a flag or a YAML scalar
            value = [self._parsed(part, True, float) for part in value.split(",")]
        if not isinstance(value, (list, tuple)) or not value:
            raise Bad
        out = tuple(self._finite(x) for x in value)
        if any(f < 0 for f in out) or sum(out) <= 0:
            raise Bad
        return out

    def _check_endpoints(self, value: Any, from_cli: bool) -> tuple[str, ...]:
        if not isinstance(value, (str, list, tuple)) or not all(isinstance(v, str) for v in value):
            raise Bad
        try:
            return tuple(str(ep) for ep in parse_endpoints(value))
        except BadEndpoint as e:
            raise Bad(str(e)) from None
