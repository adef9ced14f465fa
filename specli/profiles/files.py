"""Profile files: where they live, listing them, finding one by name, reading its YAML."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specli.errors import ProfileError
from specli.profiles.settings import normalize_key
from specli.profiles.spec import show_value

DEFAULT_PROFILE = "default"
# a profile's name: its file name without .yaml, and what `--write-profile` accepts
PROFILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")


def shipped_dir() -> Path:
    """The profiles that come with specli: `profiles/` at the repository root."""
    return Path(__file__).resolve().parents[2] / "profiles"


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
            if p.suffix == suffix and PROFILE_NAME_RE.match(p.stem) and p.is_file():
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
                raw = read_mapping(path)
                desc = meta_value(raw, "description")
                if isinstance(desc, str):
                    description = " ".join(desc.split())
            except ProfileError as e:
                error = e.message
            found[name] = ProfileInfo(name, path, origin, description, error)
    return [found[n] for n in sorted(found)]


def looks_like_path(s: str) -> bool:
    """A profile given as a path rather than a name."""
    return "/" in s or os.sep in s or s.endswith((".yaml", ".yml"))


def candidates(name: str) -> list[Path]:
    """The files of profile `name`, the user's before the shipped one."""
    out = []
    for _origin, directory in _dirs():
        for suffix in (".yaml", ".yml"):
            p = directory / (name + suffix)
            if p.is_file():
                out.append(p)
                break
    return out


def unknown_profile(name: str) -> ProfileError:
    """The error for a profile name that no file has, with close names and all names."""
    names = sorted({n for _o, d in _dirs() for n in _files_in(d)})
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    msg = f"unknown profile {name!r}"
    if close:
        msg += " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
    msg += "; available: " + (", ".join(names) if names else "none")
    return ProfileError(msg, hint=f"profiles live in {user_dir()} and {shipped_dir()}")


def check_path(raw: str, what: str) -> Path:
    """A profile path as given, refused when empty or holding NUL; `~` expanded."""
    if not raw or "\0" in raw:
        raise ProfileError(f"{what}: expected a profile name or a path to a .yaml file, got {raw!r}")
    return Path(raw).expanduser()


def find_profile(name_or_path: str) -> Path:
    """A path (contains `/` or ends in .yaml/.yml) must exist; a name is looked up
    in `user_dir()` then `shipped_dir()`."""
    if not isinstance(name_or_path, str):
        raise ProfileError(f"profile: expected a name or path, got {show_value(name_or_path)}")
    if looks_like_path(name_or_path):
        path = check_path(name_or_path, "profile")
        if not path.is_file():
            raise ProfileError(f"{path}: profile file not found")
        return path
    if not PROFILE_NAME_RE.match(name_or_path):
        raise unknown_profile(name_or_path)
    found = candidates(name_or_path)
    if not found:
        raise unknown_profile(name_or_path)
    return found[0]


def profile_path(name_or_path: str | os.PathLike[str]) -> Path:
    """The file of a profile given by name or path (a `Path` is taken as-is); it must exist."""
    path = Path(name_or_path) if isinstance(name_or_path, os.PathLike) else find_profile(name_or_path)
    if not path.is_file():
        raise ProfileError(f"{path}: profile file not found")
    return path


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


def read_mapping(path: Path) -> dict[Any, Any]:
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


def meta_value(raw: Mapping[Any, Any], name: str) -> Any:
    """The value of meta key `name` (`description`, `extends`) in a profile's mapping."""
    for key, value in raw.items():
        if isinstance(key, str) and normalize_key(key) == name:
            return value
    return None
