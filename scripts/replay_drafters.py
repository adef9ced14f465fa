"""Replay n-gram drafting policies on recorded greedy outputs, with measured costs.

At temperature 0 a draft is accepted exactly as far as it matches what the target
produced alone, so a baseline run's tokens decide every step of any deterministic
drafter. This prices a policy in seconds with the calibrated verify costs, without
running the target again: a tuning aid, not a benchmark (measure with `specli bench`).

    python scripts/replay_drafters.py BENCH.json [BENCH.json ...] [--prompts FILE]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from specli.bench import first_difference, load_prompt_file, suite_prompts
from specli.drafters.auto import AutoDrafter
from specli.drafters.auto.costs import CostModel
from specli.drafters.ngram import NgramDrafter
from specli.profiles import resolve_settings
from specli.runtime import calibration, open_runtime
from specli.types import Draft

Policy = Callable[[], object]


def replay(drafter: object, prompt: Sequence[int], output: Sequence[int], verify: Sequence[float], k_max: int) -> float:
    """Seconds the target spends after the prefill (drafting with an n-gram is ~free)."""
    history = [*prompt, output[0]]
    drafter.begin(history)  # type: ignore[attr-defined]
    seconds, i = 0.0, 1
    while i < len(output):
        k = min(k_max, len(output) - i - 1)
        d: Draft = drafter.propose(history, k) if k > 0 else Draft()  # type: ignore[attr-defined]
        tokens = d.tokens[:k]
        n_acc = first_difference(tokens, output[i : i + len(tokens)])
        n_acc = len(tokens) if n_acc is None else n_acc
        seconds += verify[len(tokens)]
        emitted = output[i : i + n_acc + 1]
        history.extend(emitted)
        i += len(emitted)
        drafter.accept(history, n_acc, verify[len(tokens)])  # type: ignore[attr-defined]
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json", nargs="+", type=Path)
    ap.add_argument("--prompts", type=Path, help="the prompt file those runs used (default: built-in suites)")
    ap.add_argument("--verify", help="seconds per target batch of 1, 2, ... tokens (default: calibration cache)")
    ap.add_argument("--profile", default="default")
    args = ap.parse_args()

    runs = []
    for path in args.bench_json:
        data = json.loads(path.read_text())
        prompts = load_prompt_file(args.prompts) if args.prompts else suite_prompts("all")
        by_id = {p.id: p for p in prompts}
        for rec in data["records"]:
            if rec["mode"] == "baseline" and rec["turn"] == 0 and rec["repeat"] == 0:
                runs.append((rec["category"], by_id[rec["prompt_id"]], rec["tokens"]))

    s = resolve_settings(args.profile, {"drafter": "ngram", "draft": None})
    rt = open_runtime(s)
    if args.verify:
        verify = [float(x) for x in args.verify.split(",")]
    else:  # the figures `auto` measured for this target (run `specli generate --drafter auto` once)
        entries = json.loads(calibration.cache_file().read_text())["entries"]
        e = next(e for key, e in entries.items() if key.startswith(rt.target.path.name + "|"))
        verify = CostModel(e["t1"], e["sizes"], e["ratios"]).verify_costs(64)
    print("verify cost / t1:", " ".join(f"{v / verify[0]:.2f}" for v in verify))
    data_tokens = [(cat, rt.prompt_tokens(p.turns[0]), out) for cat, p, out in runs]

    def ngram(n_min: int, n_max: int) -> Callable[[], object]:
        return lambda: NgramDrafter(n_min, n_max, rt.target.is_eog)

    def auto(n_min: int, n_max: int) -> Callable[[], object]:
        def make() -> object:
            a = AutoDrafter(CostModel.from_measured(verify, 1.0), None, NgramDrafter(n_min, n_max, rt.target.is_eog))
            a.costs.observe_verify = lambda *a: None  # type: ignore[method-assign]
            return a
        return make

    policies: dict[str, tuple[Callable[[], object], int]] = {}
    for k in (2, 3, 5, 8):
        policies[f"ngram 2-4 k={k}"] = (ngram(2, 4), k)
    policies["ngram 3-5 k=5"] = (ngram(3, 5), 5)
    policies["ngram 3-6 k=5"] = (ngram(3, 6), 5)
    policies["ngram 3-6 k=3"] = (ngram(3, 6), 3)
    for k in (5, 8):
        policies[f"auto 2-4 k={k}"] = (auto(2, 4), k)
    policies["auto 1-4 k=8"] = (auto(1, 4), 8)
    policies["auto 3-6 k=8"] = (auto(3, 6), 8)

    per_cat: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for cat, prompt, out in data_tokens:
        base = verify[0] * (len(out) - 1)
        for name, (make, k_max) in policies.items():
            t = replay(make(), prompt, out, verify, k_max)
            per_cat[cat][name].append(base / t)
    cats = sorted(per_cat)
    print(f"{'policy':18s} " + " ".join(f"{c[:9]:>9s}" for c in cats))
    for name in policies:
        cells = []
        for c in cats:
            xs = sorted(per_cat[c][name])
            cells.append(f"{xs[len(xs) // 2]:9.2f}")
        print(f"{name:18s} " + " ".join(cells))
    rt.close()


if __name__ == "__main__":
    main()
