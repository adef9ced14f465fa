"""Bench prompts: prompt files (Spec-Bench / HumanEval JSONL, one prompt a line),
the built-in suites, and the selection by category and limit."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specli.bench.suites import SUITE_NAMES, Prompt, suite
from specli.errors import UsageError

HUMANEVAL_TEMPLATE = (
    "Complete the following Python code. Reply with the complete function in one Python code block.\n\n"
    "```python\n{prompt}```"
)


def _bad_line(source: str, line_no: int, what: str) -> UsageError:
    return UsageError(f"{source} line {line_no}: {what}", "fix or remove that line of the prompt file")


def _str_field(obj: dict[str, Any], key: str, source: str, line_no: int) -> str:
    value = obj[key]
    if not isinstance(value, str) or not value.strip():
        raise _bad_line(source, line_no, f"{key!r} must be a non-empty string")
    return value


def _id_field(obj: dict[str, Any], key: str, source: str, line_no: int) -> str:
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise _bad_line(source, line_no, f"{key!r} must be a string or an integer")
    return str(value)


def _json_prompt(obj: Any, source: str, line_no: int) -> Prompt:
    if not isinstance(obj, dict):
        raise _bad_line(source, line_no, f"expected a JSON object, got {type(obj).__name__}")
    if "turns" in obj:  # Spec-Bench / MT-Bench
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise _bad_line(source, line_no, "'turns' must be a non-empty list of non-empty strings")
        pid = _id_field(obj, "question_id", source, line_no) if "question_id" in obj else f"line-{line_no}"
        category = _str_field(obj, "category", source, line_no) if "category" in obj else "uncategorized"
        return Prompt(pid, category, tuple(turns), source)
    if "prompt" in obj:  # HumanEval (task_id, prompt) or a plain {"prompt": ...}
        text = _str_field(obj, "prompt", source, line_no)
        if "task_id" in obj:
            pid = _id_field(obj, "task_id", source, line_no)
            category = _str_field(obj, "category", source, line_no) if "category" in obj else "humaneval"
            return Prompt(pid, category, (HUMANEVAL_TEMPLATE.format(prompt=text),), source)
        pid = _id_field(obj, "id", source, line_no) if "id" in obj else f"line-{line_no}"
        category = _str_field(obj, "category", source, line_no) if "category" in obj else "text"
        return Prompt(pid, category, (text,), source)
    raise _bad_line(
        source, line_no,
        "expected Spec-Bench fields (question_id, category, turns) or HumanEval fields (task_id, prompt)",
    )


def parse_prompts(text: str, source: str, fmt: str | None = None) -> list[Prompt]:
    """Prompts from the text of a file. `fmt`: "jsonl", "text" or None to detect (a
    first non-blank line starting with `{` means JSONL). JSONL lines are Spec-Bench
    objects (`question_id`, `category`, `turns`) or HumanEval ones (`task_id`,
    `prompt`); a text file holds one prompt a line. Blank lines are skipped."""
    lines = text.splitlines()
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    if not numbered:
        raise UsageError(f"{source}: no prompts in the file")
    if fmt is None:
        fmt = "jsonl" if numbered[0][1].lstrip().startswith("{") else "text"
    if fmt == "text":
        return [Prompt(f"line-{n}", "text", (line.strip(),), source) for n, line in numbered]
    out = []
    for n, line in numbered:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise _bad_line(source, n, f"not valid JSON ({e.msg} at column {e.colno})") from None
        out.append(_json_prompt(obj, source, n))
    return out


def load_prompt_file(path: Path) -> list[Prompt]:
    try:
        data = path.expanduser().read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read the prompt file ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line_no = data[: e.start].count(b"\n") + 1
        raise UsageError(f"{path} line {line_no}: not UTF-8 text (byte {e.start})") from None
    suffix = path.suffix.lower()
    fmt = "jsonl" if suffix in (".jsonl", ".json") else "text" if suffix == ".txt" else None
    return parse_prompts(text, str(path), fmt)


def suite_prompts(name: str) -> list[Prompt]:
    key = name.strip().lower()
    if key not in SUITE_NAMES:
        raise UsageError(f"unknown suite {name!r}", "one of " + ", ".join(SUITE_NAMES))
    return suite(key)


def split_list(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").replace(";", ",").split(",") if p.strip()]


def select_prompts(prompts: Sequence[Prompt], categories: Sequence[str] = (), limit: int | None = None) -> list[Prompt]:
    """Keep the categories named (all when empty), then at most `limit` prompts per
    category, taken round-robin over the categories so that they stay balanced."""
    present = list(dict.fromkeys(p.category for p in prompts))
    chosen = list(prompts)
    if categories:
        unknown = [c for c in categories if c not in present]
        if unknown:
            raise UsageError(
                f"no prompts in categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}",
                "available: " + ", ".join(present),
            )
        wanted = set(categories)
        chosen = [p for p in chosen if p.category in wanted]
    if limit is None:
        return chosen
    if limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    by_cat: dict[str, list[Prompt]] = {}
    for p in chosen:
        by_cat.setdefault(p.category, []).append(p)
    out = []
    for i in range(limit):
        for items in by_cat.values():
            if i < len(items):
                out.append(items[i])
    return out


def split_warm(prompts: Sequence[Prompt], how: str, categories: Sequence[str] = (),
               limit: int | None = None) -> tuple[list[Prompt], list[Prompt]]:
    """(warm, measured) prompts for `--warm-history HOW`; `prompts` is the whole loaded
    set. `split`: the selection (categories, limit) halved per category in file order,
    the first half (n // 2) warm, the rest measured. `others`: the selection measured,
    warm on at most `limit` prompts of each category not named (none named: refused)."""
    if how == "split":
        pool = select_prompts(prompts, categories, limit)
        by_cat: dict[str, list[Prompt]] = {}
        for p in pool:
            by_cat.setdefault(p.category, []).append(p)
        small = next((c for c, items in by_cat.items() if len(items) < 2), None)
        if small is not None:
            raise UsageError(f"--warm-history split: category {small!r} has 1 prompt, a split needs 2 or more",
                             "raise --limit, or leave that category out with --categories")
        warm_ids = {id(p) for items in by_cat.values() for p in items[: len(items) // 2]}
        return [p for p in pool if id(p) in warm_ids], [p for p in pool if id(p) not in warm_ids]
    if how == "others":
        if not categories:
            raise UsageError("--warm-history others needs --categories: those are measured, the rest warm the history")
        measured = select_prompts(prompts, categories, limit)
        rest = [p for p in prompts if p.category not in set(categories)]
        if not rest:
            raise UsageError("--warm-history others: no other category to warm from", "name fewer --categories")
        return select_prompts(rest, (), limit), measured
    raise UsageError(f"--warm-history must be split or others, got {how!r}")
