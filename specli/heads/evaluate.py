"""`specli heads eval`: what trained heads would earn on this machine.

Held-out acceptance comes from the training's held-out documents (teacher-forced along
the target's own rows). Costs are measured here, now: a plain step of the target, a
verify batch of k + 1 rows, and the heads' chain of k tokens, each the median of
several. A chain of k pays when tau(k) > (verify batch + drafting) in plain steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from specli.backend import LoadOptions, Model
from specli.heads import data as heads_data
from specli.heads.eagle_train import evaluate_eagle
from specli.heads.loaded import heads_folder, load_heads, median_seconds
from specli.heads.medusa_train import Acceptance, evaluate

CONTEXT = 256  # tokens decoded before the steps are timed
REPEATS = 9


def step_costs(model: Model, context: list[int], k_max: int) -> tuple[float, list[float]]:
    """(a plain step's seconds, verify batch of n + 1 rows in plain steps for n = 1..k_max)."""
    model.reset()
    model.decode(context)
    base = model.n_past

    def batch(n: int) -> None:
        model.decode(context[:n], range(n))
        model.rollback(base)

    t1 = median_seconds(lambda: batch(1), REPEATS)
    return t1, [median_seconds(lambda n=n: batch(n + 1), REPEATS) / t1 for n in range(1, k_max + 1)]


def evaluate_target(path: Path, name: str, threads: int | None) -> dict[str, Any]:
    model = Model(path, LoadOptions(n_ctx=2 * CONTEXT, n_threads=threads))
    try:
        loaded = load_heads(path, name, None, model.n_vocab)
        heads = loaded.medusa
        _, held, tokens = heads_data.DataDir(heads_folder(path, None) / "data").load()
        context = [int(t) for t in np.concatenate(tokens)[:CONTEXT]]
        t1, ratios = step_costs(model, context, heads.n_heads)
    finally:
        model.close()
    h = held.hidden[0].astype(np.float32)
    kinds: list[tuple[str, Acceptance, Any]] = [("medusa", evaluate(heads, held), lambda k: heads.draft(h, k))]
    if loaded.eagle is not None:
        eagle = loaded.eagle
        kinds.append(("eagle", evaluate_eagle(eagle, held, heads.n_heads),
                      lambda k: eagle.draft(h, int(eagle.vocab[0]), k)))
    by_k = []
    for drafter, acc, draft in kinds:
        for k in range(1, heads.n_heads + 1):
            cost_steps = median_seconds(lambda k=k, draft=draft: draft(k), 25) / t1
            cost = ratios[k - 1] + cost_steps
            by_k.append({"drafter": drafter, "k": k, "tau": acc.tau(k), "alone": acc.alone[k - 1],
                         "draft_steps": cost_steps, "verify_steps": ratios[k - 1], "tau_needed": cost,
                         "speed": acc.tau(k) / cost})
    acc = kinds[0][1]
    return {"target": name, "alone": list(acc.alone), "chain": list(acc.chain), "coverage": acc.coverage,
            "held_out_rows": acc.rows, "step_ms": t1 * 1000, "by_k": by_k}
