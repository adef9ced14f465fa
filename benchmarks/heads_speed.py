"""How fast learned drafters decode beside plain decoding on a target, in one run: the
ceiling they give where the verify batch is cheap (the F16 target on a CPU).

Heads serve only the file they were trained on; to price the F16 target without an hour
of training on it, this benchmark (a measurement, not a way to serve) loads the heads
another quantization of the same weights trained (`--heads-from`), which agree with the
target about a tenth less (benchmarks.heads_transfer). Prompts: Spec-Bench's first turns
of the categories named (never trained on). Every mode's greedy output is compared with
plain decoding's.

    python -m benchmarks.heads_speed
    python -m benchmarks.heads_speed --target qwen2.5-coder-1.5b-instruct-f16 --limit 2 -n 96
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from specli import registry
from specli.backend import LoadOptions, Model
from specli.bench.prompts import load_prompt_file, select_prompts
from specli.drafters import EagleDrafter, MedusaDrafter
from specli.engine import GenerationConfig, run
from specli.heads import store
from specli.heads.blas import limit_blas_threads
from specli.heads.loaded import heads_folder

BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench" / "spec_bench_question.jsonl"


def questions(categories: list[str], limit: int) -> list[str]:
    """The first turns of `limit` Spec-Bench questions of each category."""
    return [p.turns[0] for p in select_prompts(load_prompt_file(BENCH), categories, limit)]


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.heads_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct-f16")
    p.add_argument("--heads-from", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    p.add_argument("--categories", default="math_reasoning,writing")
    p.add_argument("--limit", type=int, default=2)
    p.add_argument("-n", "--max-tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    folder = heads_folder(registry.resolve(args.heads_from), None)
    medusa = store.read_heads(folder)
    m = Model(registry.resolve(args.target), LoadOptions(n_ctx=2048, n_threads=args.threads))
    eagle = store.load_eagle(folder, m.n_vocab)
    assert eagle is not None, f"no feature drafter in {folder}: train the heads again"
    modes = {"plain": None, "medusa k=1": ("medusa", 1), "medusa k=3": ("medusa", 3), "eagle k=1": ("eagle", 1),
             "eagle k=3": ("eagle", 3)}
    rows: dict[str, list[tuple[float, float, bool]]] = {name: [] for name in modes}
    limit_blas_threads(1)
    for text in questions(args.categories.split(","), args.limit):
        prompt = m.chat_tokens([{"role": "user", "content": text}])
        plain_tokens: list[int] = []
        for name, mode in modes.items():
            m.reset()
            m.set_features(mode is not None)
            drafter: MedusaDrafter | EagleDrafter | None = None
            if mode is not None:
                drafter = MedusaDrafter(medusa, m, m.n_vocab) if mode[0] == "medusa" else EagleDrafter(eagle, m, m.n_vocab)
            cfg = GenerationConfig(max_tokens=args.max_tokens, draft_max=mode[1] if mode else 0)
            res = run(m, prompt, cfg, drafter)
            c = res.counters
            speed = c.n_generated / max(c.t_total - c.t_prefill, 1e-9)
            if mode is None:
                plain_tokens = res.tokens
            rows[name].append((speed, c.n_step_tokens / max(c.n_target_forwards, 1), res.tokens == plain_tokens))
    m.close()
    base = [s for s, _, _ in rows["plain"]]
    print(f"{args.target}, heads of {args.heads_from}; {len(base)} prompts ({args.categories}), "
          f"{args.max_tokens} tokens, {args.threads} threads; plain {np.median(base):.2f} tok/s")
    print("| mode | decode speedup, median (min-max) | tokens per forward | outputs equal to plain |")
    print("|---|---:|---:|---:|")
    for name, got in rows.items():
        ratios = [s / b for (s, _, _), b in zip(got, base)]
        print(f"| {name} | {np.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{np.mean([t for _, t, _ in got]):.2f} | {sum(e for _, _, e in got)}/{len(got)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
