"""GGUF files other tools keep, found read-only (never copied or changed): LM Studio's
models folder, Ollama's store (names from its manifests), the Hugging Face cache and
llama.cpp's download cache. Each folder can be moved by the variable the tool itself
reads (OLLAMA_MODELS, HF_HUB_CACHE / HF_HOME, LLAMA_CACHE); LM Studio has none, so its
own settings file is read, and SPECLI_LMSTUDIO_MODELS overrides it.

Names: `lmstudio:PUBLISHER/REPO/FILE`, `ollama:MODEL:TAG` (`ollama:NS/MODEL:TAG` outside
the library), `hf:OWNER/REPO/FILE` and `llama.cpp:FILE`, FILE without `.gguf`."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specli.errors import ModelError

GGUF_MAGIC = b"GGUF"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_LIBRARY = "registry.ollama.ai/library/"
PREFIXES = ("lmstudio:", "ollama:", "hf:", "llama.cpp:")


@dataclass(frozen=True)
class FoundModel:
    """A GGUF another tool keeps: its name here, its file, and which tool has it."""

    name: str
    path: Path
    size: int
    where: str  # "LM Studio", "Ollama", "Hugging Face cache", "llama.cpp cache"

    @property
    def short(self) -> str:
        """The name without its tool's prefix (`qwen2.5-coder:1.5b`, `OWNER/REPO/FILE`):
        accepted alone where it names one model."""
        return self.name.split(":", 1)[1]

    @property
    def file_name(self) -> str:
        """The file's own name without `.gguf` (an Ollama model's name:tag): accepted alone too."""
        return self.short if self.name.startswith("ollama:") else self.short.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Problem:
    """Something found that cannot be run: which file, what is wrong, what to do."""

    path: Path
    message: str
    hint: str


def _env_dir(var: str) -> Path | None:
    value = os.environ.get(var)
    return Path(value).expanduser() if value else None


def _cache_home() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg).expanduser() if xdg else Path.home() / ".cache"


def lmstudio_dirs() -> list[Path]:
    """LM Studio's models folders: SPECLI_LMSTUDIO_MODELS, else the `downloadsFolder` of its
    settings, its home's `models` (~/.lmstudio, or where ~/.lmstudio-home-pointer says)
    and the folder of older releases (~/.cache/lm-studio/models)."""
    if (env := _env_dir("SPECLI_LMSTUDIO_MODELS")) is not None:
        return [env]
    home = Path.home() / ".lmstudio"
    pointer = Path.home() / ".lmstudio-home-pointer"
    with contextlib.suppress(OSError):
        home = Path(pointer.read_text(encoding="utf-8").strip()).expanduser() if pointer.is_file() else home
    dirs = [home / "models", _cache_home() / "lm-studio" / "models"]
    try:
        settings = json.loads((home / "settings.json").read_text(encoding="utf-8"))
        folder = settings.get("downloadsFolder") if isinstance(settings, dict) else None
        if isinstance(folder, str) and folder:
            dirs.insert(0, Path(folder).expanduser())
    except (OSError, ValueError):
        pass
    return list(dict.fromkeys(dirs))


def ollama_dir() -> Path:
    """OLLAMA_MODELS, else ~/.ollama/models."""
    return _env_dir("OLLAMA_MODELS") or Path.home() / ".ollama" / "models"


def hf_hub_dir() -> Path:
    """HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if (env := _env_dir("HF_HUB_CACHE")) is not None:
        return env
    home = _env_dir("HF_HOME") or _cache_home() / "huggingface"
    return home / "hub"


def llama_cache_dir() -> Path:
    """LLAMA_CACHE, else ~/.cache/llama.cpp."""
    return _env_dir("LLAMA_CACHE") or _cache_home() / "llama.cpp"


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def _ggufs(root: Path) -> Iterator[Path]:
    """`*.gguf` files under `root` (symbolic links followed, as the HF cache's are), sorted."""
    if not root.is_dir():
        return
    for dirpath, _dirs, files in sorted(os.walk(root, followlinks=True)):
        for name in sorted(files):
            if name.lower().endswith(".gguf") and not name.lower().startswith("mmproj"):
                yield Path(dirpath) / name


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _lmstudio() -> Iterator[FoundModel]:
    for root in lmstudio_dirs():
        for path in _ggufs(root):
            rel = path.relative_to(root).with_suffix("")
            yield FoundModel(f"lmstudio:{rel.as_posix()}", path, _size(path), "LM Studio")


def _hf_cache() -> Iterator[FoundModel]:
    root = hf_hub_dir()
    if not root.is_dir():
        return
    for repo in sorted(root.glob("models--*")):
        owner_repo = repo.name.removeprefix("models--").replace("--", "/")
        snapshots = sorted((repo / "snapshots").glob("*"), key=_mtime, reverse=True)  # newest first
        seen: set[str] = set()
        for snap in snapshots:
            for path in _ggufs(snap):
                rel = path.relative_to(snap).with_suffix("").as_posix()
                if rel not in seen and path.exists():  # a dangling link: a blob not fully downloaded
                    seen.add(rel)
                    yield FoundModel(f"hf:{owner_repo}/{rel}", path, _size(path), "Hugging Face cache")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _llama_cache() -> Iterator[FoundModel]:
    root = llama_cache_dir()
    for path in _ggufs(root):
        if root / "hub" in path.parents or "models--" in path.as_posix():
            continue  # the HF cache layout, when LLAMA_CACHE is the HF cache
        yield FoundModel(f"llama.cpp:{path.relative_to(root).with_suffix('').as_posix()}", path, _size(path),
                         "llama.cpp cache")


def ollama_models(problems: list[Problem]) -> Iterator[FoundModel]:
    """The models of Ollama's store by their manifests; a manifest that cannot be read or
    names a missing or short blob is a Problem, not a model."""
    root = ollama_dir()
    manifests = root / "manifests"
    if not manifests.is_dir():
        return
    for path in sorted(p for p in manifests.rglob("*") if p.is_file()):
        rel = path.relative_to(manifests).as_posix()
        parts = rel.rsplit("/", 1)
        if len(parts) != 2:
            continue
        model, tag = parts
        name = model.removeprefix(OLLAMA_LIBRARY)
        found = _ollama_blob(root, path, f"{name}:{tag}", problems)
        if found is not None:
            blob, size = found
            yield FoundModel(f"ollama:{name}:{tag}", blob, size, "Ollama")


def _ollama_blob(root: Path, manifest: Path, name: str, problems: list[Problem]) -> tuple[Path, int] | None:
    """The model blob a manifest names, checked against its stated size."""
    fix = f"pull the model again with: ollama pull {name}"
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        layer = next(x for x in data["layers"] if x.get("mediaType") == OLLAMA_MODEL_LAYER)
        digest, size = str(layer["digest"]), int(layer["size"])
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        problems.append(Problem(manifest, f"Ollama manifest {manifest} names no model layer",
                                fix))
        return None
    blob = root / "blobs" / digest.replace(":", "-")
    have = _size(blob) if blob.is_file() else -1
    if have < 0:
        problems.append(Problem(manifest, f"Ollama manifest {manifest} names blob {blob.name}, which is missing", fix))
        return None
    if have != size or not _is_gguf(blob):
        what = f"has {have} of {size} bytes" if have != size else "is not a GGUF file"
        problems.append(Problem(manifest, f"Ollama blob {blob} {what}", fix))
        return None
    return blob, size


@dataclass
class Found:
    """Every model found, and what was found broken."""

    models: list[FoundModel]
    problems: list[Problem]


def scan() -> Found:
    """Look in every tool's folder (each missing folder is simply empty)."""
    problems: list[Problem] = []
    models = [*_lmstudio(), *ollama_models(problems), *_hf_cache(), *_llama_cache()]
    return Found(models, problems)


def find(name: str, found: Found | None = None) -> FoundModel | None:
    """The model called `name` (with its tool's prefix, or without one where only one
    model has that name); None where none has it. Raises ModelError where a name is in
    two places, or names a broken Ollama model."""
    found = found or scan()
    exact = [m for m in found.models if m.name == name]
    if exact:
        return exact[0]
    if name.startswith("ollama:"):  # `ollama:qwen2.5` means the tag `latest`, as in Ollama
        bare = name if ":" in name.removeprefix("ollama:") else f"{name}:latest"
        exact = [m for m in found.models if m.name == bare]
        if exact:
            return exact[0]
        _raise_if_broken(bare.removeprefix("ollama:"), found)
        return None
    if name.startswith(PREFIXES):
        return None
    low = name.lower()
    short = [m for m in found.models
             if low in (m.short.lower(), m.file_name.lower()) or m.short == f"{name}:latest"]
    if len(short) > 1:
        places = "; ".join(f"{m.name} ({m.path})" for m in short)
        raise ModelError(f"model name {name} is in {len(short)} places: {places}",
                         "name one of them with its prefix, e.g. " + short[0].name)
    if not short:
        _raise_if_broken(name if ":" in name else f"{name}:latest", found)
    return short[0] if short else None


def _raise_if_broken(ollama_name: str, found: Found) -> None:
    """A name whose Ollama manifest is broken: what is wrong, not 'unknown model'."""
    for p in found.problems:
        if _ollama_name_of(p.path) == ollama_name:
            raise ModelError(p.message, p.hint)


def _ollama_name_of(manifest: Path) -> str:
    """`model:tag` of a manifest's path (for naming a broken one)."""
    parts = manifest.as_posix().split("/manifests/", 1)
    if len(parts) != 2:
        return ""
    model, _, tag = parts[1].rpartition("/")
    return f"{model.removeprefix(OLLAMA_LIBRARY)}:{tag}"
