"""Turns resolved Settings into loaded models, a drafter and prompt tokens.

Shared by every command (generate, chat, bench) so they wire things the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from specli import calibration, registry
from specli.backend import (
    LoadOptions,
    Model,
    available_memory,
    build_id,
    free_vocab_handle,
    read_model_info,
    read_vocab,
    supports_gpu_offload,
)
from specli.calibration import Calibration
from specli.controller import Costs
from specli.drafters import AutoDrafter, DraftModelDrafter, HybridDrafter, NgramDrafter
from specli.engine import GenerationConfig
from specli.errors import ModelError, UsageError
from specli.pair import check_pair
from specli.profiles import Settings
from specli.types import Drafter


def load_options(s: Settings, for_draft: bool) -> LoadOptions:
    return LoadOptions(
        n_gpu_layers=s.draft_n_gpu_layers if for_draft else s.n_gpu_layers,
        main_gpu=s.main_gpu,
        tensor_split=s.tensor_split,
        n_threads=s.threads,
        n_ctx=s.ctx,
        n_batch=s.n_batch,
        flash_attn=s.flash_attn,
        kv_type=s.kv_type,
        exact_verify=s.verify == "exact" and not for_draft,
    )


def uses_draft_model(s: Settings) -> bool:
    return s.drafter in ("draft", "hybrid", "auto") and s.draft is not None


def check_pair_files(target_path: Path, draft_path: Path) -> int:
    """Pair check on the tokenizers alone, before any weights are loaded."""
    t_vocab, t_handle = read_vocab(target_path)
    try:
        d_vocab, d_handle = read_vocab(draft_path)
        try:
            return check_pair(t_vocab, d_vocab)
        finally:
            free_vocab_handle(d_handle)
    finally:
        free_vocab_handle(t_handle)


@dataclass
class Runtime:
    settings: Settings
    target: Model
    draft: Model | None = None
    n_common: int = 0
    notes: list[str] = field(default_factory=list)  # things the user should be told
    recalibrate: bool = False  # measure costs and numerics again instead of using the cache
    _calibration: Calibration | None = field(default=None, repr=False)
    _costs: dict[str, Costs] = field(default_factory=dict, repr=False)  # per verify mode

    def close(self) -> None:
        self.save_costs()
        if self.draft is not None:
            self.draft.close()
        self.target.close()

    def drafter(self, s: Settings | None = None) -> Drafter | None:
        """The drafter for settings `s` (default: the runtime's own)."""
        s = s or self.settings
        if s.drafter == "none" or s.draft_max == 0:
            return None
        ngram = NgramDrafter(s.ngram_min, s.ngram_max, self.target.is_eog)
        if s.drafter == "ngram":
            return ngram
        if s.drafter == "auto":
            model = self._draft_model_drafter(s) if self.draft is not None else None
            return AutoDrafter(self.costs(s), model, ngram)
        if self.draft is None:
            raise UsageError(f"drafter '{s.drafter}' needs a draft model", "set --draft NAME or use --drafter ngram")
        if s.drafter == "hybrid":
            return HybridDrafter(self._draft_model_drafter(s), ngram)
        return self._draft_model_drafter(s)

    def _draft_model_drafter(self, s: Settings) -> DraftModelDrafter:
        assert self.draft is not None
        return DraftModelDrafter(
            self.draft,
            s.sampling(),
            n_common=self.n_common,
            n_vocab_out=self.target.n_vocab,
            p_min=s.p_min,
            draft_min=s.draft_min,
        )

    def calibration_key(self) -> str:
        s = self.settings
        parts = [self.target.path.name, str(self.target.size_bytes), build_id(), f"ngl{s.n_gpu_layers}",
                 f"t{s.threads or 'auto'}", s.kv_type, s.flash_attn, s.verify]
        if self.draft is not None:
            parts += [self.draft.path.name, str(self.draft.size_bytes), f"dngl{s.draft_n_gpu_layers}"]
        return "|".join(parts)

    def calibration(self) -> Calibration:
        """This machine's measured costs and numerics (cached on disk; measured on first use)."""
        if self._calibration is None:
            context = self.target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
            self._calibration = calibration.load_or_measure(
                self.calibration_key(), self.target, self.draft, context, recalibrate=self.recalibrate)
            self.target.exact_batch = self._calibration.exact_batch
        return self._calibration

    def costs(self, s: Settings | None = None) -> Costs:
        """Costs for settings `s`, refined online by every run of this runtime."""
        s = s or self.settings
        if s.verify not in self._costs:
            cal = self.calibration()
            chunk = cal.exact_batch if s.verify == "exact" else None
            self._costs[s.verify] = Costs(cal.t1, list(cal.sizes), list(cal.ratios), cal.draft_ratio, chunk)
        return self._costs[s.verify]

    def save_costs(self) -> None:
        """Store the table corrected online when observed costs drifted from it, so the
        next run starts from what this one learned (a calibration taken on a busy
        machine cannot poison later runs)."""
        cal = self._calibration
        drifted = [c for c in self._costs.values() if c.drifted and c.chunk is None]
        if cal is None or not drifted:
            return
        t1, ratios, draft_ratio = drifted[0].corrected()
        calibration.store(self.calibration_key(), replace(cal, t1=t1, ratios=ratios, draft_ratio=draft_ratio))
        drifted[0].drifted = False

    def generation_config(self, s: Settings | None = None) -> GenerationConfig:
        s = s or self.settings
        if s.verify == "exact":
            self.calibration()  # the exact chunk is measured, not assumed
        return GenerationConfig(
            max_tokens=s.max_tokens, sampling=s.sampling(), draft_max=s.draft_max, stop=tuple(s.stop),
            exact=s.verify == "exact",
        )

    def prompt_tokens(self, prompt: str, s: Settings | None = None) -> list[int]:
        s = s or self.settings
        if not prompt.strip():
            raise UsageError("the prompt is empty", "pass some text, or - to read it from stdin")
        if s.raw or not self.target.chat_template:
            return self.target.tokenize(prompt, add_special=True, parse_special=s.raw)
        return self.target.chat_tokens(self.messages([], prompt, s.system))

    @staticmethod
    def messages(history: Sequence[dict[str, str]], user: str, system: str | None) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": system}] if system else []
        return [*msgs, *history, {"role": "user", "content": user}]


CALIBRATION_TEXT = "def calibrate(values):\n    return [v * v for v in values if v % 3]\n\n" * 12
CALIBRATION_CONTEXT = 128

KV_BYTES = {"auto": 1.0, "f32": 2.0, "f16": 1.0, "q8_0": 34 / 64, "q4_0": 18 / 64}  # relative to F16


def fit_context(s: Settings, path: Path, notes: list[str]) -> int:
    """The context to ask for: the setting, capped at what the model was trained for,
    refused early when model + KV cache cannot fit in free memory (CPU only)."""
    info = read_model_info(path)
    n_ctx = s.ctx
    trained = int(info.get("context_length") or 0)
    if trained and n_ctx > trained:
        notes.append(f"{path.name} was trained for {trained} tokens of context: using {trained}, not {n_ctx}")
        n_ctx = trained
    avail = available_memory()
    if avail is not None and not supports_gpu_offload():
        need = path.stat().st_size + int(info.get("kv_bytes_per_token", 0) * KV_BYTES[s.kv_type]) * n_ctx
        if need > avail:
            raise ModelError(
                f"{path.name} with a {n_ctx}-token context needs about {need / 2**30:.1f} GiB "
                f"but only {avail / 2**30:.1f} GiB of memory is free",
                "lower --ctx, use --kv-type q8_0 or a smaller model",
            )
    return n_ctx


def open_runtime(s: Settings, recalibrate: bool = False) -> Runtime:
    """Resolve names, check the pair on tokenizers, then load the weights."""
    target_path = registry.resolve(s.target)
    draft_path = registry.resolve(s.draft) if uses_draft_model(s) and s.draft else None
    n_common = check_pair_files(target_path, draft_path) if draft_path else 0
    notes: list[str] = []
    target_opts = replace(load_options(s, for_draft=False), n_ctx=fit_context(s, target_path, notes))
    draft_opts = None
    if draft_path is not None:
        # the draft never needs more context than the target; with less it stops drafting
        draft_ctx = min(fit_context(s, draft_path, notes), target_opts.n_ctx)
        draft_opts = replace(load_options(s, for_draft=True), n_ctx=draft_ctx)
    target = Model(target_path, target_opts)
    draft = None
    try:
        if draft_path is not None and draft_opts is not None:
            draft = Model(draft_path, draft_opts)
    except BaseException:
        target.close()
        raise
    return Runtime(s, target, draft, n_common or target.n_vocab, notes=notes, recalibrate=recalibrate)
