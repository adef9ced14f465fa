"""`--write-profile`: the fastest drafting mode without a mismatch, written as a
profile that extends the one benchmarked, with the measured figures as comments."""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from specli import profiles
from specli.bench.modes import BASELINE
from specli.bench.plan import Plan
from specli.bench.records import Row
from specli.bench.report import _f, _speed
from specli.errors import ProfileError, UsageError


def best_mode(plan: Plan, rows: Sequence[Row]) -> Row | None:
    """The drafter mode with the highest median speedup and no mismatch."""
    candidates = [
        r for r in rows
        if r.category == "all" and r.mode != BASELINE and r.speedup_median is not None
        and r.mismatches == 0 and not next(m for m in plan.modes if m.name == r.mode).peer
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda r: r.speedup_median or 0.0)


def _extends(profile: str | None) -> str | None:
    if profile is None:
        try:
            profiles.find_profile(profiles.DEFAULT_PROFILE)
        except ProfileError:
            return None
        return profiles.DEFAULT_PROFILE
    if "/" in profile or os.sep in profile or profile.endswith((".yaml", ".yml")):
        return str(Path(profile).expanduser().resolve())
    return profile


def profile_text(plan: Plan, rows: Sequence[Row], best: Row, name: str) -> str:
    """YAML of a profile that `extends:` the one benchmarked and sets the best mode's
    settings, with the measured figures as comments."""
    mode = next(m for m in plan.modes if m.name == best.mode)
    s = plan.settings[mode.name]
    keys = ["drafter", *(k for k, _ in mode.options)]
    keys += [k for k, v in plan.opts.overrides.items() if v is not None and k not in keys]
    data: dict[str, Any] = {}
    for k in dict.fromkeys(keys):
        v = getattr(s, k)
        data[k] = list(v) if isinstance(v, tuple) else v
    base_row = next((r for r in rows if r.mode == BASELINE and r.category == "all"), None)
    overall = [r for r in rows if r.category == "all" and r.mode != BASELINE]
    cats = ", ".join(dict.fromkeys(p.category for p in plan.prompts))
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    lines = [
        f"# Written by `specli bench --write-profile {name}` on {now}.",
        f"# Fastest of {len(overall)} mode(s): {best.mode}",
        f"#   median speedup {best.speedup_median:.2f}x (min {best.speedup_min:.2f}x, "
        f"max {best.speedup_max:.2f}x) over the baseline",
        f"#   {_f(best.tokens_per_second, '.1f')} tok/s vs "
        f"{_f(base_row.tokens_per_second if base_row else None, '.1f')} baseline (medians); "
        f"acceptance {_f(best.acceptance_rate, '.2f')}; mean accepted length "
        f"{_f(best.mean_accepted_length, '.2f')}",
        f"# Measured on {len(plan.prompts)} prompt(s) ({cats}), max_tokens {plan.base.max_tokens}, "
        f"repeat {plan.opts.repeat}, temperature {plan.base.temperature:g}, {os.cpu_count()} CPU(s).",
        "# Every mode tried (median speedup):",
    ]
    lines += [f"#   {r.mode}: {_speed(r.speedup_median)}"
              f"{'  (MISMATCH)' if r.mismatches else ''}" for r in overall]
    meta: dict[str, Any] = {"description": f"tuned by specli bench: {best.mode} "
                                           f"({best.speedup_median:.2f}x median speedup)"}
    parent = _extends(plan.opts.profile)
    if parent is not None:
        meta["extends"] = parent
    body = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    body += "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def write_profile(plan: Plan, rows: Sequence[Row], best: Row, name: str) -> Path:
    directory = profiles.user_dir()
    path = directory / f"{name}.yaml"
    profile = plan.opts.profile
    if profile is not None:
        with contextlib.suppress(ProfileError):
            if profiles.find_profile(profile).resolve() == path.resolve():
                raise UsageError(f"--write-profile {name}: would overwrite the profile it extends ({path})",
                                 "choose another name")
    text = profile_text(plan, rows, best, name)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        raise UsageError(f"cannot write profile {path}: {e.strerror or e}") from None
    try:
        profiles.validate_file(path)
    except ProfileError:
        path.unlink(missing_ok=True)
        raise
    return path
