"""What reading the target's hidden states beside its logits costs (#53, the learned
drafters' features), and whether the logits stay the same.

For each target: a plain step (1 token), verify batches of 2, 4, 8 and 16 rows (every
row's logits asked, as verification does) and a 512-token prefill (its last row asked),
each timed with features off and on, interleaved, median of --repeats; then each
configuration's logits compared bit for bit. With features on llama.cpp makes every row
of a batch an output, so a prefill computes a full-vocabulary logits row per token: that
is the cost to expect there, and the reason features are off unless a drafter reads them.

    python -m benchmarks.features_cost
    python -m benchmarks.features_cost --targets qwen2.5-coder-1.5b-instruct-q4_k_m,qwen2.5-coder-1.5b-instruct-f16
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from specli import registry
from specli.backend import LoadOptions, Model

TEXT = (Path(__file__).resolve().parent.parent / "specli" / "engine" / "grammar.py").read_text()
PREFIX = 256  # tokens in the cache before each step and verify batch
BATCHES = (1, 2, 4, 8, 16)
PREFILL = 512


def _timed(m: Model, toks: list[int], n: int, features: bool) -> tuple[float, np.ndarray]:
    """Seconds of one decode of `n` tokens after the prefix (all rows asked; a prefill:
    its last), and its logits."""
    m.set_features(features)
    if n == PREFILL:
        m.reset()
        t0 = time.perf_counter()
        rows = m.decode(toks[:n], [n - 1])
    else:
        m.rollback(PREFIX)
        t0 = time.perf_counter()
        rows = m.decode(toks[PREFIX:PREFIX + n], range(n))
    if features:
        m.hidden()
    return time.perf_counter() - t0, rows.copy()


def measure(name: str, threads: int, repeats: int) -> list[dict[str, Any]]:
    m = Model(registry.resolve(name), LoadOptions(n_ctx=2048, n_threads=threads))
    try:
        toks = m.tokenize(TEXT)[:PREFILL]
        m.decode(toks[:PREFIX], [PREFIX - 1])
        out = []
        for n in (*BATCHES, PREFILL):
            times: dict[bool, list[float]] = {False: [], True: []}
            rows: dict[bool, np.ndarray] = {}
            for _ in range(repeats):  # off and on interleaved: the machine's drift hits both
                for features in (False, True):
                    s, rows[features] = _timed(m, toks, n, features)
                    times[features].append(s)
            if n == PREFILL:
                m.set_features(False)
                m.reset()
                m.decode(toks[:PREFIX], [PREFIX - 1])
            off, on = statistics.median(times[False]), statistics.median(times[True])
            out.append({"target": name, "rows": "prefill 512" if n == PREFILL else n, "off_ms": 1000 * off,
                        "on_ms": 1000 * on, "ratio": on / off, "identical": bool(np.array_equal(rows[False], rows[True])),
                        "max_diff": float(np.abs(rows[False] - rows[True]).max()),
                        "same_argmax": bool((rows[False].argmax(axis=1) == rows[True].argmax(axis=1)).all())})
        return out
    finally:
        m.set_features(False)
        m.close()


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.features_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="qwen2.5-coder-1.5b-instruct-q4_k_m,qwen2.5-coder-1.5b-instruct-f16")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    print("| target | batch | features off ms | on ms | on / off | logits identical | max abs difference | same argmax |")
    print("|---|---|---:|---:|---:|---|---:|---|")
    for name in args.targets.split(","):
        for r in measure(name, args.threads, args.repeats):
            print(f"| {r['target']} | {r['rows']} | {r['off_ms']:.1f} | {r['on_ms']:.1f} | {r['ratio']:.2f}x | "
                  f"{'yes' if r['identical'] else 'NO'} | {r['max_diff']:.2g} | {'yes' if r['same_argmax'] else 'NO'} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
