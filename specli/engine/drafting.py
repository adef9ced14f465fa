"""The draft phase of a step: the tokens a grammar forces, the drafter's draft (cut where
the grammar forbids), then the tokens forced after it, all for one verify batch.

A grammar's forced tokens are the canonical tokens of the bytes it forces, and where it
forces them llguidance's mask allows that token alone (tested): the masked target keeps
them with probability 1. They are verified anyway (it costs their rows) and a cost model
prices them as certain when it sizes the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specli.engine.grammar import Constraint
from specli.types import BatchPrices, Draft, Drafter

EMPTY = Draft()


@dataclass
class Proposal:
    """A step's draft; its first `n_forced` tokens were forced before the drafter's.
    `asked`: the drafter proposed, so it hears the verdict."""

    draft: Draft
    n_forced: int = 0
    asked: bool = False


NOTHING = Proposal(EMPTY)  # no drafter, or no room to draft


def propose(drafter: Drafter, history: list[int], k: int, constraint: Constraint | None,
            grammar_drafts: bool) -> Proposal:
    """Up to k > 0 tokens to verify after `history`."""
    forced: list[int] = []
    run = 0  # tokens the grammar forces next
    if constraint is not None and grammar_drafts:
        whole = constraint.forced()[:k]
        forced, run = affordable(whole, drafter.costs, 0, 1), len(whole)
    # the drafter goes on after a whole forced run (a cut one goes on next step)
    if k > len(forced) and len(forced) == run:
        return Proposal(_drafter_draft(drafter, history, forced, k, constraint, grammar_drafts), len(forced), True)
    return Proposal(Draft.of_forced(forced) if forced else EMPTY, len(forced))


def _drafter_draft(drafter: Drafter, history: list[int], forced: list[int], k: int,
                   constraint: Constraint | None, grammar_drafts: bool) -> Draft:
    """The drafter's draft after the forced tokens (it reads them as history), cut where
    the grammar forbids, then the tokens forced after it."""
    pushed = 0
    if forced:
        drafter.prefixed(len(forced))
        pushed = constraint.push(forced)  # type: ignore[union-attr]
    room = k - len(forced)
    try:
        d = drafter.propose([*history, *forced] if forced else history, room)
        if len(d.tokens) > room:
            d = d.head(room)
        if constraint is not None:
            d = _allowed_part(d, constraint, drafter)
            if grammar_drafts and d.q_after is None:
                d = _extended(d, constraint, room, drafter)
    finally:
        if pushed:
            constraint.pop(pushed)  # type: ignore[union-attr]
    return d.with_forced_before(forced) if forced else d


def affordable(forced: list[int], costs: BatchPrices | None, n_before: int, least: int) -> list[int]:
    """As many forced tokens (at least `least`) after a batch of n_before + 1 tokens as give
    the best rate per plain step if all are kept, priced by the drafter's cost model (all
    of them without one)."""
    if not forced or costs is None or costs.step <= 0:
        return forced
    n = n_before + 1 + np.arange(least, len(forced) + 1)  # batch sizes
    rate = n / costs.batch_ratios(int(n[-1]))[n - 1]
    return forced[: least + int(np.argmax(rate))]


def _extended(draft: Draft, constraint: Constraint, k: int, drafter: Drafter) -> Draft:
    """The drafter's draft, then the tokens the grammar forces after it, in the same batch
    (kept if the whole draft is; the drafter hears how many were added)."""
    forced = affordable(constraint.forced_after(draft.tokens)[: k - len(draft.tokens)], drafter.costs,
                        len(draft.tokens), 0)
    if not forced:
        return draft
    drafter.extend(len(forced))
    return draft.with_forced_after(forced)


def _allowed_part(draft: Draft, constraint: Constraint, drafter: Drafter) -> Draft:
    """The draft up to its first token the grammar forbids; the drafter hears of the cut."""
    n = constraint.valid_prefix(draft.tokens)
    if n == len(draft.tokens):
        return draft
    drafter.cut(n)
    return draft.cut(n)

