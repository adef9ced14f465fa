"""Do heads trained on one quantization of a model serve another of the same weights?

Both files answer the same prompts (drawn with another seed than training's), with
features on; the heads trained on `--trained` are evaluated, teacher-forced, on each
file's own rows: held-out agreement of every drafted position with that file's own
greedy tokens. Where the other file's figures match, the hidden states (and the lm_head
solved on the trained file's rows) carry over.

    python -m benchmarks.heads_transfer
    python -m benchmarks.heads_transfer --trained qwen2.5-coder-1.5b-instruct-q4_k_m \\
        --other qwen2.5-coder-1.5b-instruct-f16 --prompts 6
"""

from __future__ import annotations

import argparse
import itertools
import time

from specli import registry
from specli.backend import LoadOptions, Model
from specli.heads import store
from specli.heads.data import answer_rows
from specli.heads.eagle_train import evaluate_eagle
from specli.heads.loaded import heads_folder
from specli.heads.medusa_train import evaluate
from specli.heads.prompts import prompts
from specli.heads.rows import Rows


def rows_of(name: str, texts: list[str], max_new: int, threads: int) -> tuple[Rows, float]:
    """The file's rows over its own greedy answers to `texts`, and the seconds they took."""
    m = Model(registry.resolve(name), LoadOptions(n_ctx=2048, n_threads=threads))
    t0 = time.perf_counter()
    parts = []
    m.set_features(True)
    try:
        for text in texts:
            parts.append(Rows.document(*answer_rows(m, m.chat_tokens([{"role": "user", "content": text}]), max_new)))
    finally:
        m.close()
    return Rows.join(parts), time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.heads_transfer", description=__doc__.split("\n\n")[0])
    p.add_argument("--trained", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    p.add_argument("--other", default="qwen2.5-coder-1.5b-instruct-f16")
    p.add_argument("--prompts", type=int, default=6)
    p.add_argument("--max-new", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    folder = heads_folder(registry.resolve(args.trained), None)
    medusa = store.read_heads(folder)
    texts = list(itertools.islice(prompts(seed=12345), args.prompts))
    print(f"heads of {args.trained} ({folder.name}); {len(texts)} prompts, up to {args.max_new} tokens each")
    print("| rows from | rows | Medusa alone 1/2/3 | Medusa tau at 3 | EAGLE alone 1/2/3 | EAGLE tau at 3 | s |")
    print("|---|---:|---|---:|---|---:|---:|")
    for name in (args.trained, args.other):
        rows, seconds = rows_of(name, texts, args.max_new, args.threads)
        eagle = store.load_eagle(folder, int((store.read_recipe(folder) or {})["target"]["n_vocab"]))
        m_acc = evaluate(medusa, rows)
        e_acc = evaluate_eagle(eagle, rows, medusa.n_heads) if eagle is not None else None
        e_txt = ("/".join(f"{a:.1%}" for a in e_acc.alone), f"{e_acc.tau(3):.2f}") if e_acc else ("-", "-")
        print(f"| {name} | {m_acc.rows} | {'/'.join(f'{a:.1%}' for a in m_acc.alone)} | {m_acc.tau(3):.2f} | "
              f"{e_txt[0]} | {e_txt[1]} | {seconds:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
