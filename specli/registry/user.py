"""The user's own registry: models added by `specli models add NAME PATH`, kept in
`models.yaml` under the user config dir (never the repository's). An entry points at the
file where it is (nothing is copied) with the size and sha256 it had when added; a file
that has changed since is refused with a message, never loaded unnoticed."""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from specli.errors import ModelError, RegistryError
from specli.gguf import validate_gguf
from specli.registry.store import Progress, hash_file

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class UserModel:
    name: str
    path: Path
    size: int
    sha256: str
    added: str = ""


def config_dir() -> Path:
    """$SPECLI_CONFIG_DIR, else $XDG_CONFIG_HOME/specli, else ~/.config/specli."""
    if base := os.environ.get("SPECLI_CONFIG_DIR"):
        return Path(base).expanduser()
    if xdg := os.environ.get("XDG_CONFIG_HOME"):
        return Path(xdg).expanduser() / "specli"
    return Path.home() / ".config" / "specli"


def user_registry_path() -> Path:
    return config_dir() / "models.yaml"


def load_user_models() -> dict[str, UserModel]:
    """The user's models (none where the file is absent); a damaged file is an error
    naming it."""
    where = user_registry_path()
    try:
        data = yaml.safe_load(where.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as exc:
        raise RegistryError(f"cannot read your model registry {where}: {' '.join(str(exc).split())}",
                            "fix or delete that file") from None
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise RegistryError(f"{where}: expected a 'models:' mapping", "fix or delete that file")
    out: dict[str, UserModel] = {}
    for name, entry in models.items():
        try:
            out[str(name)] = UserModel(str(name), Path(entry["path"]), int(entry["size"]), str(entry["sha256"]),
                                       str(entry.get("added", "")))
        except (TypeError, KeyError, ValueError):
            raise RegistryError(f"{where}: entry {name!r} needs path, size and sha256",
                                f"add it again: specli models add {name} PATH") from None
    return out


def checked_path(model: UserModel) -> Path:
    """The file of a user model, refused where it is gone or its size has changed."""
    try:
        size = model.path.stat().st_size
    except OSError:
        raise ModelError(f"model {model.name} was added from {model.path}, which is gone",
                         f"add it again: specli models add {model.name} NEW_PATH") from None
    if size != model.size:
        raise ModelError(f"model {model.name}: {model.path} has changed since it was added "
                         f"({size} bytes, was {model.size})",
                         f"add it again: specli models add {model.name} {model.path}")
    return model.path


def add_model(name: str, path: Path, taken: set[str], progress: Progress | None = None) -> UserModel:
    """Check `path` (a whole GGUF), hash it and record it as `name`. `taken`: names the
    shipped registry has. Nothing is written where any check fails."""
    if not NAME_RE.match(name):
        raise RegistryError(f"bad model name {name!r}", "use lower-case letters, digits, '.', '_' and '-'")
    if name in taken:
        raise RegistryError(f"model name {name} is the shipped registry's", "choose another name")
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ModelError(f"model file not found: {path}", "give the path of a .gguf file")
    summary = validate_gguf(path)  # not GGUF, truncated or damaged: a ModelError naming the file
    digest = hash_file(path, progress, f"hashing {path.name}")
    model = UserModel(name, path, summary.file_size, digest,
                      datetime.datetime.now().astimezone().isoformat(timespec="seconds"))
    models = load_user_models()
    models[name] = model
    _write(models)
    return model


def _write(models: dict[str, UserModel]) -> None:
    where = user_registry_path()
    where.parent.mkdir(parents=True, exist_ok=True)
    body = {"models": {m.name: {"path": str(m.path), "size": m.size, "sha256": m.sha256, "added": m.added}
                       for m in models.values()}}
    tmp = where.with_name(where.name + ".tmp")
    tmp.write_text("# specli's models added by `specli models add NAME PATH`\n" + yaml.safe_dump(body, sort_keys=True),
                   encoding="utf-8")
    os.replace(tmp, where)
