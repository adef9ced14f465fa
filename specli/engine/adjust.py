"""What a request asks to change in the target's logits before a token is chosen
(OpenAI's logit_bias, presence_penalty, frequency_penalty), applied to each verify row
for the tokens before that row's position, and the log-probabilities of the tokens
emitted, read from the same rows (OpenAI's logprobs).

Penalties count the tokens generated so far (as OpenAI and vLLM do: not the prompt):
row i of a verify batch follows the generated tokens and the draft's first i tokens,
so it is penalised for those; a row is then exactly the one-token decoding's row
under the same penalties, and verification stays lossless.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Adjust:
    bias: tuple[tuple[int, float], ...] = ()  # (token, added to its logit)
    presence: float = 0.0  # subtracted once from each token generated at least once
    frequency: float = 0.0  # subtracted per time the token was generated

    def __bool__(self) -> bool:
        return bool(self.bias) or self.presence != 0.0 or self.frequency != 0.0

    def biased(self, row: np.ndarray) -> np.ndarray:
        """`row` (a copy) with the bias added: what the draft model drafts from."""
        out = np.array(row, dtype=np.float32)
        if self.bias:
            ids = np.fromiter((t for t, _ in self.bias), np.int64)
            keep = ids < out.size
            out[ids[keep]] += np.fromiter((b for _, b in self.bias), np.float32)[keep]
        return out


class AdjustedRows(Sequence[np.ndarray]):
    """Verify rows with the bias and penalties: row i for the generated tokens and the
    draft's first i tokens. Rows are computed when asked, in any order."""

    def __init__(self, rows: Sequence[np.ndarray] | np.ndarray, adjust: Adjust, generated: Sequence[int],
                 draft: Sequence[int]) -> None:
        self._rows, self._adjust, self._draft = rows, adjust, draft
        self._generated = Counter(generated) if adjust.presence or adjust.frequency else Counter()
        self._done: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def before(self, i: int) -> Sequence[int]:
        """The draft tokens before row i's position."""
        return self._draft[:i]

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if i not in self._done:
            row = self._adjust.biased(self._rows[i])
            a = self._adjust
            if a.presence or a.frequency:
                counts = self._generated + Counter(self.before(i))
                if counts:
                    ids = np.fromiter(counts.keys(), np.int64)
                    n = np.fromiter(counts.values(), np.float32)
                    keep = ids < row.size
                    row[ids[keep]] -= (a.frequency * n + a.presence)[keep]
            self._done[i] = row
        return self._done[i]


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # the row's likeliest tokens, most likely first


def token_logprob(row: np.ndarray, token: int, n_top: int = 0) -> TokenLogprob:
    """log softmax(row)[token], and the n_top likeliest tokens of the row."""
    x = np.asarray(row, dtype=np.float64)
    finite = np.isfinite(x)
    m = float(x[finite].max()) if finite.any() else 0.0
    lse = m + float(np.log(np.exp(x[finite] - m).sum())) if finite.any() else 0.0
    top: tuple[tuple[int, float], ...] = ()
    if n_top > 0:
        ids = np.argpartition(-x, min(n_top, x.size - 1))[:n_top]
        ids = ids[np.argsort(-x[ids], kind="stable")]
        top = tuple((int(t), float(x[t] - lse)) for t in ids)
    return TokenLogprob(int(token), float(x[token] - lse), top)
