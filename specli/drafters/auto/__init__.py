"""The `auto` drafter: each step it prices every drafter it has (the n-gram index, the
history store, the draft model) with this machine's cost model and what it has learned
of their acceptance, and drafts with the best, or not at all.

- `costs`: the cost model (plain step, batch curve, corrected online);
- `policy`: the choice of drafter and draft length, acceptance estimates, the ledger;
- `drafter`: the drafter itself.
"""

from specli.drafters.auto.costs import CostModel
from specli.drafters.auto.drafter import AutoDrafter, Learned

__all__ = ["AutoDrafter", "CostModel", "Learned"]
