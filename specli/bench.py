"""`specli bench`: speed and losslessness of drafting modes on a set of prompts.

How a run is measured:
- the models are loaded once (the draft model only if some mode needs it);
- one warm-up generation runs first and is not recorded;
- generations are interleaved per prompt and repeat (baseline, mode A, mode B,
  baseline, A, B, ...) so that drift of the machine (thermal, background load) hits
  every mode alike;
- before every generation both KV caches are cleared, so every mode pays its own
  prefill; only the later turns of one `--turns all` conversation reuse the cache,
  as a chat would;
- at temperature 0 every mode's token ids are compared with the baseline's for the
  same prompt, repeat and turn (the lossless check).

The pure parts (prompt files, mode and sweep strings, aggregation, the lossless
comparison, formatting) take and return plain data and are tested without models.
Nothing here imports Typer; models are only touched inside `execute`.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import importlib.metadata
import io
import itertools
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from specli import metrics, profiles
from specli.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, ProfileError, SpecliError, Terminated, UsageError
from specli.metrics import Counters
from specli.profiles import Settings
from specli.suites import SUITE_NAMES, Prompt, suite
from specli.verify import MarginRecorder

SCHEMA_VERSION = 1
EXIT_LOSSLESS = 9
BASELINE = "baseline"
PEERS = ("llama-cpp-python", "llama.cpp")
LLAMA_CPP = "llama.cpp"
LLAMA_CPP_BASELINE = "peer:llama.cpp"  # llama.cpp's plain decoding: its peers' baseline
DEFAULT_MODES = "baseline,draft,ngram"
MAX_SWEEP_MODES = 256
WARMUP_TOKENS = 16

DEFINITIONS = """\
tok/s       generated tokens / wall time from the request to the last token (prefill included).
speedup     mode tok/s / baseline tok/s on the same prompt, repeat and turn; a row shows the
            median of those ratios and their min-max spread.
accept      acceptance rate = accepted draft tokens / drafted tokens (pooled over the row).
tau         mean accepted length = tokens emitted per target forward pass after the prefill,
            bonus/correction token included (plain decoding: 1.00).
acc@pos     acceptance by position: P(draft token i accepted | it was drafted), i = 1, 2, ...
TTFT        time to first token (prefill and first sample), median over the row.
split       share of wall time in prefill / drafting / verifying (target forward passes) / other.
overhead    python overhead = share of wall time spent outside llama.cpp decode calls.
lossless    at temperature 0 every mode's token ids must equal the baseline's for the same
            prompt, repeat and turn; a mismatch is reported with the first differing position
            and makes the command exit with code 9. At temperature > 0 the check is skipped.
Each generation starts from empty KV caches (every mode pays its own prefill), except the
later turns of a --turns all conversation."""

# Settings a mode may not change: they need the models reloaded, or change the prompt
# or the length of the output (which would make the outputs incomparable).
FIXED_KEYS = frozenset({
    "target", "draft", "ctx", "n_batch", "threads", "n_gpu_layers", "draft_n_gpu_layers", "main_gpu",
    "tensor_split", "flash_attn", "kv_type", "max_tokens", "system", "raw", "stop", "verify",
})
KEY_ALIASES = {"k": "draft_max"}
PEER_KEYS = frozenset({"draft_max", "ngram_max"})

HUMANEVAL_TEMPLATE = (
    "Complete the following Python code. Reply with the complete function in one Python code block.\n\n"
    "```python\n{prompt}```"
)

_PROFILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")


COMPARED = ("match", "near-tie", "mismatch")


class LosslessError(SpecliError):
    """A drafting mode produced different tokens than the baseline at temperature 0."""

    exit_code = EXIT_LOSSLESS


# ------------------------------------------------------------------------ prompts


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


# -------------------------------------------------------------------------- modes


@dataclass(frozen=True)
class Mode:
    """One configuration measured: `baseline`, a drafter with settings, or a peer."""

    name: str
    drafter: str  # "none" for the baseline; the peer's name for a peer
    options: tuple[tuple[str, str], ...] = ()  # (setting name, value as given)
    peer: bool = False
    spec: str = ""  # a llama.cpp peer's mode: ngram-simple, ngram-mod, draft:k=N ("" = plain decoding)

    @property
    def is_baseline(self) -> bool:
        return self.name == BASELINE

    @property
    def kind(self) -> str:
        if self.is_baseline:
            return "baseline"
        if self.name == LLAMA_CPP_BASELINE:
            return "peer-baseline"
        return "peer" if self.peer else "drafter"

    @property
    def compare_to(self) -> str:
        """The mode whose speed this one's speedup is measured against."""
        return LLAMA_CPP_BASELINE if self.drafter == LLAMA_CPP and self.peer else BASELINE

    def overrides(self) -> dict[str, Any]:
        """Settings overrides of this mode (command-line strings, validated later)."""
        return {"drafter": "none" if self.peer else self.drafter, **dict(self.options)}


def _norm_key(key: str) -> str:
    k = key.strip().lower().replace("-", "_")
    return KEY_ALIASES.get(k, k)


def _label(drafter: str, options: Iterable[tuple[str, str]]) -> str:
    inv = {v: k for k, v in KEY_ALIASES.items()}
    opts = ",".join(f"{inv.get(k, k)}={v}" for k, v in options)
    return f"{drafter}:{opts}" if opts else drafter


def _parse_options(items: Iterable[str], where: str, allowed: frozenset[str] | None = None) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise UsageError(f"{where}: expected KEY=VALUE, got {item!r}", "e.g. draft:k=5,p_min=0.3")
        name = _norm_key(key)
        if name == "drafter":
            raise UsageError(f"{where}: the drafter is named before ':', not as an option")
        if allowed is not None and name not in allowed:
            raise UsageError(f"{where}: option {key.strip()!r} not supported here",
                             "allowed: " + ", ".join(sorted({"k", *allowed})))
        if name in FIXED_KEYS:
            raise UsageError(
                f"{where}: {name!r} cannot differ between modes (models are loaded once and every "
                "mode gets the same prompt and length)",
                f"pass --{name.replace('_', '-')} to bench instead" if name in ("target", "draft", "ctx", "threads", "max_tokens")
                else "set it in the profile",
            )
        if name in out:
            raise UsageError(f"{where}: option {key.strip()!r} given twice")
        out[name] = value.strip()
    return tuple(out.items())


def parse_mode(text: str) -> Mode:
    """`DRAFTER[:key=value,...]` or `baseline`; keys are Settings fields, k = draft_max.
    Values are checked later, through `profiles.resolve_settings`."""
    spec = text.strip()
    if not spec:
        raise UsageError("empty mode", "modes look like baseline, draft, draft:k=5,p_min=0.3, ngram:k=6")
    head, colon, tail = spec.partition(":")
    drafter = head.strip().lower()
    if not drafter:
        raise UsageError(f"mode {spec!r}: missing the drafter name before ':'")
    if drafter in ("peer", *PEERS):
        raise UsageError(f"mode {spec!r}: peers are not modes", "use --peer llama-cpp-python")
    items = tail.split(",") if colon else []
    if colon and not any(p.strip() for p in items):
        raise UsageError(f"mode {spec!r}: nothing after ':'", "e.g. draft:k=5")
    if any(not p.strip() for p in items):
        raise UsageError(f"mode {spec!r}: empty option", "separate options with single commas")
    if drafter == BASELINE:
        if items:
            raise UsageError(f"mode {spec!r}: baseline takes no options")
        return Mode(BASELINE, "none")
    options = _parse_options(items, f"mode {spec!r}")
    return Mode(_label(drafter, options), drafter, options)


def parse_modes(text: str | None) -> list[Mode]:
    """A list of modes: `baseline,draft:k=3,p_min=0.5,ngram`. A comma-separated token
    with `=` and no `:` continues the options of the mode before it; anything else
    starts a new mode. `;` and spaces also separate modes. The baseline is always
    included, first; repeated modes are kept once."""
    raw = DEFAULT_MODES if text is None else text
    groups: list[list[str]] = []
    for chunk in re.split(r"[;\s]+", raw.strip()):
        if not chunk:
            continue
        for token in chunk.split(","):
            t = token.strip()
            if not t:
                raise UsageError(f"--modes {raw!r}: empty entry", "separate modes with single commas")
            if "=" in t and ":" not in t:
                if not groups or ":" not in groups[-1][0]:
                    raise UsageError(f"--modes: option {t!r} does not follow a mode with ':'",
                                     "write DRAFTER:key=value, e.g. ngram:k=6")
                groups[-1].append(t)
            else:
                groups.append([t])
    if not groups:
        raise UsageError("--modes is empty", f"e.g. {DEFAULT_MODES}")
    modes = [parse_mode(",".join(g)) for g in groups]
    return dedupe_modes([Mode(BASELINE, "none"), *modes])


def dedupe_modes(modes: Iterable[Mode]) -> list[Mode]:
    seen: dict[str, Mode] = {}
    for m in modes:
        seen.setdefault(m.name, m)
    return list(seen.values())


def parse_peer(text: str) -> Mode:
    """`llama-cpp-python[:k=N,ngram_max=M]` -> the mode `peer:llama-cpp-python`;
    `llama.cpp:ngram-simple` (ngram-mod, draft:k=N) -> `peer:llama.cpp:ngram-simple`."""
    head, colon, tail = text.strip().partition(":")
    name = head.strip().lower()
    if name not in PEERS:
        raise UsageError(f"unknown peer {text.strip()!r}", "supported: llama-cpp-python[:k=N], "
                         "llama.cpp:ngram-simple, llama.cpp:ngram-mod, llama.cpp:draft:k=N")
    if name == LLAMA_CPP:
        from specli.peers import parse_peer_spec

        if not tail.strip():
            raise UsageError(f"--peer {text.strip()!r}: name llama.cpp's mode", "e.g. llama.cpp:ngram-simple")
        kind, k = parse_peer_spec(tail)
        spec = kind if k is None else f"{kind}:k={k}"
        return Mode(f"peer:{LLAMA_CPP}:{spec}", LLAMA_CPP, (("draft_max", str(k)),) if k else (), peer=True,
                    spec=spec)
    items = tail.split(",") if colon else []
    options = _parse_options(items, f"--peer {text.strip()!r}", allowed=PEER_KEYS)
    return Mode("peer:" + _label(name, options), name, options, peer=True)


def _expand(token: str, key: str) -> list[str]:
    if ".." not in token:
        return [token]
    a, _, b = token.partition("..")
    try:
        lo, hi = int(a), int(b)
    except ValueError:
        raise UsageError(f"--sweep {key}: range {token!r} needs integers, like 1..8",
                         "list other values with commas: p-min=0,0.3,0.6") from None
    if lo > hi:
        raise UsageError(f"--sweep {key}: empty range {token!r}", f"write {hi}..{lo}")
    return [str(i) for i in range(lo, hi + 1)]


def parse_sweep(text: str) -> list[tuple[str, list[str]]]:
    """`draft-max=1..8,p-min=0,0.3,0.6` -> [("draft_max", ["1".."8"]), ("p_min", ["0", "0.3", "0.6"])].
    A token containing `=` starts a new axis; `a..b` is an integer range."""
    axes: list[tuple[str, list[str]]] = []
    for raw in text.split(","):
        token = raw.strip()
        if not token:
            raise UsageError(f"--sweep {text!r}: empty value", "e.g. draft-max=1..8,p-min=0,0.3,0.6")
        if "=" in token:
            key, _, token = token.partition("=")
            name = _norm_key(key)
            if not name:
                raise UsageError(f"--sweep {text!r}: missing a key before '='")
            if name in FIXED_KEYS:
                raise UsageError(f"--sweep: {name!r} cannot differ between modes", "set it for the whole run")
            if any(name == k for k, _ in axes):
                raise UsageError(f"--sweep: key {key.strip()!r} given twice")
            axes.append((name, []))
            token = token.strip()
            if not token:
                raise UsageError(f"--sweep {name}: no value after '='")
        elif not axes:
            raise UsageError(f"--sweep {text!r}: must start with KEY=VALUES", "e.g. draft-max=1..8")
        values = axes[-1][1]
        for v in _expand(token, axes[-1][0]):
            if v not in values:
                values.append(v)
    if not axes:
        raise UsageError("--sweep is empty", "e.g. draft-max=1..8,p-min=0,0.3,0.6")
    return axes


def sweep_modes(axes: Sequence[tuple[str, Sequence[str]]], drafter: str) -> list[Mode]:
    """The grid of `axes` for `drafter` (a `drafter` axis overrides it), as modes."""
    drafter_axis = [vals for k, vals in axes if k == "drafter"]
    drafters = list(drafter_axis[0]) if drafter_axis else [drafter]
    rest = [(k, list(vals)) for k, vals in axes if k != "drafter"]
    modes = []
    for d in drafters:
        d = d.strip().lower()
        if d in ("none", BASELINE):
            raise UsageError("--sweep needs a drafter", "the profile's drafter is none: add drafter=draft or similar")
        for combo in itertools.product(*(vals for _, vals in rest)):
            options = tuple((k, v) for (k, _), v in zip(rest, combo))
            modes.append(Mode(_label(d, options), d, options))
    if len(modes) > MAX_SWEEP_MODES:
        raise UsageError(f"--sweep makes {len(modes)} modes, more than {MAX_SWEEP_MODES}", "sweep fewer values")
    return modes


# ---------------------------------------------------------------- records, figures


def record_from_counters(
    c: Counters, *, mode: Mode, prompt: Prompt, prompt_index: int, repeat: int, turn: int,
    tokens: Sequence[int] | None, text: str, finish_reason: str | None, temperature: float, verify: str = "batch",
    margins: Sequence[tuple[int, float]] | None = None,
) -> dict[str, Any]:
    """One generation as a JSON-friendly dict (every figure of `metrics.summary` plus
    the raw counts the aggregates are pooled from)."""
    rec: dict[str, Any] = {
        "mode": mode.name,
        "kind": mode.kind,
        "compare_to": None if mode.is_baseline else mode.compare_to,
        "prompt_index": prompt_index,
        "prompt_id": prompt.id,
        "category": prompt.category,
        "repeat": repeat,
        "turn": turn,
        "temperature": temperature,
        "verify": verify,
        "finish_reason": finish_reason,
    }
    rec.update(metrics.summary(c))
    rec.update({
        "n_step_tokens": c.n_step_tokens,
        "drafted_by_pos": list(c.drafted_by_pos),
        "accepted_by_pos": list(c.accepted_by_pos),
        "t_llama_s": c.t_llama,
        "speedup": None,
        "decode_speedup": None,
        "lossless": "unchecked",
        "first_diff": None,
        "tokens": None if tokens is None else [int(t) for t in tokens],  # None: a peer reporting text only
        "text": text,
    })
    if margins is not None:  # the baseline: (runner-up token, top logit - its logit) per token
        rec["margins"] = [[int(t), float(g)] for t, g in margins]
    return rec


def replay_proposals(c: Counters, tokens: Sequence[int], proposals: Iterable[tuple[int, Sequence[int]]],
                     name: str = "peer") -> None:
    """Fill draft counters from a peer's drafts: each (tokens generated so far, draft)
    was followed by one target forward; at greedy decoding the accepted prefix is the
    part of the draft that the output repeats."""
    n = len(tokens)
    for offset, draft in proposals:
        if offset >= n:
            continue
        acc = 0
        while acc < len(draft) and offset + acc < n and tokens[offset + acc] == draft[acc]:
            acc += 1
        emitted = min(acc + 1, n - offset)
        c.record_step(name if draft else "none", len(draft), min(acc, emitted), emitted)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where the sequences differ (the shorter length if
    one is a prefix of the other); None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _key(rec: dict[str, Any]) -> tuple[int, int, int]:
    return (rec["prompt_index"], rec["repeat"], rec["turn"])


def add_speedups(records: Sequence[dict[str, Any]]) -> None:
    """speedup = this generation's tok/s / its baseline's tok/s on the same prompt, repeat
    and turn; decode_speedup the same with prefill excluded on both sides. A llama.cpp
    peer's baseline is llama.cpp's own plain decoding (`compare_to`), every other mode's
    specli's baseline. None without a baseline or when it made no tokens."""
    base = {(r["mode"], *_key(r)): r for r in records if r["kind"] in ("baseline", "peer-baseline")}
    for r in records:
        b = base.get((r.get("compare_to") or r["mode"], *_key(r)))
        r["speedup"] = _ratio(r["tokens_per_second"], b["tokens_per_second"]) if b else None
        r["decode_speedup"] = _ratio(r["decode_tokens_per_second"], b["decode_tokens_per_second"]) if b else None


def classify_divergence(baseline: dict[str, Any], rec: dict[str, Any], diff: int, tie_bound: float | None) -> str:
    """`near-tie` when a one-batch mode's first differing token is the baseline's runner-up
    at that position and the baseline's gap between the two is within the batching noise
    measured for this model and build; `mismatch` otherwise (always in exact mode)."""
    margins = baseline.get("margins")
    if rec.get("verify") == "exact" or tie_bound is None or not margins or diff >= min(len(margins), len(rec["tokens"])):
        return "mismatch"
    runner_up, gap = margins[diff]
    return "near-tie" if rec["tokens"][diff] == runner_up and gap <= tie_bound else "mismatch"


def check_lossless(records: Sequence[dict[str, Any]], tie_bound: float | None = None) -> list[dict[str, Any]]:
    """Compare each generation with its baseline's (both at temperature 0) and mark it
    `match`, `near-tie`, `mismatch` or `unchecked`. Returns the divergences (near-ties
    included, each with its `verdict`)."""
    base = {_key(r): r for r in records if r["mode"] == BASELINE}
    out = []
    for r in records:
        if r["mode"] == BASELINE:
            r["lossless"], r["first_diff"] = "baseline", None
            continue
        b = base.get(_key(r))
        if b is None or r["temperature"] > 0 or b["temperature"] > 0 or r.get("tokens") is None:
            r["lossless"], r["first_diff"] = "unchecked", None
            continue
        diff = first_difference(b["tokens"], r["tokens"])
        r["first_diff"] = diff
        r["lossless"] = "match" if diff is None else classify_divergence(b, r, diff, tie_bound)
        if diff is not None:
            bt, mt = b["tokens"], r["tokens"]
            margins = b.get("margins") or []
            out.append({
                "mode": r["mode"], "prompt_id": r["prompt_id"], "prompt_index": r["prompt_index"],
                "category": r["category"], "repeat": r["repeat"], "turn": r["turn"], "first_diff": diff,
                "verdict": r["lossless"], "verify": r.get("verify"),
                "baseline_token": bt[diff] if diff < len(bt) else None,
                "mode_token": mt[diff] if diff < len(mt) else None,
                "baseline_runner_up": margins[diff][0] if diff < len(margins) else None,
                "baseline_gap": margins[diff][1] if diff < len(margins) else None,
                "tie_bound": tie_bound,
                "baseline_length": len(bt), "mode_length": len(mt),
            })
    return out


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def aggregate_group(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Figures of a group of generations: medians of per-generation rates, pooled
    ratios of counts (acceptance, tau, acceptance by position, time split)."""
    speedups = [r["speedup"] for r in records if r["speedup"] is not None]
    decode_speedups = [r["decode_speedup"] for r in records if r.get("decode_speedup") is not None]
    n_drafted = sum(r["n_drafted"] for r in records)
    n_accepted = sum(r["n_accepted"] for r in records)
    n_forwards = sum(r["n_target_forwards"] for r in records)
    n_step = sum(r["n_step_tokens"] for r in records)
    width = max((len(r["drafted_by_pos"]) for r in records), default=0)
    drafted = [sum(r["drafted_by_pos"][i] for r in records if i < len(r["drafted_by_pos"])) for i in range(width)]
    accepted = [sum(r["accepted_by_pos"][i] for r in records if i < len(r["accepted_by_pos"])) for i in range(width)]
    t_total = sum(r["time_s"]["total"] for r in records)
    t_llama = sum(r["t_llama_s"] for r in records)
    times = {k: sum(r["time_s"][k] for r in records) for k in ("prefill", "draft", "verify", "other")}
    ttft = [r["time_to_first_token_s"] for r in records if r["time_to_first_token_s"] is not None]
    return {
        "n": len(records),
        "n_generated": sum(r["n_generated"] for r in records),
        "tokens_per_second": _median([r["tokens_per_second"] for r in records]),
        "tokens_per_second_pooled": _ratio(sum(r["n_generated"] for r in records), t_total),
        "speedup_median": _median(speedups),
        "speedup_min": min(speedups) if speedups else None,
        "speedup_max": max(speedups) if speedups else None,
        "decode_speedup_median": _median(decode_speedups),
        "decode_speedup_min": min(decode_speedups) if decode_speedups else None,
        "decode_speedup_max": max(decode_speedups) if decode_speedups else None,
        "n_drafted": n_drafted,
        "n_accepted": n_accepted,
        "acceptance_rate": _ratio(n_accepted, n_drafted),
        "mean_accepted_length": _ratio(n_step, n_forwards),
        "acceptance_by_position": [a / d if d else 0.0 for a, d in zip(accepted, drafted)],
        "time_to_first_token_s": _median(ttft),
        "time_s": {**times, "total": t_total},
        "time_split": {k: (v / t_total if t_total > 0 else 0.0) for k, v in times.items()},
        "python_overhead_fraction": _ratio(max(0.0, t_total - t_llama), t_total),
        "mismatches": sum(1 for r in records if r["lossless"] == "mismatch"),
        "near_ties": sum(1 for r in records if r["lossless"] == "near-tie"),
        "identical": sum(1 for r in records if r["lossless"] == "match"),
        "compared": sum(1 for r in records if r["lossless"] in COMPARED),
    }


def aggregate(records: Sequence[dict[str, Any]], modes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Per mode: one row per category (in order of appearance) and one `all` row."""
    mode_order = list(modes) if modes is not None else list(dict.fromkeys(r["mode"] for r in records))
    categories = list(dict.fromkeys(r["category"] for r in records))
    rows = []
    for m in mode_order:
        mine = [r for r in records if r["mode"] == m]
        if not mine:
            continue
        for cat in categories:
            group = [r for r in mine if r["category"] == cat]
            if group:
                rows.append({"mode": m, "category": cat, **aggregate_group(group)})
        rows.append({"mode": m, "category": "all", **aggregate_group(mine)})
    return rows


# -------------------------------------------------------------------- formatting


def _f(x: float | None, fmt: str, none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def _speed(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _spread(row: dict[str, Any], prefix: str = "") -> str:
    lo, hi = row[f"{prefix}speedup_min"], row[f"{prefix}speedup_max"]
    return "-" if lo is None else f"{lo:.2f}-{hi:.2f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f} ms"


SUMMARY_COLUMNS = ("mode", "category", "n", "tok/s", "speedup", "min-max", "decode", "decode min-max", "accept",
                   "tau", "TTFT", "near-ties", "mismatches")


def summary_cells(row: dict[str, Any]) -> list[str]:
    return [
        row["mode"], row["category"], str(row["n"]), _f(row["tokens_per_second"], ".1f"),
        _speed(row["speedup_median"]), _spread(row), _speed(row["decode_speedup_median"]),
        _spread(row, "decode_"), _f(row["acceptance_rate"], ".2f"),
        _f(row["mean_accepted_length"], ".2f"), _ms(row["time_to_first_token_s"]),
        str(row["near_ties"]) if row["compared"] else "-",
        str(row["mismatches"]) if row["compared"] else "-",
    ]


def _positions(row: dict[str, Any], n: int = 8) -> str:
    acc = row["acceptance_by_position"]
    return " ".join(f"{a:.2f}" for a in acc[:n]) + (" ..." if len(acc) > n else "") if acc else "-"


def _split(row: dict[str, Any]) -> str:
    s = row["time_split"]
    return "/".join(f"{s[k] * 100:.0f}" for k in ("prefill", "draft", "verify", "other"))


DETAIL_COLUMNS = ("mode", "acc@pos 1..", "split % prefill/draft/verify/other", "overhead")


def detail_cells(row: dict[str, Any]) -> list[str]:
    return [row["mode"], _positions(row), _split(row), _f(row["python_overhead_fraction"], ".0%")]


def table_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows shown: a mode's `all` row repeats its category row when there is one
    category, so then only the category rows are shown."""
    categories = {r["category"] for r in rows if r["category"] != "all"}
    return [r for r in rows if r["category"] != "all"] if len(categories) == 1 else list(rows)


def summary_table(rows: Sequence[dict[str, Any]]) -> Table:
    t = Table(*SUMMARY_COLUMNS, title="specli bench", title_justify="left")
    for col in t.columns[2:]:
        col.justify = "right"
    for col in t.columns:
        col.no_wrap = True
    previous = None
    for row in table_rows(rows):
        if previous is not None and row["mode"] != previous:
            t.add_section()
        previous = row["mode"]
        cells = [Text(c) for c in summary_cells(row)]  # Text: names from prompt files are not markup
        if row["mismatches"]:
            cells[-1].stylize("bold red")
        t.add_row(*cells, style="bold" if row["category"] == "all" else None)
    return t


def detail_table(rows: Sequence[dict[str, Any]]) -> Table:
    t = Table(*DETAIL_COLUMNS, title="per mode, all prompts", title_justify="left")
    for row in rows:
        if row["category"] == "all":
            t.add_row(*(Text(c) for c in detail_cells(row)))
    return t


def bar_chart(rows: Sequence[dict[str, Any]], width: int = 40) -> str:
    """Median speedup per mode (all prompts) as text bars; `|` marks 1.00x."""
    overall = [r for r in rows if r["category"] == "all" and r["speedup_median"] is not None]
    if not overall:
        return ""
    top = max(max(r["speedup_median"] for r in overall), 1.0)
    name_w = max(len(r["mode"]) for r in overall)
    one = round(width / top)
    lines = ["median speedup vs baseline (all prompts)"]
    for r in overall:
        n = round(width * r["speedup_median"] / top)
        bar = "█" * n + " " * (width - n)
        if one < width and n < one:
            bar = bar[:one] + "|" + bar[one + 1 :]
        lines.append(f"{r['mode'].ljust(name_w)}  {bar}  {r['speedup_median']:.2f}x")
    return "\n".join(lines)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [line(SUMMARY_COLUMNS), line(["---"] * 2 + ["---:"] * (len(SUMMARY_COLUMNS) - 2))]
    out += [line(summary_cells(r)) for r in table_rows(rows)]
    out += ["", line(DETAIL_COLUMNS), line(["---"] * len(DETAIL_COLUMNS))]
    out += [line(detail_cells(r)) for r in rows if r["category"] == "all"]
    return "\n".join(out) + "\n"


CSV_COLUMNS = (
    "mode", "kind", "prompt_index", "prompt_id", "category", "repeat", "turn", "temperature", "finish_reason",
    "n_prompt", "n_prompt_reused", "n_generated", "tokens_per_second", "decode_tokens_per_second", "speedup",
    "decode_speedup", "verify",
    "time_to_first_token_s", "t_prefill_s", "t_draft_s", "t_verify_s", "t_other_s", "t_total_s", "t_llama_s",
    "python_overhead_fraction", "n_target_forwards", "n_step_tokens", "n_drafted", "n_accepted",
    "acceptance_rate", "mean_accepted_length", "acceptance_by_position", "lossless", "first_diff",
)


def csv_text(records: Sequence[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in records:
        flat = dict(r)
        for k in ("prefill", "draft", "verify", "other", "total"):
            flat[f"t_{k}_s"] = r["time_s"][k]
        flat["acceptance_by_position"] = ";".join(f"{a:.4f}" for a in r["acceptance_by_position"])
        w.writerow(["" if flat.get(c) is None else flat[c] for c in CSV_COLUMNS])
    return buf.getvalue()


# --------------------------------------------------------------------- the plan


@dataclass
class BenchOptions:
    """Everything `specli bench` was asked for (the CLI fills this in)."""

    profile: str | None = None
    prompts: Path | None = None
    suite: str | None = None
    modes: str | None = None
    max_tokens: int | None = None
    repeat: int = 1
    temperature: float | None = None
    json_out: str | None = None  # a path, or - for stdout
    csv_out: Path | None = None
    markdown_out: Path | None = None
    sweep: str | None = None
    write_profile: str | None = None
    peer: str | list[str] | None = None  # one peer, or several
    limit: int | None = None
    categories: str | None = None
    turns: str = "first"
    warmup: bool = True
    progress: bool = True
    recalibrate: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)  # target, draft, ctx, threads, ...

    def base_overrides(self) -> dict[str, Any]:
        out = {k: v for k, v in self.overrides.items() if v is not None}
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            out["temperature"] = self.temperature
        return out


@dataclass
class Plan:
    opts: BenchOptions
    prompts: list[Prompt]
    modes: list[Mode]  # baseline first; a peer last
    settings: dict[str, Settings]  # per mode name
    base: Settings  # the profile with the command-line overrides
    runtime: Settings  # what open_runtime loads
    peers: list[Mode] = field(default_factory=list)

    @property
    def peer(self) -> Mode | None:
        """The llama-cpp-python peer, which bench loads in-process."""
        return next((m for m in self.peers if m.drafter == "llama-cpp-python"), None)

    @property
    def n_generations(self) -> int:
        turns = sum(len(self.turns_of(p)) for p in self.prompts)
        return turns * self.opts.repeat * len(self.modes)

    def turns_of(self, p: Prompt) -> tuple[str, ...]:
        return p.turns if self.opts.turns == "all" else p.turns[:1]


def _resolve(profile: str | None, overrides: dict[str, Any], mode: Mode | None = None) -> Settings:
    try:
        return profiles.resolve_settings(profile, overrides)
    except ProfileError as e:
        if mode is None:
            raise
        raise ProfileError(f"mode {mode.name!r}: {e.message}", e.hint) from None


def _uses_draft_model(s: Settings) -> bool:
    return s.drafter in ("draft", "hybrid", "auto") and s.draft is not None and s.draft_max > 0


def plan_bench(opts: BenchOptions) -> Plan:
    """Check every option and resolve every mode's settings; loads no model."""
    if opts.repeat < 1:
        raise UsageError(f"--repeat must be at least 1, got {opts.repeat}")
    if opts.turns not in ("first", "all"):
        raise UsageError(f"--turns must be first or all, got {opts.turns!r}")
    if opts.write_profile is not None and not _PROFILE_NAME_RE.match(opts.write_profile):
        raise UsageError(f"--write-profile {opts.write_profile!r}: not a profile name",
                         "letters, digits and . _ + - (no path)")
    prompts: list[Prompt] = []
    if opts.prompts is not None:
        prompts += load_prompt_file(opts.prompts)
    if opts.suite is not None or opts.prompts is None:
        prompts += suite_prompts(opts.suite or "all")
    prompts = select_prompts(prompts, split_list(opts.categories), opts.limit)
    if not prompts:
        raise UsageError("no prompts to run")

    base_over = opts.base_overrides()
    base = _resolve(opts.profile, base_over)
    modes = parse_modes(opts.modes) if (opts.modes is not None or opts.sweep is None) else [Mode(BASELINE, "none")]
    if opts.sweep is not None:
        modes = dedupe_modes([*modes, *sweep_modes(parse_sweep(opts.sweep), base.drafter)])
    peer_texts = [opts.peer] if isinstance(opts.peer, str) else list(opts.peer or [])
    peers = dedupe_modes(parse_peer(t) for t in peer_texts)
    if any(m.drafter == LLAMA_CPP for m in peers):
        if opts.turns == "all":
            raise UsageError("llama.cpp peers run single prompts", "use --turns first with a llama.cpp peer")
        peers.insert(0, Mode(LLAMA_CPP_BASELINE, LLAMA_CPP, peer=True))
    settings = {m.name: _resolve(opts.profile, {**base_over, **m.overrides()}, m) for m in modes}
    for peer in peers:
        settings[peer.name] = _resolve(opts.profile, {**base_over, "drafter": "ngram", **dict(peer.options)}, peer)
        modes.append(peer)
    need_draft = any(_uses_draft_model(s) for s in settings.values())
    runtime = _resolve(opts.profile, {**base_over, "drafter": "draft" if need_draft else "none"})
    return Plan(opts, prompts, modes, settings, base, runtime, peers)


# -------------------------------------------------------------------- execution


@dataclass
class BenchResult:
    plan: Plan
    records: list[dict[str, Any]] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    stopped_by: str | None = None  # "Ctrl-C" or "SIGTERM" when interrupted
    error: str | None = None
    started: str = ""
    seconds: float = 0.0
    # the target's batching noise on this build: exact_batch, max_logit_diff, tie_bound
    numerics: dict[str, Any] = field(default_factory=dict)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
    }
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        info["llama_cpp_python"] = importlib.metadata.version("llama_cpp_python")
    from specli.backend import system_info

    info["llama_system_info"] = system_info()
    return info


Verifier = Callable[..., Any]


@dataclass
class Generated:
    tokens: list[int]
    text: str
    finish_reason: str | None
    counters: Counters
    margins: list[tuple[int, float]] | None = None  # the baseline's runner-up and logit gap per token
    no_tokens: bool = False  # a peer that reports text only: nothing to compare token by token


class _Runner:
    """Runs generations on loaded models; one instance per bench run."""

    def __init__(self, plan: Plan, rt: Any, peer: Any, verifier: Verifier | None) -> None:
        self.plan = plan
        self.rt = rt
        self.peer = peer
        self.verifier = verifier
        self._peer_cache: list[int] = []  # what the peer's KV cache holds, as far as we know

    def reset(self) -> None:
        self.rt.target.reset()
        if self.rt.draft is not None:
            self.rt.draft.reset()

    def turn_tokens(self, s: Settings, history: list[dict[str, str]], user: str) -> list[int]:
        rt = self.rt
        if not history:
            return list(rt.prompt_tokens(user, s))
        if s.raw or not rt.target.chat_template:
            pairs = [history[i]["content"] + history[i + 1]["content"] for i in range(0, len(history) - 1, 2)]
            return list(rt.target.tokenize("\n\n".join([*pairs, user]), add_special=True, parse_special=s.raw))
        return list(rt.target.chat_tokens(rt.messages(history, user, s.system)))

    def generate(self, mode: Mode, s: Settings, drafter: Any, tokens: list[int], keep_cache: bool,
                 max_tokens: int | None = None) -> Generated:
        if mode.drafter == LLAMA_CPP:
            return self._generate_llama_cpp(mode, s, tokens, max_tokens or s.max_tokens)
        if mode.peer:
            return self._generate_peer(s, tokens, keep_cache, max_tokens or s.max_tokens)
        from specli import engine

        cfg = self.rt.generation_config(s)
        if max_tokens is not None:
            cfg = replace(cfg, max_tokens=max_tokens)
        verifier = self.verifier or engine.verify_step
        recorder = MarginRecorder(verifier) if mode.is_baseline and s.temperature == 0 else None
        res = engine.run(self.rt.target, tokens, cfg, drafter, recorder or verifier)
        c = res.counters
        if recorder is not None:  # the recording is bench's own work: not the baseline's time
            c.t_total -= recorder.seconds
            c.t_verify -= recorder.seconds - recorder.first_seconds
            c.t_prefill -= recorder.first_seconds
            if c.t_first_token is not None:
                c.t_first_token -= recorder.first_seconds
        margins = recorder.margins[: len(res.tokens)] if recorder is not None else None
        return Generated(res.tokens, res.text, res.finish_reason, c, margins)

    def _generate_llama_cpp(self, mode: Mode, s: Settings, tokens: list[int], max_tokens: int) -> Generated:
        """One run of llama.cpp's own program on the same prompt text; its timing lines
        give prefill and decode time. Token ids are not reported: the text only."""
        from specli import peers, registry
        from specli.backend import default_threads

        kind, k = peers.parse_peer_spec(mode.spec) if mode.spec else (None, None)
        draft = registry.resolve(s.draft) if kind == "draft" and s.draft else None
        argv = peers.command_line(
            self.llama_cpp_bin(), kind, registry.resolve(s.target), self.prompt_text(tokens), max_tokens,
            s.threads or default_threads(), self.rt.target.n_ctx, draft, k, s.temperature, s.seed)
        run = peers.run_peer(argv)
        c = Counters(n_prompt=len(tokens), n_generated=run.n_generated, n_drafted=run.n_drafted,
                     n_accepted=run.n_accepted, t_prefill=run.prefill_s, t_first_token=run.prefill_s,
                     t_verify=run.decode_s, t_total=run.prefill_s + run.decode_s,
                     t_llama=run.prefill_s + run.decode_s)  # Python overhead: none (a C++ program)
        finish = "length" if run.n_generated >= max_tokens else "stop"
        return Generated([], run.text, finish, c, no_tokens=True)

    def llama_cpp_bin(self) -> Path:
        import importlib.metadata

        from specli.peers import find_binaries

        return find_binaries(importlib.metadata.version("llama_cpp_python"))

    def prompt_text(self, tokens: list[int]) -> str:
        """The prompt as text with special tokens spelled out, as llama.cpp parses it."""
        return self.rt.target.vocab.detokenize(tokens, special=True)

    def _generate_peer(self, s: Settings, tokens: list[int], keep_cache: bool, max_tokens: int) -> Generated:
        peer = self.peer
        c = Counters(n_prompt=len(tokens))
        if keep_cache:  # llama-cpp-python reuses the longest cached prefix (all but the last token at most)
            diff = first_difference(self._peer_cache, tokens)
            c.n_prompt_reused = min(len(tokens) if diff is None else diff, len(tokens) - 1)
        llama0, draft0 = peer.decode_seconds, peer.draft_seconds
        out: list[int] = []
        t0 = time.perf_counter()
        for tok in peer.stream(tokens, max_tokens, s.sampling(), keep_cache):
            out.append(tok)
            if c.t_first_token is None:
                c.t_first_token = time.perf_counter() - t0
        c.t_total = time.perf_counter() - t0
        if c.t_first_token is None:
            c.t_first_token = c.t_total
        c.t_prefill = c.t_first_token
        c.t_draft = peer.draft_seconds - draft0
        c.t_verify = max(0.0, c.t_total - c.t_prefill - c.t_draft)
        c.t_llama = peer.decode_seconds - llama0
        c.n_generated = len(out)
        replay_proposals(c, out, peer.proposals, name=self.plan.peer.drafter if self.plan.peer else "peer")
        self._peer_cache = [*tokens, *out]
        finish = "length" if len(out) >= max_tokens else "stop"
        return Generated(out, self.rt.target.detokenize(out), finish, c)

    def conversation(self, mode: Mode, prompt: Prompt, index: int, repeat: int,
                     on_record: Callable[[dict[str, Any]], None], before_turn: Callable[[int], None]) -> None:
        s = self.plan.settings[mode.name]
        self.reset()
        drafter = None if mode.peer else self.rt.drafter(s)
        history: list[dict[str, str]] = []
        for turn, user in enumerate(self.plan.turns_of(prompt)):
            before_turn(turn)
            tokens = self.turn_tokens(s, history, user)
            try:
                g = self.generate(mode, s, drafter, tokens, keep_cache=turn > 0)
            except SpecliError as e:
                raise type(e)(f"prompt {prompt.id!r} ({mode.name}): {e.message}", e.hint) from None
            on_record(record_from_counters(
                g.counters, mode=mode, prompt=prompt, prompt_index=index, repeat=repeat, turn=turn,
                tokens=None if g.no_tokens else g.tokens, text=g.text, finish_reason=g.finish_reason,
                temperature=s.temperature,
                verify="batch" if mode.peer else s.verify, margins=g.margins,
            ))
            history += [{"role": "user", "content": user}, {"role": "assistant", "content": g.text}]

    def warmup(self) -> None:
        """One short generation, not recorded: the mode that loads the most (the draft
        model if any mode uses it), then the peer's own model if there is one."""
        plan = self.plan
        prompt = plan.prompts[0]
        engine_modes = [m for m in plan.modes if not m.peer]
        first = next((m for m in engine_modes if _uses_draft_model(plan.settings[m.name])),
                     next((m for m in engine_modes if not m.is_baseline), engine_modes[0]))
        n = min(WARMUP_TOKENS, plan.base.max_tokens)
        for m in [first, *([plan.peer] if plan.peer else [])]:
            s = plan.settings[m.name]
            self.reset()
            drafter = None if m.peer else self.rt.drafter(s)
            self.generate(m, s, drafter, self.turn_tokens(s, [], prompt.turns[0]), keep_cache=False, max_tokens=n)
        self.reset()


@contextlib.contextmanager
def _progress(console: Console | None, total: int, enabled: bool) -> Iterator[Callable[..., None]]:
    if not enabled or console is None:
        yield lambda *a, **k: None
        return
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True,
    ) as bar:
        task = bar.add_task("loading", total=total)

        def update(description: str | None = None, advance: int = 0) -> None:
            bar.update(task, description=description, advance=advance)

        yield update


def execute(plan: Plan, result: BenchResult, verifier: Verifier | None = None,
            progress_console: Console | None = None) -> None:
    """Load the models and run every generation, appending records to `result` as
    they finish (so an interrupted run keeps what it measured)."""
    from specli import registry
    from specli.runtime import load_options, open_runtime

    result.machine = machine_info()
    rt = open_runtime(plan.runtime, recalibrate=plan.opts.recalibrate)
    peer = None
    try:
        for m in plan.modes:  # surface unsupported drafters before measuring anything
            if not m.peer:
                rt.drafter(plan.settings[m.name])
        if plan.peer is not None:
            from specli.backend import open_llama_cpp_python_peer

            ps = plan.settings[plan.peer.name]
            peer = open_llama_cpp_python_peer(
                registry.resolve(ps.target), load_options(ps, for_draft=False),
                num_pred_tokens=ps.draft_max, max_ngram_size=ps.ngram_max,
            )
        if plan.base.temperature == 0:
            cal = rt.calibration()
            result.numerics = {"exact_batch": cal.exact_batch, "max_logit_diff": cal.max_logit_diff,
                               "tie_bound": cal.tie_bound}
        runner = _Runner(plan, rt, peer, verifier)
        if any(m.drafter == LLAMA_CPP for m in plan.peers):
            runner.llama_cpp_bin()  # missing programs: say how to build them before measuring anything
        with _progress(progress_console, plan.n_generations, plan.opts.progress) as update:
            if plan.opts.warmup:
                update("warm-up")
                runner.warmup()
            n = len(plan.prompts)
            for i, prompt in enumerate(plan.prompts):
                for r in range(plan.opts.repeat):
                    for m in plan.modes:
                        rep = f" repeat {r + 1}/{plan.opts.repeat}" if plan.opts.repeat > 1 else ""

                        def before(turn: int, m: Mode = m, rep: str = rep, prompt: Prompt = prompt, i: int = i) -> None:
                            t = f" turn {turn + 1}" if plan.opts.turns == "all" else ""
                            update(f"prompt {i + 1}/{n} {prompt.id}{rep}{t} · {m.name}")

                        def record(rec: dict[str, Any]) -> None:
                            result.records.append(rec)
                            update(advance=1)

                        runner.conversation(m, prompt, i, r, record, before)
    finally:
        if peer is not None:
            peer.close()
        rt.close()


# ---------------------------------------------------------------------- results


def finish_records(records: Sequence[dict[str, Any]], tie_bound: float | None = None) -> list[dict[str, Any]]:
    """Speedups and the lossless check, in place; returns the mismatches (near-ties are
    kept in the records' `lossless` field and in `divergences`)."""
    return [x for x in divergences_of(records, tie_bound) if x["verdict"] == "mismatch"]


def divergences_of(records: Sequence[dict[str, Any]], tie_bound: float | None) -> list[dict[str, Any]]:
    add_speedups(records)
    return check_lossless(records, tie_bound)


def document(result: BenchResult, rows: Sequence[dict[str, Any]], divergences: Sequence[dict[str, Any]],
             best: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON written by --json."""
    plan, o = result.plan, result.plan.opts
    mismatches = [x for x in divergences if x["verdict"] == "mismatch"]
    greedy = all(s.temperature == 0 for s in plan.settings.values())
    return {
        "schema": SCHEMA_VERSION,
        "tool": "specli bench",
        "started": result.started,
        "seconds": result.seconds,
        "complete": not result.interrupted and result.error is None,
        "interrupted": result.interrupted,
        "stopped_by": result.stopped_by,
        "error": result.error,
        "options": {
            "profile": o.profile, "prompts": str(o.prompts) if o.prompts else None, "suite": o.suite,
            "modes": [m.name for m in plan.modes], "max_tokens": plan.base.max_tokens, "repeat": o.repeat,
            "temperature": plan.base.temperature, "sweep": o.sweep, "peer": o.peer, "limit": o.limit,
            "categories": split_list(o.categories) or None, "turns": o.turns, "warmup": o.warmup,
            "overrides": {k: v for k, v in o.overrides.items() if v is not None},
        },
        "definitions": DEFINITIONS,
        "settings": profiles.settings_to_dict(plan.base),
        "modes": [
            {"name": m.name, "kind": "baseline" if m.is_baseline else "peer" if m.peer else "drafter",
             "drafter": m.drafter, "options": dict(m.options),
             "settings": profiles.settings_to_dict(plan.settings[m.name])}
            for m in plan.modes
        ],
        "machine": result.machine,
        "prompts": [
            {"index": i, "id": p.id, "category": p.category, "n_turns": len(plan.turns_of(p)), "source": p.source}
            for i, p in enumerate(plan.prompts)
        ],
        "records": list(result.records),
        "aggregates": list(rows),
        "lossless": {
            "checked": greedy,
            "note": None if greedy else "temperature > 0: outputs are samples, the check is skipped",
            "compared": sum(1 for r in result.records if r["lossless"] in COMPARED),
            "identical": sum(1 for r in result.records if r["lossless"] == "match"),
            "near_ties": sum(1 for x in divergences if x["verdict"] == "near-tie"),
            "mismatches": len(mismatches),
            "by_mode": {m.name: sum(1 for x in mismatches if x["mode"] == m.name) for m in plan.modes
                        if not m.is_baseline},
            "numerics": result.numerics,
            "details": list(mismatches),
            "near_tie_details": [x for x in divergences if x["verdict"] == "near-tie"],
        },
        "best": best,
    }


def best_mode(plan: Plan, rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The drafter mode with the highest median speedup and no mismatch."""
    candidates = [
        r for r in rows
        if r["category"] == "all" and r["mode"] != BASELINE and r["speedup_median"] is not None
        and r["mismatches"] == 0 and not next(m for m in plan.modes if m.name == r["mode"]).peer
    ]
    if not candidates:
        return None
    top = max(candidates, key=lambda r: r["speedup_median"])
    return {"mode": top["mode"], "speedup_median": top["speedup_median"], "speedup_min": top["speedup_min"],
            "speedup_max": top["speedup_max"], "tokens_per_second": top["tokens_per_second"],
            "acceptance_rate": top["acceptance_rate"], "mean_accepted_length": top["mean_accepted_length"]}


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


def profile_text(plan: Plan, rows: Sequence[dict[str, Any]], best: dict[str, Any], name: str) -> str:
    """YAML of a profile that `extends:` the one benchmarked and sets the best mode's
    settings, with the measured figures as comments."""
    mode = next(m for m in plan.modes if m.name == best["mode"])
    s = plan.settings[mode.name]
    keys = ["drafter", *(k for k, _ in mode.options)]
    keys += [k for k, v in plan.opts.overrides.items() if v is not None and k not in keys]
    data: dict[str, Any] = {}
    for k in dict.fromkeys(keys):
        v = getattr(s, k)
        data[k] = list(v) if isinstance(v, tuple) else v
    base_row = next((r for r in rows if r["mode"] == BASELINE and r["category"] == "all"), None)
    overall = [r for r in rows if r["category"] == "all" and r["mode"] != BASELINE]
    cats = ", ".join(dict.fromkeys(p.category for p in plan.prompts))
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    lines = [
        f"# Written by `specli bench --write-profile {name}` on {now}.",
        f"# Fastest of {len(overall)} mode(s): {best['mode']}",
        f"#   median speedup {best['speedup_median']:.2f}x (min {best['speedup_min']:.2f}x, "
        f"max {best['speedup_max']:.2f}x) over the baseline",
        f"#   {_f(best['tokens_per_second'], '.1f')} tok/s vs "
        f"{_f(base_row['tokens_per_second'] if base_row else None, '.1f')} baseline (medians); "
        f"acceptance {_f(best['acceptance_rate'], '.2f')}; mean accepted length "
        f"{_f(best['mean_accepted_length'], '.2f')}",
        f"# Measured on {len(plan.prompts)} prompt(s) ({cats}), max_tokens {plan.base.max_tokens}, "
        f"repeat {plan.opts.repeat}, temperature {plan.base.temperature:g}, {os.cpu_count()} CPU(s).",
        "# Every mode tried (median speedup):",
    ]
    lines += [f"#   {r['mode']}: {_speed(r['speedup_median'])}"
              f"{'  (MISMATCH)' if r['mismatches'] else ''}" for r in overall]
    meta: dict[str, Any] = {"description": f"tuned by specli bench: {best['mode']} "
                                           f"({best['speedup_median']:.2f}x median speedup)"}
    parent = _extends(plan.opts.profile)
    if parent is not None:
        meta["extends"] = parent
    body = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    body += "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def write_profile(plan: Plan, rows: Sequence[dict[str, Any]], best: dict[str, Any], name: str) -> Path:
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


def _write(path: str | Path, text: str, what: str) -> None:
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    p = Path(path).expanduser()
    try:
        if p.parent != Path(""):
            p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write the {what} file {p}: {e.strerror or e}") from None


def report(result: BenchResult, rows: Sequence[dict[str, Any]], divergences: Sequence[dict[str, Any]],
           console: Console) -> None:
    """The terminal output: tables, bar chart, lossless verdict."""
    plan = result.plan
    if not result.records:
        console.print("[yellow]no generation finished: nothing to report[/]")
        return
    console.print(summary_table(rows))
    console.print(detail_table(rows))
    chart = bar_chart(rows)
    if chart:
        console.print(Text(chart))
    greedy = all(s.temperature == 0 for s in plan.settings.values())
    compared = sum(1 for r in result.records if r["lossless"] in COMPARED)
    ties = [x for x in divergences if x["verdict"] == "near-tie"]
    mismatches = [x for x in divergences if x["verdict"] == "mismatch"]
    for x in divergences:
        bad = x["verdict"] == "mismatch"
        gap = "-" if x["baseline_gap"] is None else f"{x['baseline_gap']:.3g}"
        bound = "-" if x["tie_bound"] is None else f"{x['tie_bound']:.3g}"
        console.print(
            f"{'[bold red]MISMATCH[/] [red]' if bad else '[yellow]near-tie[/] '}{escape(x['mode'])}: prompt "
            f"{escape(x['prompt_id'])} repeat {x['repeat'] + 1} turn {x['turn'] + 1}: first differing token at "
            f"position {x['first_diff']} (baseline {x['baseline_token']} vs {x['mode_token']}; baseline runner-up "
            f"{x['baseline_runner_up']}, logit gap {gap}, near-tie bound {bound}; lengths {x['baseline_length']} "
            f"and {x['mode_length']}){'[/]' if bad else ''}"
        )
    if not greedy:
        console.print("[yellow]lossless check skipped: temperature > 0 (outputs are samples)[/]")
    elif mismatches:
        console.print(f"[bold red]lossless check failed: {len(mismatches)} of {compared} outputs differ "
                      "from the baseline beyond a floating-point near-tie[/]")
    elif compared == 0:
        console.print("lossless check: nothing to compare (only the baseline ran)")
    else:
        console.print(f"[green]lossless check passed: {compared - len(ties)} of {compared} outputs identical to "
                      f"the baseline, {len(ties)} diverged at a floating-point near-tie, 0 mismatches "
                      "(temperature 0)[/]")
    if result.interrupted:
        how = "terminated (SIGTERM)" if result.stopped_by == "SIGTERM" else "interrupted"
        console.print(f"[yellow]{how}: {len(result.records)} of {plan.n_generations} generations measured[/]")


def command(opts: BenchOptions, *, verifier: Verifier | None = None, console: Console | None = None,
            err_console: Console | None = None) -> int:
    """`specli bench` from start to end. Returns the exit code (0; 130 after Ctrl-C,
    143 after SIGTERM, both once the results so far are written and shown); raises
    LosslessError (exit 9) after writing every output when a mode's tokens differ
    from the baseline's at temperature 0."""
    err = err_console or Console(stderr=True, highlight=False)
    if console is None:
        console = err if opts.json_out == "-" else Console(highlight=False)
        if not console.is_terminal:  # a file or pipe: do not squeeze the tables into 80 columns
            console = Console(highlight=False, stderr=console.stderr, width=max(console.width, 140))
    plan = plan_bench(opts)
    result = BenchResult(plan, started=datetime.datetime.now().astimezone().isoformat(timespec="seconds"))
    t0 = time.perf_counter()
    failure: SpecliError | None = None
    try:
        execute(plan, result, verifier, err)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated) under the CLI's handler
        result.interrupted = True
        result.stopped_by = "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"
    except SpecliError as e:
        failure = e
        result.error = e.one_line()
    result.seconds = time.perf_counter() - t0
    if failure is not None and not result.records:
        raise failure

    divergences = divergences_of(result.records, result.numerics.get("tie_bound"))
    mismatches = [x for x in divergences if x["verdict"] == "mismatch"]
    rows = aggregate(result.records, [m.name for m in plan.modes])
    best = best_mode(plan, rows) if (opts.sweep or opts.write_profile) else None
    if opts.json_out:
        _write(opts.json_out, json.dumps(document(result, rows, divergences, best), indent=2) + "\n", "JSON")
    if opts.csv_out:
        _write(opts.csv_out, csv_text(result.records), "CSV")
    if opts.markdown_out:
        _write(opts.markdown_out, markdown_table(rows), "Markdown")
    report(result, rows, divergences, console)
    if failure is not None:
        raise failure
    if result.interrupted:
        if opts.write_profile:
            err.print("[yellow]--write-profile skipped: the run was interrupted[/]")
        return EXIT_TERMINATED if result.stopped_by == "SIGTERM" else EXIT_INTERRUPTED
    if opts.write_profile:
        if best is None:
            err.print("[yellow]--write-profile: no drafting mode finished without a mismatch; nothing written[/]")
        else:
            path = write_profile(plan, rows, best, opts.write_profile)
            console.print(f"wrote profile {opts.write_profile} ({best['mode']}, "
                          f"{best['speedup_median']:.2f}x): {path}")
    if mismatches:
        modes = sorted({x["mode"] for x in mismatches})
        raise LosslessError(
            f"lossless check failed: {len(mismatches)} output(s) differ from the baseline "
            f"({', '.join(modes)})",
            "the first differing positions are listed above",
        )
    return 0
