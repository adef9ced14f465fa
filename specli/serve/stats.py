"""The server's counters since it started, as Prometheus text: requests, tokens and time,
and speculation under the names vLLM and llama-server use (`spec_decode_num_drafts_total`,
`..._num_draft_tokens_total`, `..._num_accepted_tokens_total`,
`..._num_accepted_tokens_per_pos_total{position}`), with the prefix `specli:`."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from specli.engine import metrics
from specli.heads.online import OnlineHeads
from specli.runtime.kv.prompt_cache import CacheStats
from specli.runtime.slots import SlotStats
from specli.serve.jobs import RequestRecord

PREFIX = "specli:"  # vLLM's names under specli's own prefix (vLLM uses `vllm:`), so both can share a Prometheus


@dataclass
class ServerMetrics:
    requests: Counter[tuple[str, int]] = field(default_factory=Counter)  # (endpoint, status) -> n
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generation_tokens: int = 0
    target_forwards: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    drafter_steps: Counter[str] = field(default_factory=Counter)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    queue_s: float = 0.0
    request_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, r: RequestRecord) -> None:
        c = r.counters
        with self._lock:
            self.requests[(r.endpoint, r.status)] += 1
            self.prompt_tokens += c.n_prompt
            self.cached_tokens += c.n_prompt_reused
            self.generation_tokens += c.n_generated
            self.target_forwards += c.n_target_forwards
            self.drafts += metrics.n_drafts(c)
            self.draft_tokens += c.n_drafted
            self.accepted_tokens += c.n_accepted
            grow = len(c.accepted_by_pos) - len(self.accepted_per_pos)
            self.accepted_per_pos.extend([0] * max(0, grow))
            for i, n in enumerate(c.accepted_by_pos):
                self.accepted_per_pos[i] += n
            self.drafter_steps.update(c.drafter_steps)
            self.prefill_s += c.t_prefill
            self.decode_s += max(0.0, c.t_total - c.t_prefill)
            self.queue_s += r.queue_s
            self.request_s += r.total_s

    def prometheus(self, running: int, waiting: int, cache: CacheStats | None = None,
                   slots: tuple[int, SlotStats | None] = (1, None), online: OnlineHeads | None = None) -> str:
        """Prometheus text exposition format 0.0.4."""
        lines: list[str] = []

        def metric(name: str, kind: str, doc: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {PREFIX}{name} {doc}")
            lines.append(f"# TYPE {PREFIX}{name} {kind}")
            lines.extend(f"{PREFIX}{name}{labels} {_num(v)}" for labels, v in samples)

        with self._lock:
            metric("requests_total", "counter", "Requests finished, by endpoint and HTTP status (499: client gone).",
                   [(f'{{endpoint="{e}",status="{s}"}}', n) for (e, s), n in sorted(self.requests.items())]
                   or [("", 0)])
            metric("requests_running", "gauge", "Requests generating now (one per busy slot).", [("", running)])
            metric("requests_waiting", "gauge", "Requests waiting in the queue.", [("", waiting)])
            metric("prompt_tokens_total", "counter", "Prompt tokens of finished requests.", [("", self.prompt_tokens)])
            metric("prompt_tokens_cached_total", "counter", "Of those, reused from the KV cache.",
                   [("", self.cached_tokens)])
            metric("generation_tokens_total", "counter", "Tokens generated.", [("", self.generation_tokens)])
            metric("target_forwards_total", "counter", "Target forward passes after the prefill.",
                   [("", self.target_forwards)])
            metric("spec_decode_num_drafts_total", "counter", "Target forwards that verified a draft.",
                   [("", self.drafts)])
            metric("spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.",
                   [("", self.draft_tokens)])
            metric("spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
                   [("", self.accepted_tokens)])
            metric("spec_decode_num_accepted_tokens_per_pos_total", "counter",
                   "Draft tokens accepted, by position in the draft (0 = first).",
                   [(f'{{position="{i}"}}', n) for i, n in enumerate(self.accepted_per_pos)] or [('{position="0"}', 0)])
            metric("drafter_steps_total", "counter", "Target forwards by who drafted (none = a plain step).",
                   [(f'{{drafter="{d}"}}', n) for d, n in sorted(self.drafter_steps.items())] or [("", 0)])
            metric("prefill_seconds_total", "counter", "Seconds spent in prompt prefill.", [("", self.prefill_s)])
            metric("decode_seconds_total", "counter", "Seconds spent generating after the prefill.",
                   [("", self.decode_s)])
            metric("queue_seconds_total", "counter", "Seconds requests waited in the queue.", [("", self.queue_s)])
            metric("request_seconds_total", "counter", "Seconds from arrival to the end of each request.",
                   [("", self.request_s)])
        n_slots, rounds = slots
        metric("slots", "gauge", "Slots, by state.", [('{state="busy"}', running), ('{state="idle"}', n_slots - running)])
        if rounds is not None:
            _slot_metrics(metric, rounds, n_slots)
        if cache is not None:
            _cache_metrics(metric, cache)
        if online is not None:
            _online_metrics(metric, online)
        return "\n".join(lines) + "\n"


def _slot_metrics(metric: Callable[[str, str, str, list[tuple[str, float]]], None], s: SlotStats, n: int) -> None:
    with s.lock:
        rows = [(f'{{slot="{i}"}}', float(s.rows.get(i, 0))) for i in range(n)]
        steps = [(f'{{slot="{i}"}}', float(s.steps.get(i, 0))) for i in range(n)]
        last = [(f'{{slot="{i}"}}', float(s.last.get(i, 0))) for i in range(n)]
        rounds = s.rounds
    metric("batches_total", "counter", "Target batches (one llama_decode for every busy slot).", [("", rounds)])
    metric("slot_rows_total", "counter", "Target batch rows each slot got (its token and its draft).", rows)
    metric("slot_batches_total", "counter", "Target batches each slot was in.", steps)
    metric("slot_rows_last", "gauge", "Rows each slot got in the last batch (0: not in it).", last)


def _cache_metrics(metric: Callable[[str, str, str, list[tuple[str, float]]], None], c: CacheStats) -> None:
    metric("prompt_cache_hits_total", "counter", "Requests that restored a saved conversation.", [("", c.hits)])
    metric("prompt_cache_misses_total", "counter", "Requests that found none better than the live cache.",
           [("", c.misses)])
    metric("prompt_cache_restored_tokens_total", "counter", "Prompt tokens restored from saved conversations.",
           [("", c.restored_tokens)])
    metric("prompt_cache_saves_total", "counter", "Conversations saved before a request replaced them.",
           [("", c.saves)])
    metric("prompt_cache_refused_total", "counter", "Saved states refused (corrupt, truncated, other models).",
           [("", c.refused)])
    metric("prompt_cache_entries", "gauge", "Saved conversations, by where they are held.",
           [('{where="ram"}', c.ram_entries), ('{where="disk"}', c.disk_entries)])
    metric("prompt_cache_bytes", "gauge", "Bytes of saved conversations, by where they are held.",
           [('{where="ram"}', c.ram_bytes), ('{where="disk"}', c.disk_bytes)])
    metric("prompt_cache_capacity_bytes", "gauge", "The caps: --cache-ram and --cache-disk.",
           [('{where="ram"}', c.ram_cap), ('{where="disk"}', c.disk_cap)])


def _online_metrics(metric: Callable[[str, str, str, list[tuple[str, float]]], None], o: OnlineHeads) -> None:
    rounds = list(o.rounds)
    metric("heads_learn_rows_total", "counter", "Rows of served answers kept for --heads-learn.", [("", o.rows_seen)])
    results: dict[tuple[str, str], int] = {}
    for r in rounds:
        for v in r.verdicts:
            key = (v.drafter, "adopted" if v.adopted else "kept")
            results[key] = results.get(key, 0) + 1
    metric("heads_learn_rounds_total", "counter", "Rounds of --heads-learn, by drafter and whether the trained "
           "weights replaced the live ones.", [(f'{{drafter="{d}",result="{r}"}}', n) for (d, r), n in
                                               sorted(results.items())] or [("", 0)])
    last = rounds[-1].verdicts if rounds else ()
    metric("heads_learn_tau", "gauge", "The last round's held-out tau, live and trained weights.",
           [(f'{{drafter="{v.drafter}",weights="{w}"}}', t) for v in last for w, t in
            (("live", v.live), ("trained", v.trained))] or [("", 0)])


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.6g}"
