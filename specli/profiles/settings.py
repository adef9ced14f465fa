"""The settings table: every tunable of a run, its default, type, range and doc."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

from specli.profiles.spec import Spec
from specli.types import SamplingParams

DRAFTERS = ("draft", "ngram", "suffix", "hybrid", "medusa", "eagle", "auto", "none")
VERIFY_MODES = ("batch", "exact")
FLASH_ATTN = ("auto", "on", "off")
KV_TYPES = ("auto", "f16", "q8_0", "q4_0", "f32")
# drafters that draft with the draft model; auto uses one when it is set
MODEL_DRAFTERS = ("draft", "hybrid", "auto")
# ...and those that cannot run without one
NEEDS_DRAFT_MODEL = ("draft", "hybrid")

# old key -> new key; the old one is still read, with a note naming the new one
DEPRECATED_KEYS = {"p_min": "draft_p_min"}


def _setting(default: Any, spec: Spec, reload: bool = False) -> Any:
    return field(default=default, metadata={"spec": replace(spec, reload=reload)})


def _int(
    default: int | None,
    lo: int | None = None,
    hi: int | None = None,
    *,
    doc: str,
    nullable: bool = False,
    null_words: tuple[str, ...] = (),
    reload: bool = False,
) -> Any:
    return _setting(default, Spec("int", doc, lo, hi, nullable=nullable, null_words=null_words), reload)


def _float(
    default: float,
    lo: float | None = None,
    hi: float | None = None,
    *,
    doc: str,
    lo_open: bool = False,
    hi_open: bool = False,
) -> Any:
    return _setting(default, Spec("float", doc, lo, hi, lo_open, hi_open))


def _str(
    default: str | None, *, doc: str, nullable: bool = False, null_words: tuple[str, ...] = (), reload: bool = False
) -> Any:
    return _setting(default, Spec("str", doc, nullable=nullable, null_words=null_words), reload)


def _choice(
    default: str,
    choices: tuple[str, ...],
    *,
    doc: str,
    aliases: tuple[tuple[Any, str], ...] = (),
    reload: bool = False,
) -> Any:
    return _setting(default, Spec("choice", doc, choices=choices, aliases=aliases), reload)


def _bool(default: bool, *, doc: str) -> Any:
    return _setting(default, Spec("bool", doc))


_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
_DRAFT = "auto"  # the smallest local model that pairs with the target (runtime.draft_choice)


@dataclass(frozen=True)
class Settings:
    """Every tunable of a run. Add a setting here (one line) and it is validated,
    accepted in profiles, shown by `profiles show` and documented. `reload=True`
    marks a setting that cannot change without loading the models again."""

    # models
    target: str = _str(_TARGET, doc="target model: registry name or GGUF path", reload=True)
    draft: str | None = _str(
        _DRAFT, nullable=True, null_words=("none",), reload=True,
        doc="draft model: registry name, local name or GGUF path; auto = the smallest local model with the target's "
            "vocabulary, if any; none = no model")
    draft_pairing: str = _choice(
        "cross", ("cross", "strict"), reload=True,
        doc="a named draft model of another vocabulary: cross = it drafts text, re-tokenized for the target; "
            "strict = refused")
    # drafting
    drafter: str = _choice("draft", DRAFTERS, doc="who drafts: model, n-gram lookup, suffix (earlier outputs too), both, "
                                                        "Medusa heads, the EAGLE feature drafter (specli heads train), auto or none")
    draft_max: int = _int(4, 0, 64, doc="most tokens drafted per step")
    heads: str | None = _str(None, nullable=True, null_words=("default",),
                             doc="trained heads (a folder of `specli heads list`) medusa and eagle draft with; "
                                 "null = the target's own", reload=True)
    verify: str = _choice(
        "batch", VERIFY_MODES, reload=True,
        doc="batch: the whole draft in one target batch (greedy output equals the target's except at "
            "floating-point near-ties); exact: chunks bit-identical to one-token decoding (slower)",
    )
    auto_ledger: bool = _bool(True, doc="auto drafts only while its drafts have not lost lately (false: by its "
                                        "prices alone; faster with a draft model on memory-bound targets, "
                                        "unbounded where text does not repeat)")
    auto_heads: bool = _bool(True, doc="auto drafts with the target's trained heads too, where there are any "
                                       "(specli heads train)")
    auto_draft: bool = _bool(True, doc="auto drafts with the draft model too, where one is set")
    draft_min: int = _int(0, 0, 64, doc="fewest tokens drafted per step (<= draft_max)")
    draft_p_min: float = _float(0.0, 0.0, 1.0, doc="stop drafting below this draft-model top probability")
    ngram_min: int = _int(3, 1, 16, doc="shortest n-gram the n-gram drafter matches")
    ngram_max: int = _int(12, 1, 16, doc="longest n-gram the n-gram drafter matches (>= ngram_min)")
    grammar_drafts: bool = _bool(True, doc="under a grammar (--json-schema, --grammar), draft the tokens it forces")
    history: bool = _bool(True, doc="keep generated text (under the user cache dir) to draft from in later runs: "
                                    "suffix and auto drafters; off = nothing kept or read")
    history_max_tokens: int = _int(2_000_000, 0, doc="most tokens of earlier outputs kept per vocabulary")
    # sampling
    temperature: float = _float(0.0, 0.0, 5.0, doc="sampling temperature; 0 = greedy")
    top_k: int = _int(0, 0, doc="keep the k most likely tokens; 0 = off")
    top_p: float = _float(1.0, 0.0, 1.0, lo_open=True, doc="nucleus sampling mass; 1 = off")
    min_p: float = _float(0.0, 0.0, 1.0, hi_open=True, doc="drop tokens below min_p x top prob; 0 = off")
    seed: int | None = _int(None, 0, nullable=True, doc="sampling seed; null = random")
    # generation
    max_tokens: int = _int(256, 1, doc="most tokens generated per reply")
    stop: tuple[str, ...] = _setting((), Spec("strs", "stop strings: a string or a list of strings"))
    system: str | None = _str(None, nullable=True, doc="system prompt; null = the model's default")
    raw: bool = _bool(False, doc="send the prompt as-is, without the chat template")
    # runtime
    ctx: int = _int(4096, 64, 1_048_576, doc="context window in tokens", reload=True)
    n_batch: int = _int(512, 1, doc="prompt-processing batch size", reload=True)
    threads: int | None = _int(
        None, 1, nullable=True, null_words=("auto",), doc="CPU threads; auto/null = let llama.cpp choose",
        reload=True,
    )
    n_gpu_layers: int = _int(0, -1, doc="target layers offloaded to the GPU; -1 = all", reload=True)
    draft_n_gpu_layers: int = _int(0, -1, doc="draft-model layers offloaded to the GPU; -1 = all", reload=True)
    main_gpu: int = _int(0, 0, doc="GPU index used for the model", reload=True)
    tensor_split: tuple[float, ...] | None = _setting(
        None, Spec("floats", "share of the model per GPU, e.g. [3, 1]; null = even", nullable=True), reload=True
    )
    rpc: tuple[str, ...] | None = _setting(
        None, Spec("endpoints", "llama.cpp RPC servers (`specli rpc-server`) the target's offloaded layers go to, "
                                "e.g. 192.168.1.20:50052,192.168.1.21:50052; null = this machine only",
                   nullable=True, null_words=("none", "local")), reload=True,
    )
    draft_rpc: tuple[str, ...] | None = _setting(
        None, Spec("endpoints", "RPC servers for the draft model's offloaded layers; null = the draft stays local",
                   nullable=True, null_words=("none", "local")), reload=True,
    )
    rpc_timeout: float = _setting(120.0, Spec(
        "float", "seconds to wait for one llama.cpp call over RPC before giving the server up as lost",
        0.0, 3600.0, lo_open=True), reload=True)
    flash_attn: str = _choice(
        "auto", FLASH_ATTN, aliases=((True, "on"), (False, "off")), reload=True,
        doc="flash attention: auto (llama.cpp decides: on where supported), on or off",
    )
    kv_type: str = _choice(
        "auto", KV_TYPES, reload=True, doc="KV-cache element type; auto = f16, or q8_0 for verify: exact on CPU"
    )

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            seed=self.seed,
        )


SPECS: dict[str, Spec] = {f.name: f.metadata["spec"] for f in fields(Settings)}
SETTING_NAMES: tuple[str, ...] = tuple(SPECS)
# settings that cannot change while the models stay loaded (a chat session, a bench run)
RELOAD_KEYS: frozenset[str] = frozenset(name for name, spec in SPECS.items() if spec.reload)


def normalize_key(key: str) -> str:
    """A key as written (`draft-max`, ` ctx`) to its setting-name spelling."""
    return key.strip().replace("-", "_")


def setting_name(key: str) -> str:
    """The setting `key` names: dashes read as underscores, an old name as its new one."""
    name = normalize_key(key)
    return DEPRECATED_KEYS.get(name, name)


def needs_draft_model(s: Settings) -> bool:
    """Whether a run with `s` drafts with the draft model, so has to load it: a drafter
    that uses one (auto: when one is set) and drafts at all."""
    return s.drafter in MODEL_DRAFTERS and s.draft is not None and s.draft_max > 0


def reads_history(s: Settings) -> bool:
    """Whether a run with `s` drafts from earlier outputs (the history store): suffix,
    or auto with history on, drafting at all."""
    return s.history and s.draft_max > 0 and s.drafter in ("suffix", "auto")


class FieldInfo(NamedTuple):
    name: str
    type: str
    default: str
    help: str


def _yaml_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(_yaml_text(v) for v in value) + "]"
    return str(value)


def describe_fields() -> list[FieldInfo]:
    """(name, type text, default as YAML text, help) for every setting."""
    return [
        FieldInfo(f.name, SPECS[f.name].type_text(), _yaml_text(f.default), SPECS[f.name].doc)
        for f in fields(Settings)
    ]


def settings_to_dict(s: Settings) -> dict[str, Any]:
    """JSON-friendly dict of every setting, in declaration order (tuples -> lists)."""
    out: dict[str, Any] = {}
    for f in fields(Settings):
        value = getattr(s, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out
