"""The speculative loop on token ids: prefill, then per step draft -> one target batch ->
verify -> roll back -> yield a `Step`.

With no drafter (or k = 0) the same loop is plain autoregressive decoding of the
target: that is the baseline every speedup and equality check is measured against.
Text (detokenizing, stop strings, coloured segments) is the text layer's job
(specli.engine.text); the engine never prints.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

import numpy as np

from specli.engine.adjust import Adjust, AdjustedRows, TokenLogprob, token_logprob
from specli.engine.clock import StepClock
from specli.engine.drafting import EMPTY, NOTHING, propose
from specli.engine.grammar import Constraint, MaskedRows
from specli.engine.metrics import Counters
from specli.engine.prefill import check_prompt, prefill
from specli.engine.verify import Rows, Verifier, cut_at_stop, match_greedy, verify_step
from specli.types import Draft, Drafter, FinishReason, LanguageModel, SamplingParams, Verdict

FINISH_STOP: FinishReason = "stop"  # end-of-generation token or stop string
FINISH_LENGTH: FinishReason = "length"  # max_tokens reached
FINISH_CONTEXT: FinishReason = "context"  # the context window is full


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 256
    sampling: SamplingParams = SamplingParams()
    draft_max: int = 4
    stop: tuple[str, ...] = ()
    exact: bool = False  # verify in chunks bit-identical to one-token decoding
    grammar_drafts: bool = True  # under a grammar, draft the tokens it forces (with any drafter)
    adjust: Adjust = Adjust()  # logit bias and penalties on the target's rows
    logprobs: int | None = None  # the emitted tokens' log-probabilities, with this many alternatives


@dataclass
class Step:
    """One target forward pass worth of tokens (the first step is the prefill's)."""

    tokens: list[int]  # emitted, the end-of-generation token excluded
    n_drafted: int
    n_accepted: int  # tokens[:n_accepted] came from the draft
    drafter: str
    counters: Counters  # a snapshot after this step
    finish_reason: FinishReason | None = None
    stop_token: int | None = None  # the end-of-generation token, when one ended it
    logprobs: list[TokenLogprob] | None = None  # of `tokens`, where asked


def generate_steps(target: LanguageModel, prompt: Sequence[int], config: GenerationConfig = GenerationConfig(),
                   drafter: Drafter | None = None, verifier: Verifier = verify_step,
                   constraint: Constraint | None = None) -> Generator[Step, None, None]:
    """Generate token ids from `prompt`. Reuses whatever prefix of the prompt the
    target's (and drafter's) KV cache already holds. The drafter hears `end` once the
    generation is over, however it ends. Under a `constraint` (a fresh one per
    generation) every row is masked by its grammar and the tokens it forces are drafted."""
    history = list(prompt)
    if drafter is not None:  # a draft model drafts under the grammar too
        drafter.budget(config.max_tokens)
        drafter.constrain(constraint, config.grammar_drafts)
    try:
        yield from _steps(history, target, config, drafter, _Verification(target, config, verifier, constraint))
    finally:
        if drafter is not None:
            drafter.constrain(None, True)
            drafter.end(history)


def _steps(history: list[int], target: LanguageModel, config: GenerationConfig, drafter: Drafter | None,
           verification: _Verification) -> Generator[Step, None, None]:
    """The loop behind `generate_steps`; `history` (the prompt) grows as tokens are emitted."""
    check_prompt(history, target.n_ctx)
    verification.history, verification.n_prompt = history, len(history)
    clock = StepClock(target, drafter, len(history))
    c = clock.counters
    constraint = verification.constraint
    # 1. prefill, and the first token from the last prompt token's row
    c.n_prompt_reused = prefill(target, history, drafter, history)
    verdict = verification.first(history[-1])
    clock.prefilled()
    logprobs = verification.logprobs(EMPTY, verdict)
    emitted, reason = _emit(history, EMPTY, verdict, config.max_tokens, target, constraint)
    yield _step(clock, target, emitted, 0, 0, "prefill", reason, logprobs)
    while reason is None:
        clock.resumed()
        remaining = config.max_tokens - c.n_generated
        room = target.n_ctx - target.n_past - 1  # positions left after the last token
        if room < 0 or (constraint is not None and constraint.stopped):
            # a full context, or a complete grammar that allows only end tokens: no forward needed
            yield _step(clock, target, [], 0, 0, "none", FINISH_CONTEXT if room < 0 else FINISH_STOP)
            return
        k = max(0, min(config.draft_max, remaining - 1, room))
        # 2. draft: the tokens a grammar forces, else (or then) the drafter's
        clock.drafting()
        proposal = propose(drafter, history, k, constraint, config.grammar_drafts) if drafter is not None and k > 0 else NOTHING
        draft = proposal.draft
        clock.drafted()
        # 3. verify [last, d1..dk] in one target batch; the cache keeps the accepted prefix
        verdict, verified = verification.verify(history[-1], draft)
        if len(verified.tokens) < len(draft.tokens) and drafter is not None:
            drafter.cut(len(verified.tokens))  # a batch shared with other slots kept only this much
        draft = verified
        logprobs = verification.logprobs(draft, verdict)
        emitted, reason = _emit(history, draft, verdict, remaining, target, constraint)
        verify_seconds = clock.verified()
        # 4. the drafter learns from the verdict
        if drafter is not None and proposal.asked:
            clock.learning()
            # a batch shared with other slots is not this step's own: its time says nothing of this
            # step's cost, so the drafter does not learn costs from it
            shared = getattr(target, "batch_shared", False)
            drafter.accept(history, max(0, verdict.n_accepted - proposal.n_forced), 0.0 if shared else verify_seconds)
            clock.learned()
        n_accepted = min(verdict.n_accepted, len(emitted))
        name = (draft.source or (drafter.name if drafter is not None else "draft")) if draft.tokens else "none"
        c.record_step(name, len(draft.tokens), n_accepted, len(emitted))
        c.n_forced += len(draft.forced_at)
        c.n_forced_accepted += sum(1 for i in draft.forced_at if i < n_accepted)
        yield _step(clock, target, emitted, len(draft.tokens), n_accepted, name, reason, logprobs)


def _emit(history: list[int], draft: Draft, verdict: Verdict, remaining: int, target: LanguageModel,
          constraint: Constraint | None) -> tuple[list[int], FinishReason | None]:
    """The tokens a verdict emits, up to the first end token (included) or `remaining`,
    added to `history` and to the grammar's state."""
    emitted, reason = cut_at_stop([*draft.tokens[: verdict.n_accepted], verdict.next_token], target.is_eog, remaining)
    history.extend(emitted)
    if constraint is not None:
        constraint.settle(emitted)
    return emitted, reason


def _step(clock: StepClock, target: LanguageModel, emitted: list[int], n_drafted: int, n_accepted: int,
          name: str, reason: FinishReason | None, logprobs: list[TokenLogprob] | None = None) -> Step:
    """The step as yielded: the end-of-generation token taken out of its tokens, the
    counters stamped after it."""
    emitted = list(emitted)
    stop_token = emitted.pop() if reason == FINISH_STOP and emitted and target.is_eog(emitted[-1]) else None
    counters = clock.stamp(len(emitted))
    return Step(emitted, n_drafted, min(n_accepted, len(emitted)), name, counters, reason, stop_token,
                logprobs[: len(emitted)] if logprobs is not None else None)


class _Verification:
    """The verify phase: target batches read as rows, masked under a grammar, judged by
    the verifier (greedy with the default verifier: each row's argmax as llama.cpp
    computed it, rows unread, where the model computes it in its graph)."""

    def __init__(self, target: LanguageModel, config: GenerationConfig, verifier: Verifier,
                 constraint: Constraint | None) -> None:
        self.target, self.config, self.verifier, self.constraint = target, config, verifier, constraint
        self.rng = np.random.default_rng(config.sampling.seed)
        self.in_graph = (target.device_argmax and verifier is verify_step and config.sampling.greedy
                         and not config.exact and constraint is None and not config.adjust
                         and config.logprobs is None)
        self.history: list[int] = []  # the generation's, from its prompt (set by the loop)
        self.n_prompt = 0
        self._rows: Rows | None = None  # the last rows judged

    def logprobs(self, draft: Draft, verdict: Verdict) -> list[TokenLogprob] | None:
        """The verdict's tokens' log-probabilities under the rows they were judged on (token
        j comes from row j), where the generation asks for them; read before the grammar
        settles on them."""
        n_top = self.config.logprobs
        if n_top is None or self._rows is None:
            return None
        rows = self._rows
        tokens = [*draft.tokens[: verdict.n_accepted], verdict.next_token]
        return [token_logprob(rows[j], t, n_top) for j, t in enumerate(tokens)]

    def first(self, last_prompt_token: int) -> Verdict:
        """The first token, from the last prompt token's row."""
        if self.in_graph:
            return match_greedy([], self.target.decode_argmax([last_prompt_token]))
        return self._judge(EMPTY, self.target.decode([last_prompt_token], [0]))

    def verify(self, last: int, draft: Draft) -> tuple[Verdict, Draft]:
        """Verify [last, *draft] in one batch (exact mode: chunks decoded only as far as
        accepted); the cache keeps the accepted prefix, the next token is decoded next step.
        A draft with gains may come back cut to the head a shared batch verified."""
        target = self.target
        n_before = target.n_past
        batch = [last, *draft.tokens]
        offer = getattr(target, "decode_offer", None) if draft.gains is not None and not self.config.exact else None
        if offer is not None:
            rows = offer(batch, draft.gains, draft.rate)
            if len(rows) < len(batch):
                draft = draft.head(len(rows) - 1)
            verdict = self._judge(draft, rows)
        elif self.in_graph:
            verdict = match_greedy(draft.tokens, target.decode_argmax(batch))
        elif self.config.exact:
            verdict = self._judge(draft, _ChunkedRows(target, batch, target.exact_batch))
        else:
            verdict = self._judge(draft, target.decode(batch, range(len(batch))))
        target.rollback(n_before + 1 + verdict.n_accepted)
        return verdict, draft

    def _judge(self, draft: Draft, rows: Rows) -> Verdict:
        if self.config.adjust:
            rows = AdjustedRows(rows, self.config.adjust, self.history[self.n_prompt :], draft.tokens)
        if self.constraint is not None:
            rows = MaskedRows(rows, self.constraint, draft.tokens)
        self._rows = rows
        return self.verifier(draft, rows, self.config.sampling, self.rng)


class _ChunkedRows(Sequence[np.ndarray]):
    """Verify rows decoded in chunks of `chunk` tokens only when verification reaches
    them: the chunks after the first rejected token are never decoded (exact mode)."""

    def __init__(self, target: LanguageModel, batch: Sequence[int], chunk: int) -> None:
        self._target, self._batch, self._chunk = target, batch, max(1, chunk)
        self._rows: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._batch)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        while i >= len(self._rows):
            start = len(self._rows)
            end = min(len(self._batch), start + self._chunk)
            rows = self._target.decode(self._batch[start:end], range(end - start))
            self._rows.extend(rows.copy())  # the next decode overwrites the view
        return self._rows[i]
