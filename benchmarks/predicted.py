"""Predicted outputs (OpenAI's `prediction`) as a draft source, on edit requests:

    python -m benchmarks.predicted --profile default --edits 5 --json predicted.json

Each edit of inventory.py is asked three ways, in rotating order, from empty caches and
without the history store: the file in the prompt ("prompt"), the file in the prompt
and as the prediction ("both"), and the file only as the prediction ("prediction").
Per request: wall seconds (prefill and decode), decode tok/s, acceptance, and the
prediction's tokens drafted and accepted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks import serve_workloads as wl
from specli import profiles
from specli.drafters.ngram import PREDICTION
from specli.engine import GenerationConfig, metrics, run
from specli.runtime import open_runtime

VARIANTS = ("prompt", "both", "prediction")


def messages(variant: str, current: str, instruction: str) -> list[dict[str, str]]:
    if variant == "prediction":
        return [{"role": "system", "content": wl.SYSTEM},
                {"role": "user", "content": f"In `{wl.FILE_NAME}`: {instruction}"}]
    return wl.edit_prompt(current, instruction)


def one(rt: Any, variant: str, current: str, instruction: str, max_tokens: int) -> dict[str, Any]:
    for m in (rt.target, rt.draft):
        if m is not None:
            m.reset()
    tokens = rt.target.chat_tokens(messages(variant, current, instruction))
    predicted = rt.target.tokenize(current, add_special=False) if variant != "prompt" else ()
    t0 = time.perf_counter()
    res = run(rt.target, tokens, GenerationConfig(max_tokens=max_tokens, draft_max=rt.settings.draft_max),
              rt.drafter(prediction=predicted))
    c = res.counters
    return {"variant": variant, "wall_s": time.perf_counter() - t0, "prompt_tokens": len(tokens),
            "tokens": c.n_generated, "decode_tps": metrics.decode_tokens_per_second(c),
            "acceptance": metrics.acceptance_rate(c), "prediction_drafted": c.drafted_by.get(PREDICTION, 0),
            "prediction_accepted": c.accepted_by.get(PREDICTION, 0), "text": res.text}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="default")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--edits", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=900)
    p.add_argument("--json", dest="json_out")
    args = p.parse_args()
    s = profiles.resolve_settings(args.profile, {"threads": args.threads, "ctx": 4096, "history": False})
    rt = open_runtime(s)
    rows: list[dict[str, Any]] = []
    try:
        current = wl.FILE
        for i, instruction in enumerate(wl.EDITS[: args.edits]):
            order = VARIANTS[i % 3 :] + VARIANTS[: i % 3]
            got = {v: one(rt, v, current, instruction, args.max_tokens) for v in order}
            for v in VARIANTS:
                r = got[v]
                rows.append({"edit": i, **{k: x for k, x in r.items() if k != "text"}})
                print(f"edit {i} {v:10} {r['wall_s']:6.1f} s prompt {r['prompt_tokens']:4d} gen {r['tokens']:4d} "
                      f"decode {r['decode_tps']:5.1f} tok/s acc {r['acceptance']:.0%} "
                      f"prediction {r['prediction_accepted']}/{r['prediction_drafted']}", flush=True)
            current = wl.file_from_answer(got["prompt"]["text"], current)
    finally:
        rt.close()
    summary = {}
    for v in VARIANTS:
        rs = [r for r in rows if r["variant"] == v]
        summary[v] = {"wall_s": sum(r["wall_s"] for r in rs), "decode_tps": statistics.median(r["decode_tps"] for r in rs),
                      "acceptance": statistics.median(r["acceptance"] for r in rs)}
    for v in ("both", "prediction"):
        summary[v]["wall_vs_prompt"] = summary["prompt"]["wall_s"] / summary[v]["wall_s"]
        summary[v]["decode_vs_prompt"] = summary[v]["decode_tps"] / summary["prompt"]["decode_tps"]
    print(json.dumps(summary, indent=1))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
