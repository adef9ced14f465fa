"""N-gram when the history has a confident match, the draft model otherwise."""

from __future__ import annotations

from collections.abc import Sequence

from specli.drafters.cross_vocab import CrossVocabDrafter
from specli.drafters.draft_model import DraftModelDrafter
from specli.drafters.ngram import NgramDrafter
from specli.engine.grammar import Constraint
from specli.types import Draft, Drafter


class HybridDrafter(Drafter):
    name = "hybrid"

    def __init__(self, draft: DraftModelDrafter | CrossVocabDrafter, ngram: NgramDrafter, min_match: int = 3) -> None:
        self.draft, self.ngram, self.min_match = draft, ngram, min_match

    @property
    def decode_seconds(self) -> float:
        return self.draft.decode_seconds

    def constrain(self, constraint: Constraint | None, take_forced: bool = True) -> None:
        self.draft.constrain(constraint, take_forced)

    def begin(self, history: Sequence[int]) -> None:
        self.draft.begin(history)
        self.ngram.begin(history)

    def propose(self, history: Sequence[int], k: int) -> Draft:
        d = self.ngram.propose(history, k)
        if d.tokens and self.ngram.last_match_n >= self.min_match:
            return d
        return self.draft.propose(history, k)

    def accept(self, history: Sequence[int], n_accepted: int, verify_seconds: float = 0.0) -> None:
        self.draft.accept(history, n_accepted, verify_seconds)
        self.ngram.accept(history, n_accepted, verify_seconds)

    def end(self, history: Sequence[int]) -> None:
        self.draft.end(history)
        self.ngram.end(history)
