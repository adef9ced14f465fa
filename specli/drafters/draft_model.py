"""A smaller model of the same family drafts k tokens, one decode each.

The draft KV cache never re-decodes what it holds: after verification it rolls back
to the accepted prefix, and the next proposal decodes only the tokens it lacks
(the target's next token, plus the last draft token when all were accepted).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specli.engine.adjust import Adjust
from specli.engine.grammar import Constraint
from specli.engine.prefill import common_prefix_len
from specli.engine.sampling import probs_from_logits, sample
from specli.types import Draft, Drafter, LanguageModel, SamplingParams

# Logits more than this below the top add under 2e-9 each to the softmax's sum: left out,
# the draft model's stop test reads the row once instead of taking an exp of every logit.
NEGLIGIBLE_LOGIT = 20.0
RECHECK = 80  # cached tokens compared with the history after a verification: more than a draft


def top_probability(logits: np.ndarray, top: int | None = None) -> float:
    """Softmax probability of the argmax (temperature 1; `top`: its index, if known), to
    within 0.03 %: logits NEGLIGIBLE_LOGIT below the top are left out of the sum."""
    m = logits[top] if top is not None else logits.max()
    near = logits[logits > m - NEGLIGIBLE_LOGIT]
    return 1.0 / float(np.exp(near - m).sum(dtype=np.float64))


class DraftModelDrafter(Drafter):
    name = "draft"

    def __init__(
        self,
        model: LanguageModel,
        sampling: SamplingParams = SamplingParams(),
        *,
        n_common: int | None = None,
        n_vocab_out: int | None = None,
        draft_p_min: float = 0.0,
        draft_min: int = 0,
        sample_draft: bool = True,
        seed: int | None = None,
        bias: Adjust = Adjust(),
    ) -> None:
        """`n_common`: rows are cut to the vocabulary both models share; `n_vocab_out`:
        q_draft is zero-padded to the target's size. `sample_draft`: at temperature > 0
        draw drafts from q (else greedy drafts, a one-hot q: lossless too). `bias`: the
        request's logit bias, drafted under as the target is verified under it."""
        self.model = model
        self.bias = Adjust(bias.bias)
        self.sampling = sampling
        self.n_common = n_common or model.n_vocab
        self.n_vocab_out = n_vocab_out or self.n_common
        self.draft_p_min = draft_p_min
        self.draft_min = draft_min
        self.stochastic = sample_draft and not sampling.greedy
        self.rng = np.random.default_rng(None if sampling.seed is None else sampling.seed + 1)
        self._base = 0  # history length at the last proposal
        self._live = False  # the cache went past the history since the last verification
        self.catch_up_seconds = 0.0  # last proposal: decoding the tokens the cache lacked
        self.step_seconds: list[float] = []  # last proposal: each one-token draft decode
        self.constraint: Constraint | None = None  # the generation's grammar (set by the engine)
        self.take_forced = True

    def constrain(self, constraint: Constraint | None, take_forced: bool = True) -> None:
        """Draft under the generation's grammar: rows masked (q is the masked
        distribution, so rejection sampling stays exact) and, with `take_forced`, the
        tokens it forces taken without drafting them, decoded in one batch."""
        self.constraint = constraint
        self.take_forced = take_forced

    @property
    def decode_seconds(self) -> float:
        return self.model.decode_seconds

    def lag(self, history: Sequence[int]) -> int:
        """Tokens the cache lacks before it can draft after `history` (at least the last)."""
        return max(1, len(history) - self.model.n_past)

    def begin(self, history: Sequence[int]) -> None:
        # keep the common prefix; the rest is decoded by the first proposal, so a
        # controller that never asks this drafter never pays for its prefill
        self.model.rollback(min(common_prefix_len(self.model.tokens, history), len(history)))
        self._live = False

    def propose(self, history: Sequence[int], k: int) -> Draft:
        m = self.model
        pending = history[m.n_past :]
        self._base = len(history)
        self.catch_up_seconds = 0.0
        if k <= 0 or not pending or m.n_past + len(pending) + k > m.n_ctx:
            return Draft(source=self.name)
        t0 = m.decode_seconds
        logits = m.decode(pending, [len(pending) - 1])[0]
        self._live = True
        self.catch_up_seconds = m.decode_seconds - t0
        self.step_seconds = []
        tokens: list[int] = []
        qs: list[np.ndarray | None] = []
        c = self.constraint
        pushed = 0  # tokens the grammar's matcher followed ahead, undone at the end
        at: list[int] = []  # positions of forced tokens
        try:
            for i in range(k):
                forced = c.forced()[: k - len(tokens)] if c is not None and self.take_forced else []
                if forced:
                    at += range(len(tokens), len(tokens) + len(forced))
                    tokens += forced
                    qs += [None] * len(forced)  # one-hot: verification builds one only on a rejection
                    pushed += c.push(forced)  # type: ignore[union-attr]
                    if len(tokens) >= k:
                        break
                    logits = m.decode(forced, [len(forced) - 1])[0]
                tok = self._draft_one(logits, c, i, qs)
                if tok is None:
                    break
                tokens.append(tok)
                if len(tokens) >= k or (c is not None and c.ends(tok)):
                    break
                if c is not None:
                    pushed += c.push([tok])
                t0 = m.decode_seconds
                logits = m.decode([tok], [0])[0]
                self.step_seconds.append(m.decode_seconds - t0)
        finally:
            if c is not None:
                c.pop(pushed)
        return Draft(tokens, qs if self.stochastic else None, self.name, forced_at=tuple(at))

    def _draft_one(self, logits: np.ndarray, c: Constraint | None, i: int, qs: list[np.ndarray | None]) -> int | None:
        """One drafted token from a row (masked under a grammar); None: stop drafting."""
        row = logits[: self.n_common]
        if self.bias:
            row = self.bias.biased(row)
        if c is not None:
            row = c.masked(row)
        if self.stochastic:
            q = probs_from_logits(row, self.sampling)
            if i >= self.draft_min and self.draft_p_min > 0 and float(q.max()) < self.draft_p_min:
                return None
            tok = sample(q, self.rng)
            if self.n_vocab_out > q.size:
                q = np.concatenate([q, np.zeros(self.n_vocab_out - q.size)])
            qs.append(q)
            return tok
        tok = int(row.argmax())
        if i >= self.draft_min and self.draft_p_min > 0 and top_probability(row, tok) < self.draft_p_min:
            return None
        return tok

    def accept(self, history: Sequence[int], n_accepted: int, verify_seconds: float = 0.0) -> None:
        if not self._live:  # nothing decoded since the last verification
            return
        self._live = False
        # the cache holds history[:base] + a prefix of the draft; keep what was accepted, and
        # no token that differs from the history (a grammar's forced token the target rejected)
        keep = min(self._base + n_accepted, self.model.n_past, len(history))
        low = max(0, keep - RECHECK)
        keep = low + common_prefix_len(self.model.tokens[low:keep], history[low:keep])
        self.model.rollback(keep)
