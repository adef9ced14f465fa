"""The speculative loop on token ids: draft -> one target batch -> verify -> roll back
-> yield a `Step`.

With no drafter (or k = 0) the same loop is plain autoregressive decoding of the
target: that is the baseline every speedup and equality check is measured against.
Text (detokenizing, stop strings, coloured segments) is the text layer's job
(specli.engine.text); the engine never prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np

from specli.engine.grammar import Constraint, MaskedRows
from specli.engine.metrics import Counters
from specli.engine.prefill import common_prefix_len
from specli.engine.sampling import probs_from_logits
from specli.engine.verify import cut_at_stop, match_greedy, verify_greedy, verify_rejection
from specli.errors import ContextError, UsageError
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


Rows = Sequence[np.ndarray] | np.ndarray  # target logits rows, one per batch token
# verify(draft, rows, sampling, rng) -> Verdict; rows are read in order
Verifier = Callable[[Draft, Rows, SamplingParams, np.random.Generator], Verdict]


class _LazyProbs(Sequence[np.ndarray]):
    """Target probabilities per row, computed only when verification reaches a row."""

    def __init__(self, logits: Rows, params: SamplingParams) -> None:
        self._logits = logits
        self._params = params
        self._rows: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._logits)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if i not in self._rows:
            self._rows[i] = probs_from_logits(self._logits[i], self._params)
        return self._rows[i]


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


def verify_step(draft: Draft, logits: Rows, sampling: SamplingParams, rng: np.random.Generator) -> Verdict:
    """Greedy match at temperature 0, rejection sampling otherwise."""
    if sampling.greedy:
        if isinstance(logits, MaskedRows):  # the allowed argmax: a bit test where the argmax is allowed
            return match_greedy(draft.tokens, logits.argmax_at)
        return verify_greedy(draft.tokens, logits)  # type: ignore[arg-type]
    return verify_rejection(draft.tokens, _LazyProbs(logits, sampling), draft.q_draft, rng, draft.q_after)


_EMPTY = Draft()


def generate_steps(target: LanguageModel, prompt: Sequence[int], config: GenerationConfig = GenerationConfig(),
                   drafter: Drafter | None = None, verifier: Verifier = verify_step,
                   constraint: Constraint | None = None) -> Generator[Step, None, None]:
    """Generate token ids from `prompt`. Reuses whatever prefix of the prompt the
    target's (and drafter's) KV cache already holds. The drafter hears `end` once the
    generation is over, however it ends. Under a `constraint` (a fresh one per
    generation) every row is masked by its grammar and the tokens it forces are drafted."""
    history = list(prompt)
    constrain = getattr(drafter, "constrain", None)  # a draft model drafts under the grammar too
    if constrain is not None:
        constrain(constraint, config.grammar_drafts)
    try:
        yield from _steps(history, target, prompt, config, drafter, verifier, constraint)
    finally:
        if constrain is not None:
            constrain(None, True)
        if drafter is not None:
            drafter.end(history)


def _steps(history: list[int], target: LanguageModel, prompt: Sequence[int], config: GenerationConfig,
           drafter: Drafter | None, verifier: Verifier, constraint: Constraint | None) -> Generator[Step, None, None]:
    """The loop behind `generate_steps`; `history` (the prompt) grows as tokens are emitted."""
    if not prompt:
        raise UsageError("the prompt is empty", "give some text to continue")
    if len(prompt) >= target.n_ctx:
        over = len(prompt) - target.n_ctx + 1
        raise ContextError(
            f"the prompt is {len(prompt)} tokens, {over} more than the {target.n_ctx}-token context allows",
            "shorten the prompt or raise --ctx",
        )
    clock = time.perf_counter
    t_start = clock()
    c = Counters(n_prompt=len(prompt))
    llama_t0 = _llama_seconds(target, drafter)
    rng = np.random.default_rng(config.sampling.seed)
    mark = t_start  # the end of the last phase timed: every moment lands in one counter

    def step(emitted: list[int], n_drafted: int, n_accepted: int, name: str, reason: FinishReason | None) -> Step:
        stop_token = emitted.pop() if reason == FINISH_STOP and emitted and target.is_eog(emitted[-1]) else None
        c.n_generated += len(emitted)
        now = clock()
        c.t_loop += now - mark
        c.t_total = now - t_start
        if c.t_first_token is None:
            c.t_first_token = c.t_total
        c.t_llama = _llama_seconds(target, drafter) - llama_t0
        return Step(emitted, n_drafted, min(n_accepted, len(emitted)), name, c.snapshot(), reason, stop_token)

    # 1. prefill: reuse the cached prefix, decode the rest, first token from the last row
    n_reuse = min(common_prefix_len(target.tokens, prompt), len(prompt) - 1)
    target.rollback(n_reuse)
    c.n_prompt_reused = n_reuse
    if drafter is not None:
        drafter.begin(history)
    # the last prompt token is decoded alone, so its logits (and the first token) do not
    # depend on how much of the prompt was cached: large batches take other kernels
    target.decode(prompt[n_reuse:-1])
    # greedy with the default verifier: the rows' argmax as llama.cpp computed it, rows unread
    in_graph = (target.device_argmax and verifier is verify_step and config.sampling.greedy and not config.exact
                and constraint is None)
    if in_graph:
        verdict = match_greedy([], target.decode_argmax(prompt[-1:]))
    else:
        verdict = verifier(_EMPTY, _masked(target.decode(prompt[-1:], [0]), constraint, _EMPTY), config.sampling, rng)
    mark = clock()
    c.t_prefill = mark - t_start
    emitted, reason = cut_at_stop([verdict.next_token], target.is_eog, config.max_tokens)
    history.extend(emitted)
    if constraint is not None:
        constraint.settle(emitted)
    yield step(list(emitted), 0, 0, "prefill", reason)
    if reason is not None:
        return

    while True:
        mark = _resumed(c, t_start, clock)
        remaining = config.max_tokens - c.n_generated
        room = target.n_ctx - target.n_past - 1  # positions left after the last token
        if room < 0:
            yield step([], 0, 0, "none", FINISH_CONTEXT)
            return
        if constraint is not None and constraint.stopped:
            # the grammar is complete and allows only end tokens: the text ends here, no forward needed
            yield step([], 0, 0, "none", FINISH_STOP)
            return
        k = max(0, min(config.draft_max, remaining - 1, room))

        # 2. draft: the tokens a grammar forces, else the drafter's (cut where the grammar forbids)
        t0 = clock()
        if drafter is not None:  # its decode calls and controller time, drafting and learning
            llama0, control0 = drafter.decode_seconds, _control_seconds(drafter)
        forced: list[int] = []
        run = 0  # tokens the grammar forces next
        if constraint is not None and config.grammar_drafts and drafter is not None and k > 0:
            whole = constraint.forced()[:k]
            forced, run = _affordable(whole, drafter, 0, 1), len(whole)
        # the drafter goes on after a whole forced run (a cut one goes on next step)
        asked = drafter is not None and k > len(forced) and len(forced) == run
        if drafter is not None and asked:
            draft = _drafter_draft(drafter, history, forced, k, constraint, config.grammar_drafts)
        else:
            draft = Draft(forced, None, "grammar", None, tuple(range(len(forced)))) if forced else _EMPTY
        t1 = clock()

        # 3. verify [last, d1..dk]: one target batch, or exact chunks decoded as far as accepted
        n_before = target.n_past
        verify0 = target.decode_seconds
        batch = [history[-1], *draft.tokens]
        if in_graph:
            verdict = match_greedy(draft.tokens, target.decode_argmax(batch))
        else:
            rows: Rows = (
                _ChunkedRows(target, batch, target.exact_batch) if config.exact
                else target.decode(batch, range(len(batch)))
            )
            verdict = verifier(draft, _masked(rows, constraint, draft), config.sampling, rng)
        n_acc = verdict.n_accepted

        # 4. keep the accepted prefix in the target cache; the next token is decoded next step
        target.rollback(n_before + 1 + n_acc)
        t2 = clock()
        c.t_llama_verify += target.decode_seconds - verify0

        emitted, reason = cut_at_stop([*draft.tokens[:n_acc], verdict.next_token], target.is_eog, remaining)
        history.extend(emitted)
        if constraint is not None:
            constraint.settle(emitted)
            t2 = clock()
        c.t_loop += t0 - mark
        c.t_draft += t1 - t0
        c.t_verify += t2 - t1
        if drafter is not None and asked:
            t3 = clock()
            drafter.accept(history, max(0, n_acc - len(forced)), t2 - t1)
            mark = clock()
            c.t_accept += mark - t3
            c.t_loop += t3 - t2
            c.t_llama_draft += drafter.decode_seconds - llama0
            c.t_control += _control_seconds(drafter) - control0
        else:
            mark = t2
            if drafter is not None:  # the grammar drafted: no draft-model decode, no choice made
                c.t_llama_draft += drafter.decode_seconds - llama0
        n_acc_emitted = min(n_acc, len(emitted))
        name = (draft.source or (drafter.name if drafter is not None else "draft")) if draft.tokens else "none"
        c.record_step(name, len(draft.tokens), n_acc_emitted, len(emitted))
        c.n_forced += len(draft.forced_at)
        c.n_forced_accepted += sum(1 for i in draft.forced_at if i < n_acc_emitted)
        yield step(list(emitted), len(draft.tokens), n_acc_emitted, name, reason)
        if reason is not None:
            return


def _masked(rows: Rows, constraint: Constraint | None, draft: Draft) -> Rows:
    return rows if constraint is None else MaskedRows(rows, constraint, draft.tokens)


def _drafter_draft(drafter: Drafter, history: list[int], forced: list[int], k: int,
                   constraint: Constraint | None, grammar_drafts: bool) -> Draft:
    """The drafter's draft after the forced tokens (it reads them as history), cut where
    the grammar forbids, then the tokens forced after it."""
    pushed = 0
    if forced:
        _hook(drafter, "prefixed", len(forced))
        pushed = constraint.push(forced)  # type: ignore[union-attr]
    try:
        d = drafter.propose([*history, *forced] if forced else history, k - len(forced))
        if len(d.tokens) > k - len(forced):
            d = Draft(d.tokens[: k - len(forced)], d.q_draft[: k - len(forced)] if d.q_draft else None, d.source)
        if constraint is not None:
            d = _allowed_part(d, constraint, drafter)
            if grammar_drafts and d.q_after is None:
                d = _extended(d, constraint, k - len(forced), drafter)
    finally:
        if pushed:
            constraint.pop(pushed)  # type: ignore[union-attr]
    if not forced:
        return d
    qs = [*[None] * len(forced), *d.q_draft] if d.q_draft else None  # forced: one-hot q
    return Draft([*forced, *d.tokens], qs, d.source if d.tokens else "grammar", d.q_after,
                 (*range(len(forced)), *(len(forced) + i for i in d.forced_at)))


def _hook(drafter: Drafter, name: str, *args: int) -> None:
    """An optional drafter method (auto keeps its books with them)."""
    method = getattr(drafter, name, None)
    if method is not None:
        method(*args)


# A grammar's forced tokens are the canonical tokens of the bytes it forces, and where it
# forces them llguidance's mask allows that token alone (tested): the masked target keeps
# them with probability 1. They are verified anyway (it costs their rows) and auto prices
# them as certain when it sizes the batch.
def _affordable(forced: list[int], drafter: Drafter, n_before: int, least: int) -> list[int]:
    """As many forced tokens (at least `least`) after a batch of n_before + 1 tokens as give
    the best rate per plain step if all are kept, priced by auto's cost table (Q4_K_M here:
    a batch of 5 tokens costs 4.1 plain steps, of 8 tokens 7.9); all of them without one."""
    costs = getattr(drafter, "costs", None)
    if not forced or costs is None or costs.step <= 0:
        return forced
    n = n_before + 1 + np.arange(least, len(forced) + 1)  # batch sizes
    rate = n / costs.batch_ratios(int(n[-1]))[n - 1]
    return forced[: least + int(np.argmax(rate))]


def _extended(draft: Draft, constraint: Constraint, k: int, drafter: Drafter) -> Draft:
    """The drafter's draft, then the tokens the grammar forces after it, in the same batch
    (kept if the whole draft is; the drafter hears how many were added)."""
    forced = _affordable(constraint.forced_after(draft.tokens)[: k - len(draft.tokens)], drafter,
                         len(draft.tokens), 0)
    if not forced:
        return draft
    _hook(drafter, "extend", len(forced))
    qs = draft.q_draft
    return Draft([*draft.tokens, *forced], [*qs, *[None] * len(forced)] if qs else None,
                 draft.source, None, (*draft.forced_at, *range(len(draft.tokens), len(draft.tokens) + len(forced))))


def _allowed_part(draft: Draft, constraint: Constraint, drafter: Drafter) -> Draft:
    """The draft up to its first token the grammar forbids; the drafter hears of the cut."""
    n = constraint.valid_prefix(draft.tokens)
    if n == len(draft.tokens):
        return draft
    _hook(drafter, "cut", n)
    qs = draft.q_draft
    return Draft(draft.tokens[:n], qs[:n] if qs else None, draft.source, qs[n] if qs else None,
                 tuple(i for i in draft.forced_at if i < n))


def _resumed(c: Counters, t_start: float, clock: Callable[[], float]) -> float:
    """The caller hands control back: the time since the last step was stamped was its."""
    now = clock()
    c.t_outside += now - (t_start + c.t_total)
    return now


def _control_seconds(drafter: Drafter) -> float:
    """Seconds a drafter spent choosing and learning (auto's controller); 0 for others."""
    return float(getattr(drafter, "control_seconds", 0.0))


def _llama_seconds(target: LanguageModel, drafter: Drafter | None) -> float:
    return target.decode_seconds + (drafter.decode_seconds if drafter is not None else 0.0)
