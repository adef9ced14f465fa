"""`specli heads eval`: what trained heads would earn on this machine.

Held-out acceptance comes from the training's held-out documents (teacher-forced along
the target's own rows). A plain step and a verify batch of k + 1 rows come from this
machine's calibration (runtime.measure.calibration, read by the command); the drafters' chains
of k tokens are timed here, each the median of several. A chain of k pays when
tau(k) > (verify batch + drafting) in plain steps.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from specli.heads import store
from specli.heads.data import DataDir
from specli.heads.eagle_train import evaluate_eagle
from specli.heads.loaded import heads_folder, load_heads, median_seconds
from specli.heads.medusa_train import evaluate
from specli.heads.rows import Acceptance

REPEATS = 25  # timed chains of each length


def evaluate_target(path: Path, name: str, n_vocab: int, t1: float,
                    batch_steps: Callable[[int], float]) -> dict[str, Any]:
    """The report for the heads trained on the target file `path`: `t1` a plain step's
    seconds, `batch_steps(n)` a verify batch of n rows in plain steps."""
    loaded = load_heads(path, name, None, n_vocab)
    heads = loaded.medusa
    _, held, _ = DataDir(heads_folder(path, None) / store.DATA_DIR).load()
    h = held.hidden[0].astype(np.float32)
    kinds: list[tuple[str, Acceptance, Callable[[int], Any]]] = [
        ("medusa", evaluate(heads, held), lambda k: heads.draft(h, k))]
    if loaded.eagle is not None:
        eagle = loaded.eagle
        kinds.append(("eagle", evaluate_eagle(eagle, held, heads.n_heads),
                      lambda k: eagle.draft(h, int(eagle.vocab[0]), k)))
    by_k = []
    for drafter, acc, draft in kinds:
        for k in range(1, heads.n_heads + 1):
            cost_steps = median_seconds(lambda k=k, draft=draft: draft(k), REPEATS) / t1
            verify = batch_steps(k + 1)
            cost = verify + cost_steps
            by_k.append({"drafter": drafter, "k": k, "tau": acc.tau(k), "alone": acc.alone[k - 1],
                         "draft_steps": cost_steps, "verify_steps": verify, "tau_needed": cost,
                         "speed": acc.tau(k) / cost})
    acc = kinds[0][1]
    return {"target": name, "alone": list(acc.alone), "chain": list(acc.chain), "coverage": acc.coverage,
            "held_out_rows": acc.rows, "step_ms": t1 * 1000, "by_k": by_k}
