"""Drafters: each proposes tokens behind the `specli.types.Drafter` protocol."""

from specli.drafters.auto import AutoDrafter, Learned
from specli.drafters.cross_vocab import CrossVocabDrafter
from specli.drafters.draft_model import DraftModelDrafter
from specli.drafters.heads import EagleDrafter, LearnedDrafter, MedusaDrafter
from specli.drafters.hybrid import HybridDrafter
from specli.drafters.ngram import NgramDrafter
from specli.drafters.suffix import SuffixDrafter

__all__ = ["AutoDrafter", "Learned", "CrossVocabDrafter", "DraftModelDrafter", "EagleDrafter", "HybridDrafter", "LearnedDrafter", "MedusaDrafter", "NgramDrafter", "SuffixDrafter"]
