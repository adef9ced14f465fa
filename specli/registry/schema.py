"""What models.yaml may say: the ModelSpec record, and reading and validating the file."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specli.errors import RegistryError
from specli.registry.sources import DerivedSource, HfSource, PathSource, PypiSource, Source
from specli.registry.store import SHA_RE


@dataclass(frozen=True)
class ModelSpec:
    name: str
    role: str
    family: str
    description: str
    size: int
    sha256: str
    has_chat_template: bool
    sources: tuple[Source, ...]
    context_length: int | None = None


_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_ROLE_RE = re.compile(r"^[a-z][a-z0-9-]*$")
_RANGE_RE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_UNIQUE_ROLES = ("default-target", "default-draft")
_ENTRY_REQUIRED = ("role", "family", "description", "size", "sha256", "has_chat_template", "sources")
_ENTRY_OPTIONAL = ("context_length",)


def default_registry_path() -> Path:
    """models.yaml at the repository root (specli/registry/ is two levels below it)."""
    return Path(__file__).resolve().parents[2] / "models.yaml"


def load_registry(path: Path | None = None) -> dict[str, ModelSpec]:
    """Read and validate a registry file; default `models.yaml` at the repository root."""
    where = Path(path) if path is not None else default_registry_path()
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RegistryError(f"model registry not found: {where}") from None
    except OSError as exc:
        raise RegistryError(f"cannot read model registry {where}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())
        raise RegistryError(f"{where}: invalid YAML: {first}") from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise RegistryError(f"{where}: expected a mapping with a 'models:' mapping of name -> entry")
    extra = sorted(str(k) for k in data if k != "models")
    if extra:
        raise RegistryError(f"{where}: unknown top-level key(s): {', '.join(extra)}")
    models: dict[str, ModelSpec] = {}
    for name, entry in data["models"].items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise RegistryError(
                f"{where}: bad model name {name!r}: use lower-case letters, digits, '.', '_', '-'"
            )
        models[name] = _parse_entry(f"{where}: models.{name}", name, entry)
    _check_cross_refs(str(where), models)
    return models


def _fail(where: str, msg: str) -> RegistryError:
    return RegistryError(f"{where}: {msg}")


def _check_keys(
    where: str, obj: Any, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _fail(where, f"expected a mapping, got {type(obj).__name__}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise _fail(where, f"missing key(s): {', '.join(missing)}")
    unknown = sorted(str(k) for k in obj if k not in required and k not in optional)
    if unknown:
        allowed = ", ".join(required + optional)
        raise _fail(where, f"unknown key(s): {', '.join(unknown)} (allowed: {allowed})")
    return obj


def _str(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        hint = " (quote it)" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
        raise _fail(where, f"expected a non-empty string, got {value!r}{hint}")
    return value.strip()


def _int(where: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise _fail(where, f"expected a positive integer, got {value!r}")
    return value


def _parse_entry(where: str, name: str, entry: Any) -> ModelSpec:
    e = _check_keys(where, entry, _ENTRY_REQUIRED, _ENTRY_OPTIONAL)
    role = _str(f"{where}.role", e["role"])
    if not _ROLE_RE.match(role):
        raise _fail(f"{where}.role", f"bad role {role!r}: lower-case words joined by '-'")
    sha = _str(f"{where}.sha256", e["sha256"]).lower()
    if not SHA_RE.match(sha):
        raise _fail(f"{where}.sha256", "expected 64 hex digits")
    if not isinstance(e["has_chat_template"], bool):
        raise _fail(f"{where}.has_chat_template", f"expected true or false, got {e['has_chat_template']!r}")
    ctx = e.get("context_length")
    raw_sources = e["sources"]
    if not isinstance(raw_sources, list) or not raw_sources:
        raise _fail(f"{where}.sources", "expected a non-empty list of sources")
    sources = tuple(_parse_source(f"{where}.sources[{i}]", raw) for i, raw in enumerate(raw_sources))
    return ModelSpec(
        name=name,
        role=role,
        family=_str(f"{where}.family", e["family"]),
        description=_str(f"{where}.description", e["description"]),
        size=_int(f"{where}.size", e["size"]),
        sha256=sha,
        has_chat_template=e["has_chat_template"],
        sources=sources,
        context_length=None if ctx is None else _int(f"{where}.context_length", ctx),
    )


def _expand(where: str, value: Any) -> list[str]:
    """A list of strings, or one string with at most one ``{A..B}`` range (bash-like:
    ``{01..22}`` keeps the zero padding)."""
    if isinstance(value, list):
        if not value:
            raise _fail(where, "expected at least one item")
        return [_str(f"{where}[{i}]", v) for i, v in enumerate(value)]
    text = _str(where, value)
    ranges = list(_RANGE_RE.finditer(text))
    if not ranges:
        return [text]
    if len(ranges) > 1:
        raise _fail(where, f"at most one {{A..B}} range per string: {text!r}")
    m = ranges[0]
    a, b = m.group(1), m.group(2)
    lo, hi = int(a), int(b)
    if lo > hi:
        raise _fail(where, f"range {m.group(0)} runs backwards")
    padded = (len(a) > 1 and a.startswith("0")) or (len(b) > 1 and b.startswith("0"))
    width = max(len(a), len(b)) if padded else 0
    return [f"{text[: m.start()]}{i:0{width}d}{text[m.end() :]}" for i in range(lo, hi + 1)]


def _parse_pypi(where: str, body: Any) -> PypiSource:
    b = _check_keys(where, body, ("packages", "version", "members"))
    packages = _expand(f"{where}.packages", b["packages"])
    members = _expand(f"{where}.members", b["members"])
    if len(members) != len(packages):
        raise _fail(
            where, f"{len(packages)} package(s) but {len(members)} member(s): give one member per package"
        )
    return PypiSource(tuple(packages), _str(f"{where}.version", b["version"]), tuple(members))


def _parse_hf(where: str, body: Any) -> HfSource:
    b = _check_keys(where, body, ("repo", "file"), ("revision",))
    rev = b.get("revision")
    return HfSource(
        _str(f"{where}.repo", b["repo"]),
        _str(f"{where}.file", b["file"]),
        None if rev is None else _str(f"{where}.revision", rev),
    )


def _parse_path(where: str, body: Any) -> PathSource:
    return PathSource(_str(where, body))


def _parse_derived(where: str, body: Any) -> DerivedSource:
    b = _check_keys(where, body, ("from", "quantize"))
    qtype = _str(f"{where}.quantize", b["quantize"]).lower()
    if not re.match(r"^[a-z0-9_]+$", qtype):
        raise _fail(f"{where}.quantize", f"bad quantization type {qtype!r}")
    return DerivedSource(_str(f"{where}.from", b["from"]), qtype)


_SOURCE_PARSERS: dict[str, Callable[[str, Any], Source]] = {
    "pypi": _parse_pypi,
    "hf": _parse_hf,
    "path": _parse_path,
    "derived": _parse_derived,
}


def _parse_source(where: str, raw: Any) -> Source:
    """One ``{kind: body}`` item of an entry's sources list."""
    if not isinstance(raw, dict) or len(raw) != 1 or next(iter(raw)) not in _SOURCE_PARSERS:
        raise _fail(where, f"expected a mapping with exactly one of: {', '.join(_SOURCE_PARSERS)}")
    kind, body = next(iter(raw.items()))
    return _SOURCE_PARSERS[kind](f"{where}.{kind}", body)


def _check_cross_refs(where: str, models: Mapping[str, ModelSpec]) -> None:
    for role in _UNIQUE_ROLES:
        holders = [m.name for m in models.values() if m.role == role]
        if len(holders) > 1:
            raise _fail(where, f"role {role} is given to more than one model: {', '.join(holders)}")
    for spec in models.values():
        for i, src in enumerate(spec.sources):
            if not isinstance(src, DerivedSource):
                continue
            if src.base not in models:
                raise _fail(
                    f"{where}: models.{spec.name}.sources[{i}].derived.from",
                    f"unknown model {src.base!r}",
                )
            # follow derived chains; a cycle would make pull recurse forever
            seen = [spec.name]
            todo = [src.base]
            while todo:
                cur = todo.pop()
                if cur in seen:
                    raise _fail(where, f"derived sources form a cycle: {' -> '.join(seen + [cur])}")
                seen.append(cur)
                todo.extend(
                    s.base for s in models[cur].sources if isinstance(s, DerivedSource) and s.base in models
                )
