"""Turns resolved Settings into loaded models, a drafter and prompt tokens.

Shared by every command (generate, chat, bench) so they wire things the same way.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from specli import registry
from specli.backend import (
    LoadOptions,
    Model,
    ModelFile,
    available_memory,
    build_id,
    probe_rpc,
    read_model_file,
    reconnect_rpc,
    start_decode_thread,
    supports_gpu_offload,
)
from specli.drafters import (
    AutoDrafter,
    CrossVocabDrafter,
    DraftModelDrafter,
    HybridDrafter,
    Learned,
    NgramDrafter,
    SuffixDrafter,
)
from specli.drafters.auto.costs import DRIFT, CostModel, interpolate
from specli.engine import GenerationConfig
from specli.engine.adjust import Adjust
from specli.errors import ModelError, SpecliError, UsageError
from specli.heads.loaded import LEARNED_DRAFTERS, LoadedHeads, has_heads, heads_folder, load_heads
from specli.heads.online import OnlineHeads, Round
from specli.history import HistoryStore, SuffixIndex
from specli.profiles import Settings, reads_history
from specli.runtime import prompting
from specli.runtime.draft_choice import choose
from specli.runtime.measure import calibration, first_use
from specli.runtime.measure.calibration import CONTEXT_SIZES, Calibration
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
        rpc=(s.draft_rpc if for_draft else s.rpc) or (),
        rpc_timeout=s.rpc_timeout,
    )


def cost_model(cal: Calibration, chunk: int | None = None) -> CostModel:
    """The cost model `auto` starts from with calibration `cal` (`chunk`: exact verify's batch)."""
    growth = [[r / interpolate(cal.sizes, cal.ratios, n) for n, r in zip(CONTEXT_SIZES, row)]
              for row in cal.context_ratios]
    return CostModel(cal.t1, list(cal.sizes), list(cal.ratios), cal.draft_ratio, chunk,
                     contexts=list(cal.contexts), growth_sizes=list(CONTEXT_SIZES), growth=growth)


@dataclass
class Runtime:
    settings: Settings
    target: Model
    draft: Model | None = None
    n_common: int = 0
    notes: list[str] = field(default_factory=list)  # things the user should be told
    recalibrate: bool = False  # measure costs and numerics again instead of using the cache
    cross: bool = False  # the draft model has another vocabulary: it drafts text (drafters.cross_vocab)
    draft_note: str = ""  # what drafts and why, where the user did not name a pairing draft (also in notes)
    # auto's acceptance carried from one generation to the next (a server, a chat); off for
    # one-shot runs and for bench, whose generations are measured each from a cold start
    learn_across: bool = False
    shared_batches: bool = False  # a server's slot: its batches hold other slots' rows too
    # a server starts at once: batch costs at long context not measured yet are priced from
    # the short-context table and corrected from the requests served (`specli calibrate --ctx`)
    defer_context_costs: bool = False
    # generate, chat: a first use measures only what the run needs (seconds, runtime.measure.first_use) and says so
    # through this at once; the rest waits for `specli calibrate` (None: measured in full, as bench needs)
    announce: Callable[[str], None] | None = None
    _calibration: Calibration | None = field(default=None, repr=False)
    _costs: dict[str, CostModel] = field(default_factory=dict, repr=False)  # per verify mode
    _history: HistoryStore | None = field(default=None, repr=False)
    _learned: dict[tuple[object, ...], Learned] = field(default_factory=dict, repr=False)
    _heads: LoadedHeads | None = field(default=None, repr=False)
    # a cross-vocabulary draft's own rendering of the prompts rendered here (target tokens -> draft tokens)
    draft_prompts: dict[tuple[int, ...], list[int]] = field(default_factory=dict, repr=False)

    def close(self) -> None:
        self.save_costs()
        self.save_history()
        if self.draft is not None:
            self.draft.close()
        self.target.close()

    @property
    def lost(self) -> bool:
        """An RPC server of a model was lost: the runtime cannot generate any more."""
        return self.target.lost or (self.draft is not None and self.draft.lost)

    def reopen(self) -> Runtime:
        """The same settings loaded again, after an RPC server was lost and is back."""
        self.close()
        reconnect_rpc((*(self.settings.rpc or ()), *(self.settings.draft_rpc or ())))
        rt = open_runtime(self.settings)
        rt.learn_across = self.learn_across
        return rt

    def drafter(self, s: Settings | None = None, history: SuffixIndex | None = None,
                keep: bool = True, prediction: Sequence[int] = (), bias: Adjust = Adjust()) -> Drafter | None:
        """The drafter for settings `s` (default: the runtime's own). Suffix and auto
        draft from `history`, or by default from this vocabulary's history store;
        `keep=False` drafts from it but keeps this generation's output out of it. The
        n-gram lookup (in ngram, suffix, hybrid and auto) also drafts from `prediction`,
        the tokens the output is expected to repeat. A draft model drafts under `bias`
        (a request's logit bias)."""
        s = s or self.settings
        if s.drafter == "none" or s.draft_max == 0 or not self.target.rolls_back:
            return None
        ngram = NgramDrafter(s.ngram_min, s.ngram_max, self.target.is_eog, prediction)
        if s.drafter == "ngram":
            return ngram
        if s.drafter in LEARNED_DRAFTERS:
            return self._loaded_heads(s).drafter(s.drafter, self.target, s.sampling())
        suffix = self._suffix_drafter(s, history, ngram, keep)
        if s.drafter == "suffix":
            return suffix or ngram
        if s.drafter == "auto":
            model = self._draft_model_drafter(s, bias) if self.draft is not None and s.auto_draft else None
            trained = self._heads is not None or s.heads is not None or has_heads(self.target.path)
            heads = self._loaded_heads(s).drafters(self.target, s.sampling()) if s.auto_heads and trained else []
            auto = AutoDrafter(self.costs(s), model, ngram, suffix=suffix, learned=self.learned(s),
                               ledger=s.auto_ledger, heads=heads)
            if self.shared_batches:  # a slot's: alone in its rounds, it drafts as alone
                auto.shared_batches = getattr(self.target, "others_busy", auto.shared_batches)
            return auto
        if self.draft is None:
            raise UsageError(f"drafter '{s.drafter}' needs a draft model", "set --draft NAME or use --drafter ngram")
        if s.drafter == "hybrid":
            return HybridDrafter(self._draft_model_drafter(s, bias), ngram)
        return self._draft_model_drafter(s, bias)

    def _loaded_heads(self, s: Settings) -> LoadedHeads:
        """The target's learned drafters (or those `s.heads` names), loaded once; they read
        the target's hidden states, so features go on for good (a verify step pays nothing
        for them)."""
        if self._heads is None:
            self._heads = load_heads(self.target.path, s.target, s.heads, self.target.n_vocab)
            self.target.set_features(True)
            costs = self.costs(s)
            for name, seconds in self._heads.seconds.items():
                if costs.step > 0:
                    costs.heads_ratios.setdefault(name, seconds / costs.step)
        return self._heads

    def online_heads(self, every: int, on_round: Callable[[Round], None],
                     on_error: Callable[[str], None]) -> OnlineHeads:
        """The heads loaded now (features on), with rounds of training on served answers every
        `every` rows (serve --heads-learn); exit 2 where none were trained."""
        s = self.settings
        if s.heads is None and not has_heads(self.target.path):
            raise UsageError(f"--heads-learn goes on training heads, and none were trained for {s.target}",
                             f"train them first: specli heads train --target {s.target}")
        heads = self._loaded_heads(s)
        self.target.hold_features()  # every verified row is a training row
        return OnlineHeads(heads, heads_folder(self.target.path, s.heads), self.target.n_vocab, every, on_round,
                           on_error=on_error)

    def learned(self, s: Settings) -> Learned | None:
        """auto's acceptance so far under settings that draft alike (None: start afresh)."""
        if not self.learn_across:
            return None
        key = (s.temperature, s.top_k, s.top_p, s.min_p, s.draft_p_min, s.ngram_min, s.ngram_max, s.history,
               s.verify)
        learned = self._learned.setdefault(key, Learned())
        learned.fade()
        return learned

    def _suffix_drafter(self, s: Settings, history: SuffixIndex | None, ngram: NgramDrafter,
                        keep: bool = True) -> SuffixDrafter | None:
        """Drafts from earlier outputs beside `ngram` (the same index auto asks), and
        records this run's (unless not `keep`); None with history off."""
        if not s.history:
            return None
        if history is None:
            store = self.history_store(s)
            history, record = store.index, store.add
        else:
            record = history.add
        return SuffixDrafter(history, ngram, record if keep else _discard, s.ngram_min, s.ngram_max)

    def history_store(self, s: Settings | None = None) -> HistoryStore:
        """Earlier outputs of models with this target's vocabulary (opened once)."""
        if self._history is None:
            s = s or self.settings
            self._history = HistoryStore.open(self.target.vocab_key(), max_tokens=s.history_max_tokens)
            self.notes.extend(self._history.notes)
        return self._history

    def save_history(self) -> None:
        """Add this run's outputs to the history store on disk (a failure to write loses
        them, nothing else: the store says so in a note, not an error)."""
        if self._history is None:
            return
        n_notes = len(self._history.notes)
        self._history.save()
        self.notes.extend(self._history.notes[n_notes:])

    def _draft_model_drafter(self, s: Settings, bias: Adjust = Adjust()) -> DraftModelDrafter | CrossVocabDrafter:
        assert self.draft is not None
        if self.cross:  # another vocabulary: it drafts text (its prompts in its own template)
            return CrossVocabDrafter(self.draft, self.target, self.draft_prompts)
        return DraftModelDrafter(
            self.draft,
            s.sampling(),
            n_common=self.n_common,
            n_vocab_out=self.target.n_vocab,
            draft_p_min=s.draft_p_min,
            draft_min=s.draft_min,
            bias=bias,
        )

    def calibration_key(self) -> str:
        s = self.settings
        parts = [self.target.path.name, str(self.target.size_bytes), build_id(), f"ngl{s.n_gpu_layers}",
                 f"t{s.threads or 'auto'}", s.kv_type, s.flash_attn, s.verify]
        if s.rpc:  # the network is part of every cost
            parts += ["rpc=" + ",".join(s.rpc), f"split{s.tensor_split or ''}"]
        if self.draft is not None:
            parts += [self.draft.path.name, str(self.draft.size_bytes), f"dngl{s.draft_n_gpu_layers}"]
            if s.draft_rpc:
                parts += ["drpc=" + ",".join(s.draft_rpc)]
        return "|".join(parts)

    def calibration_stored(self) -> bool:
        """Whether this machine's full costs for this pair are on disk (else the first use measures them)."""
        cal = self._calibration or calibration.load(self.calibration_key())
        return cal is not None and not cal.quick

    def calibration(self) -> Calibration:
        """This machine's measured costs and numerics (cached on disk; measured on first use:
        with `announce`, only what this run needs, in seconds, and said so)."""
        if self._calibration is None:
            context = self.target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT]
            key, s = self.calibration_key(), self.settings
            if self.announce is not None and not self.recalibrate:
                solo = replace(self, draft=None).calibration_key() if self.draft is not None else None
                cal = first_use.load_or_quick(key, solo, self.target, self.draft, context, self.announce,
                                              first_use.Why(s.verify == "exact", self.draft is not None, s.ctx))
                self.defer_context_costs = True  # minutes at long context: `specli calibrate --ctx` measures them
            else:
                if self.announce is not None:
                    self.announce("measuring this machine's costs again in full (--recalibrate): a minute or more")
                cal = calibration.load_or_measure(key, self.target, self.draft, context, recalibrate=self.recalibrate)
            if cal.provisional and not cal.quick:
                self.notes.append(f"this machine's costs {calibration.why_provisional(cal)}: auto corrects them as it "
                                  "generates, and they are measured again at the next idle start")
            self.target.exact_batch = cal.exact_batch
            self._calibration = cal
        return self._calibration

    def costs(self, s: Settings | None = None) -> CostModel:
        """The cost model for settings `s`, refined online by every run of this runtime."""
        s = s or self.settings
        if s.verify not in self._costs:
            cal = self._with_contexts(self.calibration())
            self._costs[s.verify] = cost_model(cal, cal.exact_batch if s.verify == "exact" else None)
        return self._costs[s.verify]

    def _with_contexts(self, cal: Calibration) -> Calibration:
        """The calibration with its batch curve measured up to this context's length (once
        per context length, stored): auto prices a batch by its rows and the context."""
        if self.defer_context_costs:
            if not cal.quick and (points := calibration.missing_context_points(cal, self.target.n_ctx)):
                minutes = calibration.context_minutes(cal, points)
                self.notes.append(
                    f"batch costs at {', '.join(map(str, points))} cached tokens are not measured yet: priced from "
                    "the short-context table and corrected from the requests served (`specli calibrate --ctx "
                    f"{self.target.n_ctx}` measures them, about {minutes:.0f} min)")
            return cal
        context = self.target.tokenize(CALIBRATION_TEXT)
        longer = calibration.with_contexts(cal, self.target, context)
        if longer is None:
            return cal
        self.notes.append(f"measured batch costs at {', '.join(map(str, longer.contexts))} cached tokens "
                          "(once for this context length)")
        self._calibration = longer
        calibration.store(self.calibration_key(), longer)
        return longer

    def save_costs(self) -> None:
        """Store what this run observed of the costs at short context (`specli calibrate
        --check` shows it), and the table corrected online where it drifted, so the next
        run starts from what this one learned (a calibration taken on a busy machine
        cannot poison later runs)."""
        cal = self._calibration
        costs = next((c for c in self._costs.values() if c.chunk is None), None)  # one-batch verification's
        if cal is None or costs is None:
            return
        observed = costs.observed()
        corrected = costs.drifted
        if not observed and not corrected:
            return
        if corrected:
            t1, ratios, draft_ratio = costs.corrected()
            cal = replace(cal, t1=t1, ratios=ratios, draft_ratio=draft_ratio)
            costs.drifted = False
        now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        # t1 off by more than noise: the table was measured under other conditions (a busy
        # machine), so it is corrected for now and measured again at the next idle start
        provisional = cal.provisional or costs.t1_off() > DRIFT
        self._calibration = replace(cal, provisional=provisional,
                                    observed={**observed, "at": now, "corrected": corrected})
        calibration.store(self.calibration_key(), self._calibration)

    def generation_config(self, s: Settings | None = None) -> GenerationConfig:
        s = s or self.settings
        if s.verify == "exact" and s.drafter != "none" and s.draft_max > 0:
            self.calibration()  # the exact chunk is measured, not assumed (no drafts: one-token batches)
        return GenerationConfig(
            max_tokens=s.max_tokens, sampling=s.sampling(), draft_max=s.draft_max, stop=tuple(s.stop),
            exact=s.verify == "exact", grammar_drafts=s.grammar_drafts,
        )

    def prompt_tokens(self, prompt: str, s: Settings | None = None, history: Sequence[prompting.Message] = ()) -> list[int]:
        """The target's tokens for `prompt` after `history`, under settings `s` (system, raw);
        a draft of another vocabulary gets the same prompt in its own chat template."""
        s = s or self.settings
        tokens = prompting.prompt_tokens(self.target, prompt, history, system=s.system, raw=s.raw)
        if self.cross and self.draft is not None:
            with contextlib.suppress(SpecliError):  # no template of its own: the target's text, by role
                if len(self.draft_prompts) >= MAX_DRAFT_PROMPTS:
                    del self.draft_prompts[next(iter(self.draft_prompts))]
                self.draft_prompts[tuple(tokens)] = prompting.prompt_tokens(self.draft, prompt, history,
                                                                            system=s.system, raw=s.raw)
        return tokens


def _discard(tokens: list[int]) -> None:
    """A generation's output kept out of the history."""


CALIBRATION_TEXT = "def calibrate(values):\n    return [v * v for v in values if v % 3]\n\n" * 12
CALIBRATION_CONTEXT = 128

MAX_DRAFT_PROMPTS = 64  # a chat's turns, a few at a time: the oldest go first

KV_BYTES = {"auto": 1.0, "f32": 2.0, "f16": 1.0, "q8_0": 34 / 64, "q4_0": 18 / 64}  # relative to F16


def fit_context(s: Settings, model: ModelFile | Path, notes: list[str], remote: bool = False, n_seq: int = 1) -> int:
    """The context to ask for: the setting, capped at what the model was trained for,
    refused early when model + KV cache (of `n_seq` such contexts) cannot fit in free
    memory (CPU only; not for a model on RPC servers). `model` is a file already read,
    or the path of one to read."""
    if not isinstance(model, ModelFile):
        with read_model_file(model) as f:
            return fit_context(s, f, notes, remote, n_seq)
    path, info = model.path, model.info
    n_ctx = s.ctx
    trained = info.context_length
    if trained and n_ctx > trained:
        notes.append(f"{path.name} was trained for {trained} tokens of context: using {trained}, not {n_ctx}")
        n_ctx = trained
    avail = available_memory()
    if avail is not None and not remote and not supports_gpu_offload():
        need = path.stat().st_size + int(info.kv_bytes_per_token * KV_BYTES[s.kv_type]) * n_ctx * n_seq
        if need > avail:
            slots = f" for each of {n_seq} slots" if n_seq > 1 else ""
            raise ModelError(
                f"{path.name} with a {n_ctx}-token context{slots} needs about {need / 2**30:.1f} GiB "
                f"but only {avail / 2**30:.1f} GiB of memory is free",
                "lower --ctx" + (" or --parallel" if n_seq > 1 else "") + ", use --kv-type q8_0 or a smaller model",
            )
    return n_ctx


def open_runtime(s: Settings, recalibrate: bool = False, n_seq: int = 1, decode_thread: bool = False) -> Runtime:
    """Resolve names; read each model file once (structure, tokenizer, metadata) to
    check the pair (or, with `--draft auto`, choose the draft: runtime.draft_choice) and
    fit the context; then load the weights, each with `n_seq` sequences of that context
    (a server's slots). `decode_thread`: every decode of this process runs on one thread
    from now on (backend.decoder: a server's threads)."""
    if decode_thread:
        start_decode_thread()
    target_path = registry.resolve(s.target)
    notes: list[str] = []
    with contextlib.ExitStack() as files:  # tokenizers are freed before any weights load
        target_file = files.enter_context(read_model_file(target_path))
        choice = choose(s, target_file)
        if choice.file is not None:
            files.enter_context(choice.file)
        if choice.note:
            notes.append(choice.note)
        draft_path = choice.path
        servers = (*(s.rpc or ()), *((s.draft_rpc or ()) if draft_path else ()))
        if servers:  # every server answers before anything loads
            probe_rpc(list(dict.fromkeys(servers)))
        draft_file = (choice.file or target_file) if draft_path is not None else None
        n_common = choice.n_common
        target_opts = replace(load_options(s, for_draft=False), n_seq=n_seq,
                              n_ctx=fit_context(s, target_file, notes, bool(s.rpc), n_seq))
        draft_opts = None
        if draft_file is not None:
            # the draft never needs more context than the target; with less it stops drafting
            draft_ctx = min(fit_context(s, draft_file, notes, bool(s.draft_rpc), n_seq), target_opts.n_ctx)
            draft_opts = replace(load_options(s, for_draft=True), n_ctx=draft_ctx, n_seq=n_seq)
    target = Model(target_file, target_opts)
    draft = None
    try:
        if draft_file is not None and draft_opts is not None:
            draft = Model(draft_file, draft_opts)
    except BaseException:
        target.close()
        raise
    if not target.rolls_back and s.drafter != "none":
        notes.append(f"{target.name} ({target.architecture}) keeps a recurrent state that llama.cpp cannot roll "
                     "back to drop rejected drafts: speculation is off for it, every token decoded one by one")
    rt = Runtime(s, target, draft, n_common or target.n_vocab, notes=notes, recalibrate=recalibrate,
                 cross=choice.cross, draft_note=choice.note)
    if reads_history(s):
        rt.history_store(s)  # now, so that a note about a damaged store is shown before generating
    return rt
