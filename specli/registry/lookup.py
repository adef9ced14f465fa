"""Finding models: by name (with suggestions), by role, or a name-or-path to a local file."""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specli.errors import ModelError, RegistryError
from specli.registry import local
from specli.registry.schema import ModelSpec, load_registry
from specli.registry.store import human, is_present, model_path
from specli.registry.user import checked_path, load_user_models


def _suggest(name: str, names: list[str]) -> list[str]:
    low = name.lower()
    found = [n for n in names if low and low in n]
    for n in difflib.get_close_matches(low, names, n=3, cutoff=0.5):
        if n not in found:
            found.append(n)
    return found[:3]


def lookup(name: str, registry: Mapping[str, ModelSpec]) -> ModelSpec:
    """The model called `name`; an unknown name suggests close ones."""
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
    """An existing file path as is; else the local file of a pulled registry model, of a
    model the user added (`specli models add`), or of one another tool keeps (LM Studio,
    Ollama, the Hugging Face and llama.cpp caches: `registry.local`)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if _looks_like_path(name_or_path) and not name_or_path.startswith(local.PREFIXES):
        if path.exists():
            raise ModelError(f"not a model file: {name_or_path}", hint="give the path of a .gguf file")
        raise ModelError(f"model file not found: {name_or_path}")
    reg = load_registry() if registry is None else registry
    if name_or_path in reg:
        return _registry_file(reg[name_or_path])
    users = load_user_models()
    if name_or_path in users:
        return checked_path(users[name_or_path])
    found = local.scan()
    model = local.find(name_or_path, found)
    if model is not None:
        return model.path
    names = sorted([*reg, *users, *(m.name for m in found.models)])
    close = _suggest(name_or_path, names)
    hint = f"did you mean: {', '.join(close)}? " if close else ""
    raise RegistryError(f"unknown model: {name_or_path}", hint=f"{hint}see all with: specli models list")


def _registry_file(spec: ModelSpec) -> Path:
    """The file of a registry model, refused where it is not (all) downloaded."""
    local_file = model_path(spec)
    if is_present(spec):
        return local_file
    hint = f"run: specli models pull {spec.name}"
    if local_file.exists():
        try:
            have = local_file.stat().st_size
        except OSError:
            have = 0
        raise RegistryError(
            f"model {spec.name} is incomplete or damaged: {local_file} has {have} of {spec.size} bytes",
            hint=hint,
        )
    raise RegistryError(f"model {spec.name} is not downloaded ({human(spec.size)})", hint=hint)


@dataclasses.dataclass(frozen=True)
class LocalModel:
    """A model file on this machine: its name, file, size and where it was found."""

    name: str
    path: Path
    size: int
    where: str  # "registry", "added", or the tool that keeps it


def local_models(registry: Mapping[str, ModelSpec] | None = None) -> list[LocalModel]:
    """Every model file on this machine specli can name: pulled registry models, the
    user's added ones, and those other tools keep (broken ones left out)."""
    reg = load_registry() if registry is None else registry
    out = [LocalModel(s.name, model_path(s), s.size, "registry") for s in reg.values() if is_present(s)]
    for m in load_user_models().values():
        if m.path.is_file():
            out.append(LocalModel(m.name, m.path, m.size, "added"))
    out += [LocalModel(m.name, m.path, m.size, m.where) for m in local.scan().models]
    return out


def describe(spec: ModelSpec) -> dict[str, Any]:
    """A JSON-ready summary for `models list --json`: the entry, where it lives, whether it is there."""
    out: dict[str, Any] = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "sources"}
    out.update(path=str(model_path(spec)), present=is_present(spec), sources=[s.describe() for s in spec.sources])
    return out
