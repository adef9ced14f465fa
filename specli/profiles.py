"""Settings and profiles: one table of defaults, YAML profiles layered on top.

Precedence, lowest first: the defaults in `Settings` < a profile (which may
`extends:` another, recursively) < command-line overrides. Every value is
validated against the metadata on its `Settings` field; every problem raises
`ProfileError` with a one-line message naming the file (or "command line"),
the key and what was expected.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from specli.errors import ProfileError
from specli.types import SamplingParams

DRAFTERS = ("draft", "ngram", "hybrid", "auto", "none")
VERIFY_MODES = ("batch", "exact")
FLASH_ATTN = ("auto", "on", "off")
KV_TYPES = ("auto", "f16", "q8_0", "q4_0", "f32")
NEEDS_DRAFT_MODEL = ("draft", "hybrid")

DEFAULT_PROFILE = "default"
CLI_SOURCE = "command line"
DEFAULTS_SOURCE = "defaults"
# allowed in profile files, not settings: key -> what its value must be
META_KEYS = {"description": "a string", "extends": "a profile name or path"}
MAX_EXTENDS_DEPTH = 32

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")
_TRUE_WORDS = ("true", "yes", "on", "1")
_FALSE_WORDS = ("false", "no", "off", "0")


# --------------------------------------------------------------------------- specs


class _Bad(Exception):
    """A value does not fit its spec; the caller words the message."""


def _num(x: float) -> str:
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


@dataclass(frozen=True)
class Spec:
    """How one setting is typed, checked and documented."""

    kind: str  # int | float | str | bool | choice | strs | floats
    doc: str = ""
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    nullable: bool = False
    null_words: tuple[str, ...] = ()  # strings that also mean null, e.g. "none"
    choices: tuple[str, ...] = ()
    aliases: tuple[tuple[Any, str], ...] = ()  # e.g. YAML's bare `on` -> True -> "on"

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
        else:
            base = self.kind
        if self.nullable:
            base += " or " + "/".join((*self.null_words, "null"))
        return base

    # -- checking

    def check(self, value: Any, from_cli: bool = False) -> Any:
        """Return the normalised value or raise `_Bad`. `from_cli` also accepts
        strings for numbers, booleans and lists (`"4"`, `"yes"`, `"3,1"`)."""
        if value is None:
            if self.nullable:
                return None
            raise _Bad
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

    def _check_int(self, value: Any, from_cli: bool) -> int:
        if from_cli and isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise _Bad from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad
        if not self._in_range(value):
            raise _Bad
        return int(value)

    def _check_float(self, value: Any, from_cli: bool) -> float:
        if from_cli and isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise _Bad from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Bad
        try:
            x = float(value)
        except OverflowError:
            raise _Bad from None
        if not math.isfinite(x) or not self._in_range(x):
            raise _Bad
        return x

    def _check_str(self, value: Any, from_cli: bool) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _Bad
        return value

    def _check_bool(self, value: Any, from_cli: bool) -> bool:
        if from_cli and isinstance(value, str):
            word = value.strip().lower()
            if word in _TRUE_WORDS:
                return True
            if word in _FALSE_WORDS:
                return False
        if not isinstance(value, bool):
            raise _Bad
        return value

    def _check_choice(self, value: Any, from_cli: bool) -> str:
        if not isinstance(value, str):
            raise _Bad
        word = value.strip().lower()
        if word not in self.choices:
            raise _Bad
        return word

    def _check_strs(self, value: Any, from_cli: bool) -> tuple[str, ...]:
        if isinstance(value, str):
            return (value,) if value else ()
        if not isinstance(value, (list, tuple)):
            raise _Bad
        if not all(isinstance(s, str) and s for s in value):
            raise _Bad
        return tuple(value)

    def _check_floats(self, value: Any, from_cli: bool) -> tuple[float, ...]:
        if isinstance(value, str):  # "3,1" from a flag or a YAML scalar
            try:
                value = [float(part) for part in value.split(",")]
            except ValueError:
                raise _Bad from None
        if not isinstance(value, (list, tuple)) or not value:
            raise _Bad
        out = []
        for x in value:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise _Bad
            try:
                f = float(x)
            except OverflowError:
                raise _Bad from None
            if not math.isfinite(f) or f < 0:
                raise _Bad
            out.append(f)
        if sum(out) <= 0:
            raise _Bad
        return tuple(out)


def _setting(default: Any, spec: Spec) -> Any:
    return field(default=default, metadata={"spec": spec})


def _int(
    default: int | None,
    lo: int | None = None,
    hi: int | None = None,
    *,
    doc: str,
    nullable: bool = False,
    null_words: tuple[str, ...] = (),
) -> Any:
    return _setting(default, Spec("int", doc, lo, hi, nullable=nullable, null_words=null_words))


def _float(
    default: float,
    lo: float | None = None,
    hi: float | None = None,
    *,
    doc: str,
    lo_open: bool = False,
    hi_open: bool = False,
) -> Any:
    return _setting(default, Spec("float", doc, lo, hi, lo_open, hi_open))


def _str(default: str | None, *, doc: str, nullable: bool = False, null_words: tuple[str, ...] = ()) -> Any:
    return _setting(default, Spec("str", doc, nullable=nullable, null_words=null_words))


def _choice(
    default: str, choices: tuple[str, ...], *, doc: str, aliases: tuple[tuple[Any, str], ...] = ()
) -> Any:
    return _setting(default, Spec("choice", doc, choices=choices, aliases=aliases))


def _bool(default: bool, *, doc: str) -> Any:
    return _setting(default, Spec("bool", doc))


# ------------------------------------------------------------------------ settings


_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
_DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m"


@dataclass(frozen=True)
class Settings:
    """Every tunable of a run. Add a setting here (one line) and it is validated,
    accepted in profiles, shown by `profiles show` and documented."""

    # models
    target: str = _str(_TARGET, doc="target model: registry name or GGUF path")
    draft: str | None = _str(_DRAFT, nullable=True, null_words=("none",), doc="draft model; none = no model")
    # drafting
    drafter: str = _choice("draft", DRAFTERS, doc="who drafts: model, n-gram lookup, both, auto or none")
    draft_max: int = _int(4, 0, 64, doc="most tokens drafted per step")
    verify: str = _choice(
        "batch", VERIFY_MODES,
        doc="batch: the whole draft in one target batch (greedy output equals the target's except at "
            "floating-point near-ties); exact: chunks bit-identical to one-token decoding (slower)",
    )
    draft_min: int = _int(0, 0, 64, doc="fewest tokens drafted per step (<= draft_max)")
    p_min: float = _float(0.0, 0.0, 1.0, doc="stop drafting below this draft-model top probability")
    ngram_min: int = _int(3, 1, 16, doc="shortest n-gram the n-gram drafter matches")
    ngram_max: int = _int(12, 1, 16, doc="longest n-gram the n-gram drafter matches (>= ngram_min)")
    # sampling
    temperature: float = _float(0.0, 0.0, 5.0, doc="sampling temperature; 0 = greedy")
    top_k: int = _int(0, 0, doc="keep the k most likely tokens; 0 = off")
    top_p: float = _float(1.0, 0.0, 1.0, lo_open=True, doc="nucleus sampling mass; 1 = off")
    min_p: float = _float(0.0, 0.0, 1.0, hi_open=True, doc="drop tokens below min_p x top prob; 0 = off")
    seed: int | None = _int(None, 0, nullable=True, doc="sampling seed; null = random")
    # generation
    max_tokens: int = _int(256, 1, doc="most tokens generated per reply")
    stop: tuple[str, ...] = _setting((), Spec("strs", "stop strings: a string or a list of strings"))
    system: str | None = _str(None, nullable=True, doc="system prompt; null = the model's default")
    raw: bool = _bool(False, doc="send the prompt as-is, without the chat template")
    # runtime
    ctx: int = _int(4096, 64, 1_048_576, doc="context window in tokens")
    n_batch: int = _int(512, 1, doc="prompt-processing batch size")
    threads: int | None = _int(
        None, 1, nullable=True, null_words=("auto",), doc="CPU threads; auto/null = let llama.cpp choose"
    )
    n_gpu_layers: int = _int(0, -1, doc="target layers offloaded to the GPU; -1 = all")
    draft_n_gpu_layers: int = _int(0, -1, doc="draft-model layers offloaded to the GPU; -1 = all")
    main_gpu: int = _int(0, 0, doc="GPU index used for the model")
    tensor_split: tuple[float, ...] | None = _setting(
        None, Spec("floats", "share of the model per GPU, e.g. [3, 1]; null = even", nullable=True)
    )
    flash_attn: str = _choice(
        "auto", FLASH_ATTN, aliases=((True, "on"), (False, "off")), doc="flash attention: auto (llama.cpp decides: on where supported), on or off"
    )
    kv_type: str = _choice("auto", KV_TYPES, doc="KV-cache element type; auto = f16, or q8_0 for verify: exact on CPU")

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            seed=self.seed,
        )


SPECS: dict[str, Spec] = {f.name: f.metadata["spec"] for f in fields(Settings)}
SETTING_NAMES: tuple[str, ...] = tuple(SPECS)


class FieldInfo(NamedTuple):
    name: str
    type: str
    default: str
    help: str


def _yaml_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(_yaml_text(v) for v in value) + "]"
    return str(value)


def describe_fields() -> list[FieldInfo]:
    """(name, type text, default as YAML text, help) for every setting."""
    return [
        FieldInfo(f.name, SPECS[f.name].type_text(), _yaml_text(f.default), SPECS[f.name].doc)
        for f in fields(Settings)
    ]


def settings_to_dict(s: Settings) -> dict[str, Any]:
    """JSON-friendly dict of every setting, in declaration order (tuples -> lists)."""
    out: dict[str, Any] = {}
    for f in fields(Settings):
        value = getattr(s, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


# ---------------------------------------------------------------------- locations


def shipped_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "profiles"


def user_dir() -> Path:
    base = os.environ.get("SPECLI_CONFIG_DIR")
    if base:
        return Path(base).expanduser() / "profiles"
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg:
        return Path(xdg).expanduser() / "specli" / "profiles"
    return Path.home() / ".config" / "specli" / "profiles"


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    path: Path
    origin: str  # "shipped" | "user"
    description: str
    error: str = ""  # set when the file cannot be read as a profile


def _dirs() -> list[tuple[str, Path]]:
    return [("user", user_dir()), ("shipped", shipped_dir())]


def _files_in(directory: Path) -> dict[str, Path]:
    """name -> file for every profile in `directory` (.yaml wins over .yml)."""
    out: dict[str, Path] = {}
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return out
    for suffix in (".yml", ".yaml"):
        for p in entries:
            if p.suffix == suffix and _NAME_RE.match(p.stem) and p.is_file():
                out[p.stem] = p
    return out


def list_profiles() -> list[ProfileInfo]:
    """Every profile by name; a user profile shadows a shipped one of the same name."""
    found: dict[str, ProfileInfo] = {}
    for origin, directory in _dirs():
        for name, path in _files_in(directory).items():
            if name in found:
                continue
            description, error = "", ""
            try:
                raw = _read_mapping(path)
                desc = _meta(raw, "description")
                if isinstance(desc, str):
                    description = " ".join(desc.split())
            except ProfileError as e:
                error = e.message
            found[name] = ProfileInfo(name, path, origin, description, error)
    return [found[n] for n in sorted(found)]


def _looks_like_path(s: str) -> bool:
    return "/" in s or os.sep in s or s.endswith((".yaml", ".yml"))


def _candidates(name: str) -> list[Path]:
    out = []
    for _origin, directory in _dirs():
        for suffix in (".yaml", ".yml"):
            p = directory / (name + suffix)
            if p.is_file():
                out.append(p)
                break
    return out


def _unknown_profile(name: str) -> ProfileError:
    names = sorted({n for _o, d in _dirs() for n in _files_in(d)})
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    msg = f"unknown profile {name!r}"
    if close:
        msg += " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
    msg += "; available: " + (", ".join(names) if names else "none")
    return ProfileError(msg, hint=f"profiles live in {user_dir()} and {shipped_dir()}")


def _check_path(raw: str, what: str) -> Path:
    if not raw or "\0" in raw:
        raise ProfileError(f"{what}: expected a profile name or a path to a .yaml file, got {raw!r}")
    return Path(raw).expanduser()


def find_profile(name_or_path: str) -> Path:
    """A path (contains `/` or ends in .yaml/.yml) must exist; a name is looked up
    in `user_dir()` then `shipped_dir()`."""
    if not isinstance(name_or_path, str):
        raise ProfileError(f"profile: expected a name or path, got {_show(name_or_path)}")
    if _looks_like_path(name_or_path):
        path = _check_path(name_or_path, "profile")
        if not path.is_file():
            raise ProfileError(f"{path}: profile file not found")
        return path
    if not _NAME_RE.match(name_or_path):
        raise _unknown_profile(name_or_path)
    found = _candidates(name_or_path)
    if not found:
        raise _unknown_profile(name_or_path)
    return found[0]


# ------------------------------------------------------------------------ reading


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of keeping the last one."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: the base class words that error
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
        return super().construct_mapping(node, deep=deep)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _show(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _read_mapping(path: Path) -> dict[Any, Any]:
    """The top-level mapping of a YAML file; an empty file is an empty mapping."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ProfileError(f"{path}: cannot read profile: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ProfileError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path} line {mark.line + 1}" if mark is not None else str(path)
        problem = e.problem or e.context or "invalid YAML"
        raise ProfileError(f"{where}: YAML syntax error: {_one_line(problem)}") from None
    except yaml.YAMLError as e:
        raise ProfileError(f"{path}: YAML syntax error: {_one_line(str(e))}") from None
    except RecursionError:
        raise ProfileError(f"{path}: YAML nested too deeply") from None
    except Exception as e:  # e.g. ValueError for a timestamp like 2020-13-45
        raise ProfileError(f"{path}: cannot read YAML: {_one_line(str(e))}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ProfileError(
            f"{path}: expected a mapping of settings (key: value lines) at the top level, "
            f"got {type(doc).__name__}"
        )
    return doc


def _norm(key: str) -> str:
    return key.strip().replace("-", "_")


def _meta(raw: Mapping[Any, Any], name: str) -> Any:
    for key, value in raw.items():
        if isinstance(key, str) and _norm(key) == name:
            return value
    return None


# --------------------------------------------------------------------- validation

# Where each value came from: (rank, source, key label). Higher rank wins.
_Origin = tuple[int, str, str]
_RANK_DEFAULTS = 0
_RANK_CLI = 1_000_000


def _key_label(source: str, key: str, name: str) -> str:
    return f"--{name.replace('_', '-')}" if source == CLI_SOURCE else f"key {key!r}"


def _unknown_key(source: str, key: str, allow_meta: bool) -> ProfileError:
    pool = list(SETTING_NAMES) + (list(META_KEYS) if allow_meta else [])
    close = difflib.get_close_matches(_norm(key), pool, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ProfileError(f"{source}: unknown key {key!r}{hint}")


def _validate(
    raw: Mapping[Any, Any], source: str, rank: int, *, allow_meta: bool, from_cli: bool, skip_none: bool
) -> tuple[dict[str, Any], dict[str, _Origin]]:
    values: dict[str, Any] = {}
    origins: dict[str, _Origin] = {}
    spelled: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ProfileError(f"{source}: key {_show(key)}: expected a setting name (a string)")
        name = _norm(key)
        if name in spelled:
            raise ProfileError(f"{source}: key {key!r} repeats key {spelled[name]!r}")
        spelled[name] = key
        if allow_meta and name in META_KEYS:
            if value is not None and not isinstance(value, str):
                raise ProfileError(f"{source}: key {key!r}: expected {META_KEYS[name]}, got {_show(value)}")
            continue
        spec = SPECS.get(name)
        if spec is None:
            raise _unknown_key(source, key, allow_meta)
        if skip_none and value is None:
            continue
        label = _key_label(source, key, name)
        try:
            values[name] = spec.check(value, from_cli=from_cli)
        except _Bad:
            raise ProfileError(f"{source}: {label}: expected {spec.expected()}, got {_show(value)}") from None
        origins[name] = (rank, source, label)
    return values, origins


def _extends_target(value: Any, path: Path) -> Path:
    what = f"{path}: key 'extends'"
    if not isinstance(value, str) or not value.strip():
        raise ProfileError(f"{what}: expected a profile name or path, got {_show(value)}")
    value = value.strip()
    if _looks_like_path(value):
        target = _check_path(value, what)
        if not target.is_absolute():
            target = path.parent / target
        if not target.is_file():
            raise ProfileError(f"{what}: profile file {str(target)!r} not found")
        return target
    # A name: the first profile of that name that is not this file, so that a user
    # `default.yaml` can say `extends: default` to build on the shipped one.
    if _NAME_RE.match(value):
        for candidate in _candidates(value):
            if candidate.resolve() != path.resolve():
                return candidate
        if not _candidates(value):
            err = _unknown_profile(value)
            raise ProfileError(f"{what}: {err.message}", err.hint)
        return path  # only itself: reported as a cycle
    err = _unknown_profile(value)
    raise ProfileError(f"{what}: {err.message}", err.hint)


def _load(path: Path, chain: tuple[Path, ...]) -> tuple[dict[str, Any], dict[str, _Origin]]:
    path = path.resolve()
    if path in chain:
        names = " -> ".join(p.name for p in (*chain[chain.index(path) :], path))
        raise ProfileError(f"{chain[-1]}: key 'extends': cycle {names}")
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise ProfileError(f"{path}: 'extends' chain longer than {MAX_EXTENDS_DEPTH} profiles")
    raw = _read_mapping(path)
    own, own_origins = _validate(
        raw, str(path), _RANK_CLI - 1 - len(chain), allow_meta=True, from_cli=False, skip_none=False
    )
    parent = _meta(raw, "extends")
    if parent is None:
        return own, own_origins
    values, origins = _load(_extends_target(parent, path), (*chain, path))
    values.update(own)
    origins.update(own_origins)
    return values, origins


def load_profile(name_or_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The validated settings a profile sets (its `extends` chain merged, child keys
    winning), keyed by setting name. Cross-field checks happen in `resolve_settings`."""
    path = Path(name_or_path) if isinstance(name_or_path, os.PathLike) else find_profile(name_or_path)
    if not path.is_file():
        raise ProfileError(f"{path}: profile file not found")
    return _load(path, ())[0]


# --------------------------------------------------------------------- resolution


def _cross_check(values: Mapping[str, Any], origins: Mapping[str, _Origin]) -> None:
    def origin(name: str) -> _Origin:
        return origins.get(name, (_RANK_DEFAULTS, DEFAULTS_SOURCE, name))

    def blame(a: str, b: str) -> tuple[_Origin, str, str]:
        """The key set by the later layer is at fault; describe the other one."""
        oa, ob = origin(a), origin(b)
        culprit, other, o_other = (oa, b, ob) if oa[0] >= ob[0] else (ob, a, oa)
        where = "" if o_other[1] == culprit[1] else f" from {o_other[1]}"
        return culprit, other, where

    for lo, hi in (("draft_min", "draft_max"), ("ngram_min", "ngram_max")):
        if values[lo] > values[hi]:
            (rank, source, label), other, where = blame(lo, hi)
            if other == hi:
                raise ProfileError(
                    f"{source}: {label}: expected a value <= {hi} ({values[hi]}{where}), got {values[lo]}"
                )
            raise ProfileError(
                f"{source}: {label}: expected a value >= {lo} ({values[lo]}{where}), got {values[hi]}"
            )

    if values["drafter"] in NEEDS_DRAFT_MODEL and values["draft"] is None:
        (rank, source, label), other, where = blame("drafter", "draft")
        if other == "draft":
            ok = ", ".join(d for d in DRAFTERS if d not in NEEDS_DRAFT_MODEL)
            raise ProfileError(
                f"{source}: {label}: expected a drafter that needs no draft "
                f"model ({ok}) since draft is none{where}, "
                f"got {values['drafter']!r}"
            )
        raise ProfileError(
            f"{source}: {label}: expected a draft model name or path "
            f"(drafter {values['drafter']!r}{where} needs one), got none"
        )


def _build(layers: Iterable[tuple[dict[str, Any], dict[str, _Origin]]]) -> Settings:
    values: dict[str, Any] = {f.name: f.default for f in fields(Settings)}
    origins: dict[str, _Origin] = {}
    for v, o in layers:
        values.update(v)
        origins.update(o)
    _cross_check(values, origins)
    return Settings(**values)


def resolve_settings(
    profile: str | os.PathLike[str] | None = None, overrides: Mapping[str, Any] | None = None
) -> Settings:
    """defaults < profile < overrides (keys whose value is not None).

    With `profile=None` the `default` profile is used when one exists (a user
    `default.yaml` shadows the shipped one); otherwise only the defaults."""
    layers = []
    if profile is None:
        found = _candidates(DEFAULT_PROFILE)
        if found:
            layers.append(_load(found[0], ()))
    else:
        path = Path(profile) if isinstance(profile, os.PathLike) else find_profile(profile)
        if not path.is_file():
            raise ProfileError(f"{path}: profile file not found")
        layers.append(_load(path, ()))
    if overrides:
        layers.append(
            _validate(overrides, CLI_SOURCE, _RANK_CLI, allow_meta=False, from_cli=True, skip_none=True)
        )
    return _build(layers)


def validate_file(path: str | os.PathLike[str]) -> Settings:
    """The settings a profile file gives on top of the defaults, fully checked."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ProfileError(f"{p}: profile file not found")
    return _build([_load(p, ())])


__all__ = [
    "DRAFTERS",
    "FLASH_ATTN",
    "KV_TYPES",
    "SETTING_NAMES",
    "SPECS",
    "FieldInfo",
    "ProfileInfo",
    "Settings",
    "Spec",
    "describe_fields",
    "find_profile",
    "list_profiles",
    "load_profile",
    "resolve_settings",
    "settings_to_dict",
    "shipped_dir",
    "user_dir",
    "validate_file",
]
