"""What `serve --heads-learn` does for a user whose traffic is not what the heads were
trained on: the heads' agreement with the target on that user's later requests, before
and after rounds of online training on the earlier ones.

The traffic is one kind of request the training prompts (heads.prompts) never ask: SQL
queries over drawn tables, written for this benchmark. The first requests are served
(greedily, the feature drafter drafting, rows watched as a server watches them) and learned
from in rounds; then probe requests with other tables and tasks (never learned from) are
answered and their rows judged by the live weights of each round. The heads are a copy:
the user's own are not changed.

    python -m benchmarks.heads_online
    python -m benchmarks.heads_online --served 24 --probes 6 -n 160
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from specli import registry
from specli.backend import LoadOptions, Model
from specli.drafters import EagleDrafter
from specli.engine import GenerationConfig, generate
from specli.heads.eagle_train import evaluate_eagle
from specli.heads.loaded import LoadedHeads, heads_folder, load_heads
from specli.heads.medusa_train import evaluate
from specli.heads.online import OnlineHeads
from specli.heads.rows import Acceptance, Rows

TABLES = [("orders", "id, customer_id, total, created_at"), ("customers", "id, name, country, signed_up"),
          ("products", "id, title, price, stock"), ("employees", "id, name, team, salary, hired"),
          ("payments", "id, order_id, amount, method, paid_at"), ("tickets", "id, user_id, status, opened, closed"),
          ("flights", "id, origin, destination, departs, seats"), ("books", "id, author, year, pages, genre")]
ASKS = ["returns the ten largest rows by {c}", "counts the rows per {c}", "finds rows with no matching {c}",
        "computes the monthly average of {c}", "lists duplicates of {c}", "ranks rows by {c} within each group",
        "deletes rows older than a year by {c}", "updates {c} from a join with another table"]


def traffic(seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    while True:
        table, cols = rng.choice(TABLES)
        col = rng.choice(cols.split(", ")[1:])
        yield (f"Write a SQL query over the table {table}({cols}) that {rng.choice(ASKS).format(c=col)}. "
               "Explain it briefly.")


def answer(m: Model, online: OnlineHeads, heads: LoadedHeads, text: str, n: int) -> int:
    prompt = m.chat_tokens([{"role": "user", "content": text}])
    m.reset()
    assert heads.eagle is not None
    drafter = EagleDrafter(heads.eagle, m, m.n_vocab, n_heads=heads.medusa.n_heads)
    events = online.watch(m, prompt, generate(m, prompt, GenerationConfig(max_tokens=n, draft_max=3), drafter))
    return sum(len(ev.tokens) for ev in events)


def judged(heads: LoadedHeads, rows: Rows) -> tuple[Acceptance, Acceptance]:
    assert heads.eagle is not None
    k = heads.medusa.n_heads
    return evaluate(heads.medusa, rows), evaluate_eagle(heads.eagle, rows, k)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.heads_online", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    p.add_argument("--served", type=int, default=24, help="requests served and learned from")
    p.add_argument("--probes", type=int, default=6, help="later requests judged (never learned from)")
    p.add_argument("--every", type=int, default=1536, help="rows between rounds (serve --heads-learn-rows)")
    p.add_argument("-n", "--max-tokens", type=int, default=160)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    path = registry.resolve(args.target)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "heads"
        shutil.copytree(heads_folder(path, None), folder, ignore=shutil.ignore_patterns("data", "*state*"))
        m = Model(path, LoadOptions(n_ctx=2048, n_threads=args.threads))
        heads = load_heads(path, args.target, str(folder), m.n_vocab)
        m.set_features(True)
        probe = OnlineHeads(heads, folder, m.n_vocab, every=1 << 30)
        asks = traffic(1)
        for _ in range(args.probes):  # the probes' rows: every answer a training document, none held out
            answer(m, probe, heads, next(asks), args.max_tokens)
        probe_rows = probe.kept()
        online = OnlineHeads(heads, folder, m.n_vocab, every=args.every)
        table = [("before", 0, 0.0, *judged(heads, probe_rows))]
        served, t0 = traffic(2), time.perf_counter()
        for i in range(args.served):
            answer(m, online, heads, next(served), args.max_tokens)
            if online.due() or i == args.served - 1:
                r = online.learn()
                if r is not None:
                    print(r.line(), flush=True)
                    table.append((f"round {r.number}", online.rows_seen, r.seconds, *judged(heads, probe_rows)))
        m.close()
    print(f"\n{args.target}: {args.served} SQL requests served ({time.perf_counter() - t0:.0f} s in all), "
          f"{len(probe_rows)} probe rows from {args.probes} other requests; agreement per drafted position")
    print("| weights | rows learned from | round s | Medusa 1/2/3 | tau@3 | EAGLE 1/2/3 | tau@3 |")
    print("|---|---:|---:|---|---:|---|---:|")
    for name, rows, secs, med, eag in table:
        print(f"| {name} | {rows:,} | {secs:.0f} | {'/'.join(f'{a:.1%}' for a in med.alone)} | {med.tau(3):.2f} | "
              f"{'/'.join(f'{a:.1%}' for a in eag.alone)} | {eag.tau(3):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
