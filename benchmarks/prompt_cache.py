"""Restoring a conversation from the prompt cache against prefilling it again, and
whether the restored state answers as a fresh prefill does:

    python -m benchmarks.prompt_cache --profile default --tokens 4096 --json restore.json

A conversation of about --tokens tokens (an edit session on inventory.py) is prefilled
(the target, and the draft model where the profile has one) in one batch, timed; then
built in three parts, as turns leave it, saved as an entry, and
restored from RAM and from a file (the page cache dropped first where this user may),
--repeats times each. Then greedy and seeded sampled answers after a restore are
compared with answers after a fresh prefill: equal, or the first difference with the
fresh run's logit gap there (a near-tie is under the calibration's tie bound).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import serve_workloads as wl
from specli import profiles
from specli.engine import GenerationConfig, run
from specli.runtime import open_runtime
from specli.runtime.kv.cache_files import DiskStore
from specli.runtime.kv.prompt_cache import PromptCache, identity
from specli.types import SamplingParams


def conversation(rt: Any, n_tokens: int) -> list[int]:
    """An edit session's messages until the rendered chat holds about n_tokens."""
    msgs = [{"role": "system", "content": wl.SYSTEM}]
    i = 0
    while True:
        msgs += [{"role": "user", "content": f"Here is `{wl.FILE_NAME}`:\n\n```python\n{wl.FILE}```\n\n"
                                             + wl.EDITS[i % len(wl.EDITS)]},
                 {"role": "assistant", "content": f"```python\n{wl.FILE}```"}]
        i += 1
        tokens = rt.target.chat_tokens([*msgs, {"role": "user", "content": "Now add type hints everywhere."}])
        if len(tokens) >= n_tokens:
            return tokens


def drop_page_cache() -> bool:
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def fresh_prefill(rt: Any, tokens: list[int]) -> float:
    for m in (rt.target, rt.draft):
        if m is not None:
            m.reset()
    t0 = time.perf_counter()
    rt.target.decode(tokens[:-1])
    if rt.draft is not None:
        rt.draft.decode(tokens[:-1])
    return time.perf_counter() - t0


def answer(rt: Any, tokens: list[int], sampling: SamplingParams) -> list[int]:
    """64 tokens with fixed n-gram drafts: the same drafts both ways, so a seeded sampler
    draws the same random numbers (auto's choices follow its online costs, which move)."""
    drafter = rt.drafter(replace(rt.settings, drafter="ngram", draft_max=8))
    return run(rt.target, tokens, GenerationConfig(max_tokens=64, sampling=sampling, draft_max=8), drafter).tokens


def first_gap(rt: Any, tokens: list[int], restored: list[int], fresh: list[int]) -> dict[str, Any]:
    diff = next((i for i, (a, b) in enumerate(zip(restored, fresh)) if a != b), None)
    if diff is None:
        return {"equal": len(restored) == len(fresh)}
    rt.target.reset()
    row = rt.target.decode([*tokens, *fresh[:diff]], [len(tokens) + diff - 1])[0]
    return {"equal": False, "at": diff, "gap": float(row.max() - row[restored[diff]]),
            "tie_bound": rt.calibration().tie_bound}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="default")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", dest="json_out")
    args = p.parse_args()
    s = profiles.resolve_settings(args.profile, {"threads": args.threads, "ctx": args.tokens + 1024, "history": False})
    rt = open_runtime(s)
    out: dict[str, Any] = {"profile": args.profile, "threads": args.threads}
    try:
        tokens = conversation(rt, args.tokens)
        prompt = tokens[:-1]
        out["tokens"] = len(tokens)
        out["prefill_s"] = [fresh_prefill(rt, tokens) for _ in range(args.repeats)]
        # the entry as a conversation leaves it: turns prefilled one after the other, not in one batch
        for m in (rt.target, rt.draft):
            if m is not None:
                m.reset()
                for part in (prompt[: len(prompt) // 3], prompt[len(prompt) // 3 : 2 * len(prompt) // 3],
                             prompt[2 * len(prompt) // 3 :]):
                    m.decode(part)
        with tempfile.TemporaryDirectory() as tmp:
            disk = DiskStore(Path(tmp), identity(rt.target, rt.draft), 2**40)
            ram = PromptCache(rt.target, rt.draft, ram_bytes=2**40)
            on_disk = PromptCache(rt.target, rt.draft, ram_bytes=0, disk=disk)
            t0 = time.perf_counter()
            ram.save_live()
            out["save_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            on_disk.save_live()
            out["save_to_disk_s"] = time.perf_counter() - t0
            out["entry_mib"] = next(iter(ram.entries.values())).nbytes / 2**20
            ram_s, disk_s = [], []
            out["page_cache_dropped"] = True
            for _ in range(args.repeats):
                for m in (rt.target, rt.draft):
                    if m is not None:
                        m.reset()
                use = ram.prepare(tokens)
                assert use.source == "ram" and use.n_restored == len(prompt), use
                ram_s.append(use.seconds)
                for m in (rt.target, rt.draft):
                    if m is not None:
                        m.reset()
                out["page_cache_dropped"] &= drop_page_cache()
                use = PromptCache(rt.target, rt.draft, ram_bytes=0, disk=disk).prepare(tokens)
                assert use.source == "disk" and use.n_restored == len(prompt), use
                disk_s.append(use.seconds)
            out["restore_ram_s"], out["restore_disk_s"] = ram_s, disk_s
            prefill = statistics.median(out["prefill_s"])
            out["ram_share"] = statistics.median(ram_s) / prefill
            out["disk_share"] = statistics.median(disk_s) / prefill
            checks = {}
            for name, sampling in (("greedy", SamplingParams()), ("sampled", SamplingParams(temperature=0.8, seed=7))):
                ram.prepare(tokens)
                restored = answer(rt, tokens, sampling)
                fresh_prefill(rt, tokens)
                fresh = answer(rt, tokens, sampling)
                checks[name] = first_gap(rt, tokens, restored, fresh)
            out["checks"] = checks
    finally:
        with contextlib.suppress(Exception):
            rt.close()
    print(json.dumps(out, indent=1))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
