"""`specli bench summarize`: Markdown tables from `specli bench --json` files, one view
at a time.

- `category`: decode speedup per file, measured category and mode (median, min-max),
  with how the history was warmed (`--warm-history`), a mark where the median is under
  BOUND, and the speedup modelled from what the generations did: their plain steps and
  every verify batch priced with the calibrated batch costs in the JSON's `costs`,
  pooled over the row. Timed speedups of single generations swing by +-10 % on a busy
  machine; the modelled one is free of timing noise, but blind to costs outside
  llama.cpp (lookups, Python: the bench's host split shows those) and meant for
  one-batch verification (not --exact). Rows where the draft model drafted show none:
  its tokens are not counted in the JSON.
- `repeat`: decode speedup per file, mode, category (and all) and repeat: with history
  on, the first repeat is cold and later ones draft from the mode's own earlier outputs.
- `file`: one row per file, e.g. the runs of benchmarks/bench_rpc.sh: the baseline's decode
  speed and time per forward, and one mode's decode speedup, draft length, acceptance
  and time per forward, on the same prompts.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from specli.drafters.auto.costs import interpolate
from specli.errors import UsageError

VIEWS = ("category", "repeat", "file")
# issue #14's bound for auto with the history warm from other categories: a store of
# unrelated text must not cost more than timing noise
BOUND = 0.97

Doc = dict[str, Any]


def load(path: Path) -> Doc:
    """A `specli bench --json` document; UsageError when it is not one."""
    try:
        doc = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"{path} is not JSON: {e}", "give files written by `specli bench --json`") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise UsageError(f"{path} has no bench records", "give files written by `specli bench --json`")
    return doc


def span(x: Sequence[float]) -> str:
    """Median (min-max) of speedups."""
    return f"{statistics.median(x):.2f}x ({min(x):.2f}-{max(x):.2f})"


def modelled_steps(record: dict[str, Any], sizes: list[int], ratios: list[float]) -> float:
    """The record's decode cost in plain steps: drafted_by_pos[i] steps drafted more than i tokens."""
    by_pos = record["drafted_by_pos"] or []
    steps = record["n_target_forwards"] - (by_pos[0] if by_pos else 0)
    for k in range(1, len(by_pos) + 1):
        exactly_k = by_pos[k - 1] - (by_pos[k] if k < len(by_pos) else 0)
        steps += exactly_k * interpolate(sizes, ratios, k + 1)
    return steps


def _modelled(cell: list[float] | None, priced: bool) -> str:
    """The pooled modelled speedup: (drafter tokens / modelled steps) / (baseline tokens / steps)."""
    if not (cell and cell[1] and cell[3] and priced):
        return "-"
    return f"{(cell[0] / cell[1]) / (cell[2] / cell[3]):.3f}x"


def _history(warm: dict[str, Any], mode: str) -> str:
    if mode not in warm.get("modes", []):
        return "cold"
    return (f"warm ({warm['how']}): {warm['generations_run']}/{warm['generations']} generations of "
            f"{warm['n_prompts']} prompts")


def category_rows(name: str, doc: Doc) -> Iterable[str]:
    """The `category` view's rows of one file."""
    records = doc["records"]
    costs = doc.get("costs")
    base = {(r["prompt_index"], r["repeat"], r["turn"]): r for r in records if r["kind"] == "baseline"}
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    pooled: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    unpriced: set[tuple[str, str]] = set()  # cells where the draft model drafted
    for r in records:
        if r["kind"] != "drafter" or r["decode_speedup"] is None:
            continue
        key = (r["category"], r["mode"])
        cells[key].append(r["decode_speedup"])
        b = base.get((r["prompt_index"], r["repeat"], r["turn"]))
        if "draft" in r["drafter_steps"]:
            unpriced.add(key)
        elif costs and b is not None and r["n_target_forwards"] and b["n_target_forwards"]:
            p = pooled[key]
            p[0] += r["n_step_tokens"]
            p[1] += modelled_steps(r, costs["sizes"], costs["ratios"])
            p[2] += b["n_step_tokens"]
            p[3] += b["n_target_forwards"]
    warm = doc.get("warm_history") or {}
    for (category, mode), x in cells.items():
        flag = f" **< {BOUND}**" if statistics.median(x) < BOUND else ""
        modelled = _modelled(pooled.get((category, mode)), (category, mode) not in unpriced)
        yield (f"| {name} | {category} | {mode} | {len(x)} | {span(x)}{flag} | {modelled} "
               f"| {_history(warm, mode)} |")


def by_category(docs: Sequence[tuple[str, Doc]]) -> list[str]:
    lines = ["| file | category | mode | n | decode speedup median (min-max) | modelled, pooled | history |",
             "|---|---|---|---:|---:|---:|---|"]
    for name, doc in docs:
        lines += category_rows(name, doc)
    return lines


def by_repeat(docs: Sequence[tuple[str, Doc]]) -> list[str]:
    cells: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    for name, doc in docs:
        for r in doc["records"]:
            if r["kind"] in ("baseline", "peer-baseline") or r["decode_speedup"] is None:
                continue
            for category in (r["category"], "all"):
                cells[(name, r["mode"], category, r["repeat"])].append(r["decode_speedup"])
    repeats = sorted({k[3] for k in cells})
    lines = ["| file | mode | category | " + " | ".join(f"repeat {i + 1}" for i in repeats) + " |",
             "|---|---|---|" + "---:|" * len(repeats)]
    for name, mode, category in dict.fromkeys(k[:3] for k in cells):
        shown = [span(x) if (x := cells.get((name, mode, category, i))) else "-" for i in repeats]
        lines.append(f"| {name} | {mode} | {category} | " + " | ".join(shown) + " |")
    return lines


def _median(values: Iterable[float | None]) -> float | None:
    x = [v for v in values if v is not None]
    return statistics.median(x) if x else None


def _pooled(records: list[dict[str, Any]], num: str, den: str) -> float:
    d = sum(r[den] for r in records)
    return sum(r[num] for r in records) / d if d else 0.0


def _cell(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def file_row(name: str, doc: Doc, mode: str) -> str:
    """The `file` view's row of one file: its baseline against `mode`."""
    base = [r for r in doc["records"] if r["kind"] == "baseline"]
    ours = [r for r in doc["records"] if r["mode"] == mode]
    cells = [
        _cell(_median(r["decode_tokens_per_second"] for r in base), ".1f"),
        _cell(_median(r["ms_per_target_forward"] for r in base), ".0f"),
        _cell(_median(r["decode_speedup"] for r in ours), ".2f", "x"),
        f"{_pooled(ours, 'n_drafted', 'n_target_forwards'):.1f}",
        f"{_pooled(ours, 'n_accepted', 'n_drafted'):.2f}",
        f"{_pooled(ours, 'n_step_tokens', 'n_target_forwards'):.2f}",
        _cell(_median(r["ms_per_target_forward"] for r in ours), ".0f"),
    ]
    return f"| {name} | " + " | ".join(cells) + " |"


def by_file(docs: Sequence[tuple[str, Doc]], mode: str) -> list[str]:
    lines = [f"| file | baseline decode tok/s | baseline ms/forward | {mode} decode speedup | {mode} drafted/forward "
             f"| acceptance | tokens/forward | {mode} ms/forward |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    return lines + [file_row(name, doc, mode) for name, doc in docs]


def summarize(paths: Sequence[Path], by: str = "category", mode: str = "auto") -> str:
    """The table of view `by` over the bench JSON files `paths`, as Markdown."""
    if by not in VIEWS:
        raise UsageError(f"unknown view {by!r}", f"choose one of {', '.join(VIEWS)}")
    docs = [(Path(p).stem, load(p)) for p in paths]
    if by == "repeat":
        lines = by_repeat(docs)
    elif by == "file":
        lines = by_file(docs, mode)
    else:
        lines = by_category(docs)
    return "\n".join(lines) + "\n"
