"""Where one slot's answer can differ from the same request answered alone: the logit
noise a slot's rows show against one-token rows (`slot_noise`), and where two generations
first differ with the target's logit gap there (`divergence_gap`). Used by the slot tests
and benchmarks.clients."""

from __future__ import annotations

import numpy as np

from harness.serve_workloads import FILE
from specli.backend import Model


def slot_noise(model: Model) -> float:
    """The largest logit difference a slot's rows can show against the same rows decoded
    alone, one token at a time: batches of 2 to 24 rows, and a sequence whose cache cells
    are scattered among another's (a unified KV cache attends to its cells in their
    order in the cache). `model` holds 2 sequences or more."""
    probe = model.tokenize(NOISE_TEXT)[:65]
    other = model.tokenize(FILE)[:64]
    model.reset()
    model.decode(probe[:1])
    one = np.array([model.decode([t], [0])[0].copy() for t in probe[1:]])
    worst = 0.0
    for n in (2, 4, 8, 16, 24):
        model.rollback(1)
        rows = np.concatenate([model.decode(probe[i:i + n], range(len(probe[i:i + n]))).copy()
                               for i in range(1, len(probe), n)])
        worst = max(worst, float(np.abs(rows - one).max()))
    model.rollback(1)
    for i, t in enumerate(probe[1:]):
        model.decode(other[i % 60:i % 60 + 3], seq=1)  # takes cells, and gives two back
        model.rollback(len(model.seq_tokens(1)) - 2 if i % 16 else 0, 1)  # or all it holds
        worst = max(worst, float(np.abs(model.decode([t], [0])[0] - one[i]).max()))
    model.reset()
    return worst


NOISE_TEXT = ("def area(r):\n    return 3.14159 * r * r\n\nprint(area(2), area(3), area(10))\n\n"
              "Once upon a time there was a fox who lived in a small house near the river, and every day")


def divergence_gap(model: Model, prompt: list[int], a: list[int], b: list[int]) -> tuple[int, float] | None:
    """Where two generations of `prompt` first differ, and the logit gap between their two
    tokens there (the context decoded as a generation decodes it: the prompt but its last
    token in one batch, then one token at a time); None where they are equal."""
    n = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), None)
    if n is None:
        return None if len(a) == len(b) else (min(len(a), len(b)), float("inf"))
    model.reset()
    model.decode(prompt[:-1])
    row = np.zeros(0)
    for t in [prompt[-1], *a[:n]]:
        row = model.decode([t], [0])[0]
    return n, float(row[a[n]] - row[b[n]])
