"""What bench measures: modes (`baseline`, `DRAFTER[:key=value,...]`), peers and
the `--sweep` grid, parsed from their command-line strings (values are checked later,
through the profiles)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from specli.errors import UsageError
from specli.profiles import RELOAD_KEYS, setting_name

BASELINE = "baseline"
PEERS = ("llama-cpp-python", "llama.cpp")
LLAMA_CPP = "llama.cpp"
LLAMA_CPP_BASELINE = "peer:llama.cpp"  # llama.cpp's plain decoding: its peers' baseline
DEFAULT_MODES = "baseline,draft,ngram"
MAX_SWEEP_MODES = 256
# Settings a mode may not change: they need the models reloaded, or change the prompt,
# the length of the output or the verification (which would make outputs incomparable).
FIXED_KEYS = RELOAD_KEYS | {"max_tokens", "system", "raw", "stop", "verify"}
KEY_ALIASES = {"k": "draft_max"}
# fixed keys that `specli bench` takes as options of its own
BENCH_FLAGS = frozenset({"target", "draft", "ctx", "threads", "n_gpu_layers", "draft_n_gpu_layers", "max_tokens",
                         "stop", "system", "raw"})
PEER_KEYS = frozenset({"draft_max", "ngram_max"})
SPEC_TYPES = ("ngram-simple", "ngram-mod", "draft")  # llama.cpp's speculative modes


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
    k = key.strip().lower()
    return KEY_ALIASES.get(k, setting_name(k))


def _label(drafter: str, options: Iterable[tuple[str, str]]) -> str:
    inv = {v: k for k, v in KEY_ALIASES.items()}
    opts = ",".join(f"{inv.get(k, k)}={v}" for k, v in options)
    return f"{drafter}:{opts}" if opts else drafter


def _parse_options(items: Iterable[str], where: str, allowed: frozenset[str] | None = None) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise UsageError(f"{where}: expected KEY=VALUE, got {item!r}", "e.g. draft:k=5,draft_p_min=0.3")
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
                "pass --exact to bench instead" if name == "verify"
                else f"pass --{name.replace('_', '-')} to bench instead" if name in BENCH_FLAGS
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
        raise UsageError("empty mode", "modes look like baseline, draft, draft:k=5,draft_p_min=0.3, ngram:k=6")
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
    """A list of modes: `baseline,draft:k=3,draft_p_min=0.5,ngram`. A comma-separated token
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
        if not tail.strip():
            raise UsageError(f"--peer {text.strip()!r}: name llama.cpp's mode", "e.g. llama.cpp:ngram-simple")
        kind, k = parse_peer_spec(tail)
        spec = kind if k is None else f"{kind}:k={k}"
        return Mode(f"peer:{LLAMA_CPP}:{spec}", LLAMA_CPP, (("draft_max", str(k)),) if k else (), peer=True,
                    spec=spec)
    items = tail.split(",") if colon else []
    options = _parse_options(items, f"--peer {text.strip()!r}", allowed=PEER_KEYS)
    return Mode("peer:" + _label(name, options), name, options, peer=True)


def parse_peer_spec(spec: str) -> tuple[str, int | None]:
    """`ngram-simple`, `ngram-mod` or `draft:k=N` -> (spec type, k)."""
    head, _, tail = spec.strip().partition(":")
    kind = head.strip().lower()
    if kind not in SPEC_TYPES:
        raise UsageError(f"unknown llama.cpp peer mode {spec!r}", "one of llama.cpp:ngram-simple, "
                         "llama.cpp:ngram-mod, llama.cpp:draft:k=N")
    k = None
    if tail.strip():
        key, eq, value = tail.partition("=")
        if kind != "draft" or key.strip().lower() not in ("k", "draft_max") or not eq or not value.strip().isdigit():
            raise UsageError(f"llama.cpp peer mode {spec!r}: only draft takes an option, k=N", "e.g. llama.cpp:draft:k=3")
        k = int(value)
    return kind, k


def _expand(token: str, key: str) -> list[str]:
    if ".." not in token:
        return [token]
    a, _, b = token.partition("..")
    try:
        lo, hi = int(a), int(b)
    except ValueError:
        raise UsageError(f"--sweep {key}: range {token!r} needs integers, like 1..8",
                         "list other values with commas: draft-p-min=0,0.3,0.6") from None
    if lo > hi:
        raise UsageError(f"--sweep {key}: empty range {token!r}", f"write {hi}..{lo}")
    return [str(i) for i in range(lo, hi + 1)]


def parse_sweep(text: str) -> list[tuple[str, list[str]]]:
    """`draft-max=1..8,draft-p-min=0,0.3,0.6` -> [("draft_max", ["1".."8"]), ("draft_p_min", ["0", "0.3", "0.6"])].
    A token containing `=` starts a new axis; `a..b` is an integer range."""
    axes: list[tuple[str, list[str]]] = []
    for raw in text.split(","):
        token = raw.strip()
        if not token:
            raise UsageError(f"--sweep {text!r}: empty value", "e.g. draft-max=1..8,draft-p-min=0,0.3,0.6")
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
        raise UsageError("--sweep is empty", "e.g. draft-max=1..8,draft-p-min=0,0.3,0.6")
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

