"""Resolving settings: defaults < a profile (and what it `extends:`) < command-line
overrides, every value checked against the table, every problem one `ProfileError`
naming the file (or "command line"), the key and what was expected."""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from specli.errors import ProfileError
from specli.profiles.files import (
    DEFAULT_PROFILE,
    PROFILE_NAME_RE,
    candidates,
    check_path,
    looks_like_path,
    meta_value,
    profile_path,
    read_mapping,
    unknown_profile,
)
from specli.profiles.settings import (
    DRAFTERS,
    NEEDS_DRAFT_MODEL,
    SETTING_NAMES,
    SPECS,
    Settings,
    normalize_key,
    setting_name,
)
from specli.profiles.spec import Bad, show_value

CLI_SOURCE = "command line"
DEFAULTS_SOURCE = "defaults"
# allowed in profile files, not settings: key -> what its value must be
META_KEYS = {"description": "a string", "extends": "a profile name or path"}
MAX_EXTENDS_DEPTH = 32


class DeprecatedKey(UserWarning):
    """A profile or override uses a setting's old name (it still works)."""


# Where each value came from: (rank, source, key label). Higher rank wins.
_Origin = tuple[int, str, str]
_RANK_DEFAULTS = 0
_RANK_CLI = 1_000_000


def _key_label(source: str, key: str, name: str) -> str:
    return f"--{name.replace('_', '-')}" if source == CLI_SOURCE else f"key {key!r}"


def _unknown_key(source: str, key: str, allow_meta: bool) -> ProfileError:
    pool = list(SETTING_NAMES) + (list(META_KEYS) if allow_meta else [])
    close = difflib.get_close_matches(normalize_key(key), pool, n=1, cutoff=0.6)
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
            raise ProfileError(f"{source}: key {show_value(key)}: expected a setting name (a string)")
        name = setting_name(key)
        if name != normalize_key(key):
            warnings.warn(DeprecatedKey(f"{source}: key {key!r} is deprecated: rename it {name!r}"), stacklevel=2)
        if name in spelled:
            raise ProfileError(f"{source}: key {key!r} repeats key {spelled[name]!r}")
        spelled[name] = key
        if allow_meta and name in META_KEYS:
            if value is not None and not isinstance(value, str):
                raise ProfileError(f"{source}: key {key!r}: expected {META_KEYS[name]}, got {show_value(value)}")
            continue
        spec = SPECS.get(name)
        if spec is None:
            raise _unknown_key(source, key, allow_meta)
        if skip_none and value is None:
            continue
        label = _key_label(source, key, name)
        try:
            values[name] = spec.check(value, from_cli=from_cli)
        except Bad as e:
            why = f": {e}" if str(e) else ""
            raise ProfileError(f"{source}: {label}: expected {spec.expected()}, got {show_value(value)}{why}") from None
        origins[name] = (rank, source, label)
    return values, origins


def _extends_target(value: Any, path: Path) -> Path:
    what = f"{path}: key 'extends'"
    if not isinstance(value, str) or not value.strip():
        raise ProfileError(f"{what}: expected a profile name or path, got {show_value(value)}")
    value = value.strip()
    if looks_like_path(value):
        target = check_path(value, what)
        if not target.is_absolute():
            target = path.parent / target
        if not target.is_file():
            raise ProfileError(f"{what}: profile file {str(target)!r} not found")
        return target
    # A name: the first profile of that name that is not this file, so that a user
    # `default.yaml` can say `extends: default` to build on the shipped one.
    if PROFILE_NAME_RE.match(value):
        for candidate in candidates(value):
            if candidate.resolve() != path.resolve():
                return candidate
        if not candidates(value):
            err = unknown_profile(value)
            raise ProfileError(f"{what}: {err.message}", err.hint)
        return path  # only itself: reported as a cycle
    err = unknown_profile(value)
    raise ProfileError(f"{what}: {err.message}", err.hint)


def _load(path: Path, chain: tuple[Path, ...]) -> tuple[dict[str, Any], dict[str, _Origin]]:
    path = path.resolve()
    if path in chain:
        names = " -> ".join(p.name for p in (*chain[chain.index(path) :], path))
        raise ProfileError(f"{chain[-1]}: key 'extends': cycle {names}")
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise ProfileError(f"{path}: 'extends' chain longer than {MAX_EXTENDS_DEPTH} profiles")
    raw = read_mapping(path)
    own, own_origins = _validate(
        raw, str(path), _RANK_CLI - 1 - len(chain), allow_meta=True, from_cli=False, skip_none=False
    )
    parent = meta_value(raw, "extends")
    if parent is None:
        return own, own_origins
    values, origins = _load(_extends_target(parent, path), (*chain, path))
    values.update(own)
    origins.update(own_origins)
    return values, origins


def load_profile(name_or_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The validated settings a profile sets (its `extends` chain merged, child keys
    winning), keyed by setting name. Cross-field checks happen in `resolve_settings`."""
    return _load(profile_path(name_or_path), ())[0]


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

    # like llama.cpp's --rpc: servers hold only layers that are offloaded
    for servers, layers in (("rpc", "n_gpu_layers"), ("draft_rpc", "draft_n_gpu_layers")):
        if values[servers] and values[layers] == 0:
            (rank, source, label), other, where = blame(servers, layers)
            raise ProfileError(
                f"{source}: {label}: {servers} {','.join(values[servers])} is set but {layers} is 0{where}, "
                f"so nothing would run on the servers",
                f"give --{layers.replace('_', '-')} -1 (all layers) or a layer count; {layers} in a profile",
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
        found = candidates(DEFAULT_PROFILE)
        if found:
            layers.append(_load(found[0], ()))
    else:
        layers.append(_load(profile_path(profile), ()))
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
