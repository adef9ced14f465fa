"""How well sets of heads trained for one target agree with it on text none of them saw:
the target's own greedy answers to Spec-Bench's first turns (never trained on), each
drafted position judged teacher-forced, every set on the same rows. For comparing
trainings (more rows, another recipe) on one target.

    python -m benchmarks.heads_acceptance --heads ~/.cache/specli/heads/<folder> --heads <other folder>
    python -m benchmarks.heads_acceptance --heads A --heads B --categories math_reasoning,writing --limit 4
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.heads_speed import questions
from specli import registry
from specli.backend import LoadOptions, Model
from specli.heads import store
from specli.heads.data import answer_rows
from specli.heads.eagle_train import evaluate_eagle
from specli.heads.medusa_train import evaluate
from specli.heads.rows import Rows


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.heads_acceptance", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    p.add_argument("--heads", type=Path, action="append", required=True, help="a heads folder (repeatable)")
    p.add_argument("--categories", default="math_reasoning,writing")
    p.add_argument("--limit", type=int, default=4, help="questions per category")
    p.add_argument("--max-new", type=int, default=192)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    m = Model(registry.resolve(args.target), LoadOptions(n_ctx=2048, n_threads=args.threads))
    t0 = time.perf_counter()
    parts = []
    m.set_features(True)
    for text in questions(args.categories.split(","), args.limit):
        parts.append(Rows.document(*answer_rows(m, m.chat_tokens([{"role": "user", "content": text}]), args.max_new)))
    rows = Rows.join(parts)
    n_vocab = m.n_vocab
    m.close()
    print(f"{args.target}: {len(rows):,} rows of its answers to {len(parts)} Spec-Bench questions "
          f"({args.categories}; {time.perf_counter() - t0:.0f} s)")
    print("| heads | rows trained on | Medusa 1/2/3 | chain tau@3 | EAGLE 1/2/3 | chain tau@3 |")
    print("|---|---:|---|---:|---|---:|")
    for folder in args.heads:
        medusa, eagle = store.read_heads(folder), store.load_eagle(folder, n_vocab)
        recipe = store.read_recipe(folder) or {}
        med = evaluate(medusa, rows)
        line = f"| {folder.name} | {recipe.get('data', {}).get('rows', 0):,} | "
        line += f"{'/'.join(f'{a:.1%}' for a in med.alone)} | {med.tau(3):.2f} | "
        if eagle is not None:
            eag = evaluate_eagle(eagle, rows, medusa.n_heads)
            line += f"{'/'.join(f'{a:.1%}' for a in eag.alone)} | {eag.tau(3):.2f} |"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
