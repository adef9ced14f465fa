"""Scale check for the suffix history store: build a store of N tokens (default 10 M) from
random data with repeats, then time building, saving, loading and lookups.

    python -m benchmarks.history_scale [--tokens 10000000] [--lookups 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.processes import rss_mib
from specli.history import HistoryStore, SuffixIndex

VOCAB = 151_936  # Qwen-sized vocabulary


def documents(n_tokens: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Documents of 100..2000 Zipf-distributed tokens; about a third of each is spans
    copied from earlier documents (what repeated prompts and outputs look like)."""
    stream = (rng.zipf(1.2, n_tokens) - 1) % VOCAB
    spans = rng.integers(8, 200, n_tokens // 300)
    starts = rng.integers(0, n_tokens, len(spans))
    for start, span in zip(starts.tolist(), spans.tolist()):
        if 2 * span < start <= n_tokens - span:
            src = int(rng.integers(0, start - span))
            stream[start : start + span] = stream[src : src + span]
    cuts = np.cumsum(rng.integers(100, 2000, n_tokens // 100))
    cuts = cuts[cuts < n_tokens]
    return [d.astype(np.int32) for d in np.split(stream, cuts)]


def queries(docs: list[np.ndarray], n: int, rng: np.random.Generator) -> dict[str, list[list[int]]]:
    """Histories of three kinds: ending inside a stored document (long matches), random
    Zipf tokens (short matches with many occurrences), uniform random tokens (misses)."""
    stored = []
    for _ in range(n):
        doc = docs[int(rng.integers(0, len(docs)))]
        end = int(rng.integers(min(len(doc), 32), len(doc) + 1))
        stored.append(rng.integers(0, VOCAB, 16).tolist() + doc[max(0, end - 48) : end].tolist())
    return {
        "stored": stored,
        "frequent": [((rng.zipf(1.2, 64) - 1) % VOCAB).tolist() for _ in range(n)],
        "unseen": [rng.integers(0, VOCAB, 64).tolist() for _ in range(n)],
    }


def time_lookups(index: SuffixIndex, qs: dict[str, list[list[int]]], draft: int) -> None:
    for kind, histories in qs.items():
        times, found, occurrences = [], [], []
        for q in histories:
            t = time.perf_counter()
            cont = index.lookup(q, draft)
            times.append(time.perf_counter() - t)
            if cont is not None:
                found.append(cont.match_len)
                occurrences.append(cont.n_occurrences)
        ms = np.array(times) * 1e3
        print(f"  {kind:8} median {np.median(ms):.3f} ms, p99 {np.percentile(ms, 99):.3f} ms, "
              f"max {ms.max():.3f} ms; {len(found)} found, mean match {np.mean(found) if found else 0:.1f}, "
              f"median occurrences {np.median(occurrences) if occurrences else 0:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history_scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=10_000_000)
    parser.add_argument("--lookups", type=int, default=1000)
    parser.add_argument("--draft", type=int, default=16, help="max_tokens per lookup")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    docs = documents(args.tokens, rng)
    print(f"data: {sum(map(len, docs)):,} tokens in {len(docs):,} documents; peak RSS {rss_mib(peak=True):.0f} MiB")

    t = time.perf_counter()
    index = SuffixIndex(docs)
    print(f"build: {time.perf_counter() - t:.2f} s; index arrays {index.nbytes / 2**20:.0f} MiB; "
          f"peak RSS {rss_mib(peak=True):.0f} MiB")

    qs = queries(docs, args.lookups, rng)
    print(f"lookup ({args.lookups} of each kind, max_tokens={args.draft}):")
    time_lookups(index, qs, args.draft)

    t = time.perf_counter()
    for _ in range(200):
        index.add(rng.integers(0, VOCAB, 500).tolist())
    print(f"add: 200 documents of 500 tokens in {time.perf_counter() - t:.2f} s "
          f"({len(index._segments)} segments); lookup after:")
    time_lookups(index, qs, args.draft)

    with tempfile.TemporaryDirectory() as tmp:
        store = HistoryStore.open("scale", Path(tmp), max_tokens=args.tokens)
        for d in docs:
            store.pending.append(d)
        t = time.perf_counter()
        store.save()
        print(f"save: {time.perf_counter() - t:.2f} s, {store.stats()['file_bytes'] / 2**20:.0f} MiB on disk")
        t = time.perf_counter()
        loaded = HistoryStore.open("scale", Path(tmp), max_tokens=args.tokens)
        print(f"open (read, check, build): {time.perf_counter() - t:.2f} s, "
              f"{loaded.index.n_tokens:,} tokens; notes {loaded.notes}")
    print(f"peak RSS {rss_mib(peak=True):.0f} MiB")


if __name__ == "__main__":
    main()
