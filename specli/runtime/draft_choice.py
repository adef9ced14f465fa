"""Which draft model drafts for a target: the one the user named (drafting across
tokenizers where its vocabulary differs, unless pairing is strict), or with `--draft
auto` (the default) the smallest model on this machine that pairs with the target, or
none, with a note that says which and why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specli import registry
from specli.backend import ModelFile, read_model_file
from specli.errors import ModelError, PairError, SpecliError, UsageError
from specli.gguf import GgufSummary, validate_gguf
from specli.heads.loaded import has_heads
from specli.profiles import Settings, needs_draft_model
from specli.profiles.settings import NEEDS_DRAFT_MODEL
from specli.registry.lookup import LocalModel, local_models
from specli.runtime.pair import MAX_VOCAB_DIFF, check_pair

AUTO = "auto"
# a draft at most this share of the target's file: a bigger one rarely pays for its steps
MAX_DRAFT_SHARE = 0.5
VOCAB_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id")


@dataclass(frozen=True)
class DraftChoice:
    """The draft model to load (None: none), its file read once (structure and tokenizer,
    for the caller to load and close), whether it drafts across tokenizers, and what to
    tell the user about it ('' where the user named a pairing model)."""

    path: Path | None
    name: str | None = None
    cross: bool = False
    note: str = ""
    file: ModelFile | None = None
    n_common: int = 0  # the vocabulary both share (check_pair's), for a pairing draft


def vocab_signature(summary: GgufSummary) -> tuple[object, ...]:
    """What a GGUF's metadata says of its tokenizer: type and special tokens."""
    return tuple(summary.metadata.get(k) for k in VOCAB_KEYS)


def n_tokens(summary: GgufSummary) -> int:
    tokens = summary.metadata.get("tokenizer.ggml.tokens")
    return int(getattr(tokens, "length", 0) or 0)


def may_pair(target: GgufSummary, draft: GgufSummary) -> bool:
    """A cheap first look (metadata only) at whether two files may share a vocabulary;
    `check_pair` on their tokenizers decides."""
    return (vocab_signature(target) == vocab_signature(draft)
            and abs(n_tokens(target) - n_tokens(draft)) <= MAX_VOCAB_DIFF)


def candidates(target_path: Path, models: Sequence[LocalModel]) -> list[LocalModel]:
    """The local models small enough to draft for the target, smallest first; one file
    found under several names is tried once."""
    size = target_path.stat().st_size
    seen = {target_path.resolve()}
    out = []
    for m in sorted(models, key=lambda m: (m.size, m.where != "registry", m.name)):
        real = m.path.resolve()
        if real in seen or m.size > size * MAX_DRAFT_SHARE:
            continue
        seen.add(real)
        out.append(m)
    return out


def choose_draft(target: ModelFile, target_name: str, models: Sequence[LocalModel] | None = None) -> DraftChoice:
    """`--draft auto`: the smallest local model that pairs with the target (GGUF metadata
    first, then check_pair on its tokenizer), its file kept open for loading; else none."""
    for m in candidates(target.path, local_models() if models is None else models):
        try:
            summary = validate_gguf(m.path)
            if not may_pair(target.gguf, summary):
                continue
            f = read_model_file(m.path, summary)
        except ModelError:
            continue
        try:
            n_common = check_pair(target.vocab, f.vocab)
        except PairError:
            f.close()
            continue
        where = "" if m.where in ("registry", "added") else f", found in the {m.where}"
        return DraftChoice(m.path, m.name, note=f"draft model: {m.name} (the smallest local model with "
                                                f"{target_name}'s vocabulary{where})", file=f, n_common=n_common)
    info = target.vocab.info()
    return DraftChoice(None, note=f"no draft model pairs with {target_name} ({info.vocab_type} vocabulary, "
                                  f"{info.n_vocab} tokens){_missing_pair_hint(target_name)}")


@dataclass(frozen=True)
class LocalDraft:
    name: str
    path: Path
    size: int
    pairing: str  # "same vocabulary" or "across tokenizers"


def local_drafts(target_path: Path, models: Sequence[LocalModel] | None = None) -> list[LocalDraft]:
    """The local models small enough to draft for the target, smallest first, and how
    each would: with the same vocabulary (what `--draft auto` picks), or across tokenizers
    (named with `--draft`)."""
    out = []
    with read_model_file(target_path) as target:
        for m in candidates(target_path, local_models() if models is None else models):
            same = False
            try:
                summary = validate_gguf(m.path)
                if may_pair(target.gguf, summary):
                    with read_model_file(m.path, summary) as f:
                        check_pair(target.vocab, f.vocab)
                        same = True
            except (PairError, ModelError):
                pass
            out.append(LocalDraft(m.name, m.path, m.size, "same vocabulary" if same else "across tokenizers"))
    return out


def _missing_pair_hint(target_name: str) -> str:
    """Where the registry has a draft of the target's family that is not downloaded: how
    to get it."""
    try:
        reg = registry.load_registry()
    except SpecliError:
        return ""
    spec = reg.get(target_name)
    if spec is None:
        return ""
    drafts = sorted((s for s in reg.values() if s.family == spec.family and s.size <= spec.size * MAX_DRAFT_SHARE
                     and not registry.is_present(s)), key=lambda s: s.size)
    return f"; {drafts[0].name} would (specli models pull {drafts[0].name})" if drafts else ""


def cross_note(draft_name: str, target_name: str, why: str) -> str:
    return (f"draft model {draft_name} has another vocabulary than {target_name} ({why}): it drafts text, "
            "re-tokenized for the target (--draft-pairing strict refuses such a pair)")


def choose(s: Settings, target: ModelFile) -> DraftChoice:
    """The draft model of settings `s` for the target read in `target`: none where the
    drafter uses none; the smallest pairing local model for `--draft auto`; a named one
    as it is, drafting across tokenizers where its vocabulary differs (unless strict)."""
    if not needs_draft_model(s) or s.draft is None or (s.draft == AUTO and s.drafter == "auto" and not s.auto_draft):
        return DraftChoice(None)
    name = _model_name(s.target, target.path)
    if s.draft == AUTO:
        choice = choose_draft(target, name)
        if choice.path is None and s.drafter in NEEDS_DRAFT_MODEL:
            raise UsageError(f"drafter '{s.drafter}' needs a draft model, and {choice.note}",
                             "name one with --draft NAME, or use --drafter auto or ngram")
        if choice.path is None:
            return replace(choice, note=choice.note + "; drafting from " + _without_model(s, target.path))
        return choice
    path = registry.resolve(s.draft)
    if path.resolve() == target.path.resolve():
        return DraftChoice(path, s.draft, n_common=target.vocab.n_vocab)  # for itself: one file serves both
    f = read_model_file(path)
    try:
        n_common = check_pair(target.vocab, f.vocab)
    except PairError:
        if s.draft_pairing == "strict":
            f.close()
            raise
        t, d = target.vocab.info(), f.vocab.info()
        why = f"{d.vocab_type}, {d.n_vocab} tokens, against {t.vocab_type}, {t.n_vocab}"
        return DraftChoice(path, s.draft, cross=True, note=cross_note(_model_name(s.draft, path), name, why), file=f)
    return DraftChoice(path, s.draft, file=f, n_common=n_common)


def _model_name(name: str, path: Path) -> str:
    """A model as the user knows it: its name, or its file's for a path."""
    return path.stem if Path(name).expanduser().is_file() else name


def _without_model(s: Settings, target_path: Path) -> str:
    """What auto drafts from with no draft model."""
    parts = ["n-grams"] + (["history"] if s.history else [])
    if s.auto_heads and (s.heads is not None or has_heads(target_path)):
        parts.append("trained heads")
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def draft_path(s: Settings) -> Path | None:
    """The draft model file a run with settings `s` would load (None: none), for peers
    and clients that load it themselves."""
    if s.draft is None:
        return None
    if s.draft != AUTO:
        return registry.resolve(s.draft)
    with read_model_file(registry.resolve(s.target)) as f:
        return choose(replace(s, drafter="auto", draft_max=max(1, s.draft_max)), f).path
