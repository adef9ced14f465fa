"""Draft rows shared out across the slots of one batch: the split that gives the most
expected tokens per unit of the whole batch's cost, or the most tokens at each slot's own
price less the batch's cost (pure math)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def split_rows(gains: Sequence[np.ndarray], fixed_rows: int, batch_cost: Callable[[int], np.ndarray],
               fixed_tokens: float = 0.0) -> list[int]:
    """Draft lengths k_i, one per offer, maximising
    (fixed_tokens + sum_i gains[i][k_i]) / cost(rows): the most tokens per cost.

    `gains[i][k]` is the tokens offer i is expected to emit when k of its draft tokens
    are verified (gains[i][0] is the plain step's token); each offer takes 1 + k_i rows,
    beside `fixed_rows` rows nobody may cut (prefill chunks, other slots' steps), which
    emit `fixed_tokens`.
    `batch_cost(n)` prices batches of 1..n rows (an array, index n - 1).

    The gains are concave in k (each further token is kept only if every one before it
    was), so for each total of draft rows D the best split takes the D largest
    increments over all offers; the best D is then read off the cost curve."""
    return _best_split(gains, fixed_rows, batch_cost, np.ones(len(gains)),
                       lambda tokens, cost: (fixed_tokens + sum(g[0] for g in gains) + tokens) / cost)


def split_rows_at_prices(gains: Sequence[np.ndarray], fixed_rows: int, batch_cost: Callable[[int], np.ndarray],
                         prices: Sequence[float]) -> list[int]:
    """Draft lengths k_i, one per offer, maximising
    sum_i prices[i] * gains[i][k_i] - cost(rows):
    each offer's tokens are worth `prices[i]` plain steps apiece (what they would cost
    it with the batch to itself, weighted by how much its end matters), so a row goes
    where it comes cheaper than that. The rows the round holds anyway (`fixed_rows`, one
    per offer) are paid whatever the split, which is the difference from `split_rows`:
    a slot riding beside another's short request does not make long rows look cheap by
    counting that request's token as its own. Same search: the D largest increments."""
    return _best_split(gains, fixed_rows, batch_cost, np.asarray(prices, dtype=np.float64),
                       lambda value, cost: value - cost)


def _best_split(gains: Sequence[np.ndarray], fixed_rows: int, batch_cost: Callable[[int], np.ndarray],
                w: np.ndarray, score: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> list[int]:
    """The split whose total of draft rows D maximises `score(gain of the D largest
    weighted increments, cost of the batch with D draft rows)`, as a length per offer."""
    if not gains:
        return []
    base = fixed_rows + len(gains)
    owner, flat, order = _increments(gains, w)
    if flat.size == 0:
        return [0] * len(gains)
    gained = np.concatenate([[0.0], np.cumsum(flat[order])])
    cost = np.asarray(batch_cost(base + flat.size), dtype=np.float64)[base - 1:]
    best = int(np.argmax(score(gained, cost)))
    return [int(n) for n in np.bincount(owner[order[:best]], minlength=len(gains))]


def _increments(gains: Sequence[np.ndarray], w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each offer's weighted gain per further draft token, flat, with its owner, and the
    order that takes the largest first (within an offer they already come in order:
    the gains are concave, and the sort is stable)."""
    inc = [wi * np.diff(np.asarray(g, dtype=np.float64)) for wi, g in zip(w, gains, strict=True)]
    owner = np.concatenate([np.full(len(d), i) for i, d in enumerate(inc)]) if inc else np.zeros(0, int)
    flat = np.concatenate(inc) if inc else np.zeros(0)
    return owner, flat, np.argsort(-flat, kind="stable")


def expected_gains(rates: Sequence[float] | np.ndarray) -> np.ndarray:
    """Tokens a step emits with k = 0..len(rates) drafted tokens, where rates[j] is the
    chance that token j is kept given every one before it was: 1 + sum of the chances
    that the first j tokens all are."""
    reach = np.cumprod(np.asarray(rates, dtype=np.float64))
    return np.concatenate([[1.0], 1.0 + np.cumsum(reach)])


def makespan_weights(rounds_left: Sequence[float | None]) -> list[float]:
    """Weights for the steps of a batch, from the rounds each slot still needs at its
    pace (None where unknown), so that the split serves the batch's longest request: a
    slot due to end in half the rounds the longest needs values its tokens at half,
    since rows that end it sooner only make the rounds the longest waits through
    dearer. Unknown weighs 1."""
    longest = max((r for r in rounds_left if r is not None), default=0.0)
    if longest <= 0:
        return [1.0] * len(rounds_left)
    return [1.0 if r is None else min(1.0, max(r, 0.0) / longest) for r in rounds_left]


def offer_prices(offers_left: Sequence[float | None], rates: Sequence[float], steps_left: Sequence[float | None]) -> list[float]:
    """What each offer's tokens are worth, in plain steps apiece, in a round no request
    queues for: what they would cost it with the batch to itself (1 / its rate alone),
    weighted by the rounds it still needs against the batch's longest (makespan_weights,
    over the offers' and the plain steps' rounds left), and shared with each slot taking
    a plain step beside it: those gain nothing from the draft rows and wait through
    every one of them (a title beside a long copy), so a row must be worth its cost to
    them too."""
    weights = makespan_weights([*offers_left, *steps_left])
    return [w / max(1.0, r) / (1 + len(steps_left)) for w, r in zip(weights, rates)]
