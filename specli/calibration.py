"""Measure this machine's costs once per model + offload + threads, and cache them:
the target's time to verify a batch of k + 1 tokens (k = 0: a plain step) and the
draft model's time per token."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from specli.types import LanguageModel

CALIBRATION_VERSION = 3  # 2: flash attention off on CPU; 3: F16 verifies in one batch


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specli" / "calibration.json"


def _time_batches(model: LanguageModel, context: Sequence[int], sizes: Sequence[int], reps: int) -> list[float]:
    """Median seconds to decode a batch of each size (logits for every row) on top of `context`."""
    model.rollback(0)
    model.decode(context)
    base = model.n_past
    filler = list(context[1 : 1 + max(sizes)]) or [context[0]] * max(sizes)
    out = []
    for n in sizes:
        times = []
        for _ in range(reps + 1):  # first run warms the output buffer
            t0 = time.perf_counter()
            model.decode(filler[:n], range(n), exact=True)
            times.append(time.perf_counter() - t0)
            model.rollback(base)
        out.append(statistics.median(times[1:]))
    model.rollback(0)
    return out


def measure(target: LanguageModel, draft: LanguageModel | None, context: Sequence[int], k_max: int,
            reps: int = 2) -> dict[str, object]:
    verify = _time_batches(target, context, [k + 1 for k in range(k_max + 1)], reps)
    draft_step = _time_batches(draft, context, [1], reps + 2)[0] if draft is not None else 0.0
    return {"verify": verify, "draft_step": draft_step}


def load_or_measure(key: str, target: LanguageModel, draft: LanguageModel | None, context: Sequence[int],
                    k_max: int, path: Path | None = None) -> dict[str, object]:
    """Cached figures for `key`, measured now if missing or too short."""
    path = path or cache_file()
    try:
        data = json.loads(path.read_text())
        if data.get("version") != CALIBRATION_VERSION:
            data = {}
    except (OSError, ValueError):
        data = {}
    entry = data.get("entries", {}).get(key)
    if entry and len(entry["verify"]) > k_max and (draft is None or entry["draft_step"] > 0):
        return dict(entry)
    entry = measure(target, draft, context, k_max)
    data.setdefault("entries", {})[key] = entry
    data["version"] = CALIBRATION_VERSION
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs a re-measurement next time
    return entry
