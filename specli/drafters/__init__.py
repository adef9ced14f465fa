"""Drafters: each proposes tokens behind the `specli.types.Drafter` protocol."""

from specli.drafters.draft_model import DraftModelDrafter
from specli.drafters.ngram import NgramDrafter

__all__ = ["DraftModelDrafter", "NgramDrafter"]
