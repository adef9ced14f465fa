"""The generation threads: one loads the pair (with a sequence per slot), warms it up,
then starts a thread per slot; each slot serves jobs in arrival order from one bounded
queue, its decodes put in one llama_decode with the other slots' (runtime.rounds). The
worker owns the runtime; the HTTP side only submits jobs, reads what they push, and
cancels them.

A job pushes `Delta`s (new text), then one `Outcome`, or an `ApiError`. Cancelling is a
flag checked between engine steps, so a dropped client costs at most one step; a job
still waiting is taken out of the queue at once."""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal

from specli.engine import generate, metrics
from specli.engine.adjust import Adjust
from specli.engine.grammar import Constraint, tokenizer_for
from specli.errors import SpecliError
from specli.heads.online import OnlineHeads, Round
from specli.profiles import NEEDS_DRAFT_MODEL, Settings
from specli.runtime import Runtime, open_runtime
from specli.runtime.kv.prompt_cache import CacheOptions, CacheUse, PromptCache, open_prompt_cache
from specli.runtime.slots import Slot, Slots, parkable
from specli.serve import errors
from specli.serve.errors import invalid
from specli.serve.fim import EDITOR_STOPS, EditorText
from specli.serve.jobs import Job, RequestRecord, SlotView
from specli.serve.outcome import Delta, Outcome, Pushed, finish_of, token_logprobs
from specli.serve.rendering import answer_grammar
from specli.serve.request import Request
from specli.serve.sources import SourceMarks
from specli.serve.tools import CallStream, ToolCall

State = Literal["loading", "ready", "failed", "stopping"]
WARMUP_PROMPT = "Say hello."  # any short prompt: the warm-up only has to run every stage once
SAVE_EVERY_S = 30.0  # the history store is written when idle, at most this often (and at exit)
# how long a park waits for requests still being read: a turn sent at once with its side
# call is queued 10-30 ms after it (its 4k-token prompt rendered and tokenized)
ARRIVING_WAIT_S = 0.1
PARKING = "parking"  # an idle slot's job while its conversation moves to the prompt cache


class Worker:
    """The generation thread and its queue. `on_record` hears every job that ends,
    `on_ready` once the pair is loaded and warm, `on_failed` if loading fails."""

    def __init__(self, settings: Settings, queue_max: int, *, recalibrate: bool = False, parallel: int = 1,
                 max_tokens_cap: int | None = None, cache: CacheOptions | None = CacheOptions(),
                 on_record: Callable[[RequestRecord], None] = lambda r: None,
                 on_progress: Callable[[Job, metrics.Counters], None] = lambda j, c: None,
                 on_ready: Callable[[Runtime], None] = lambda rt: None,
                 on_failed: Callable[[BaseException], None] = lambda e: None,
                 on_stage: Callable[[str], None] = lambda text: None, park_idle: bool = True,
                 heads_learn: int = 0, on_round: Callable[[Round], None] = lambda r: None) -> None:
        self.settings = settings
        self.queue_max = queue_max
        self.recalibrate = recalibrate
        self.max_tokens_cap = max_tokens_cap
        self.cache_options = cache
        self.cache: PromptCache | None = None  # opened with the runtime
        self.writing_cache = False  # past its last step, writing the prompt cache to disk
        self.on_record, self.on_progress = on_record, on_progress
        self.on_ready, self.on_failed, self.on_stage = on_ready, on_failed, on_stage
        self.park_idle = park_idle  # idle conversations leave the KV cache for a request that does not go on with them
        self.heads_learn, self.on_round = heads_learn, on_round  # rows of served answers a round of heads training
        self.online: OnlineHeads | None = None
        self.state: State = "loading"
        self.error: BaseException | None = None
        self.rt: Runtime | None = None
        self.parallel = max(1, parallel)
        self.slots: Slots | None = None  # once loaded
        self._waiting: collections.deque[Job] = collections.deque()
        self._arriving = 0  # requests being read, not yet submitted (Worker.arriving)
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._mean_s = 5.0  # mean job time, for Retry-After (updated as jobs end)
        self._saved_at = time.monotonic()
        self._draft_note = ""  # what auto drafts with (runtime.draft_choice), until an answer has carried it
        self._thread = threading.Thread(target=self._main, name="specli-generation", daemon=True)

    # -- the HTTP side ----------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """A request is being read and tokenized, to be submitted (or refused)."""
        with self._cond:
            self._arriving += 1
        try:
            yield
        finally:
            with self._cond:
                self._arriving -= 1
                self._cond.notify_all()

    def ready_runtime(self) -> Runtime:
        """The loaded runtime, or 503 while loading or stopping."""
        if self.state != "ready" or self.rt is None:
            raise errors.unavailable(self.state)
        return self.rt

    def new_job(self, request: Request, prompt: list[int], push: Callable[[Pushed], None]) -> Job:
        """A job for `request` with its prompt tokens: the request's options laid over the
        server's settings, checked against what this server has loaded (400 if not)."""
        rt = self.ready_runtime()
        o = request.options
        s = self.settings
        changes: dict[str, Any] = {k: v for k, v in (
            ("temperature", o.temperature), ("top_p", o.top_p), ("top_k", o.top_k), ("min_p", o.min_p),
            ("seed", o.seed), ("drafter", o.drafter), ("draft_max", o.draft_max),
            ("grammar_drafts", o.grammar_drafts)) if v is not None}
        if o.stop:
            changes["stop"] = o.stop
        if o.exact is not None:
            if o.exact and s.verify != "exact":
                raise invalid("specli.exact", "exact verification needs the server started with --exact "
                                              "(its KV cache type is chosen when the model loads)")
            changes["verify"] = "exact" if o.exact else "batch"
        s = replace(s, **changes)
        if s.drafter in NEEDS_DRAFT_MODEL and rt.draft is None:
            raise invalid("specli.drafter", f"drafter {s.drafter!r} needs a draft model, which this server has not "
                                            "loaded (start it with --draft NAME, or ask for ngram, suffix or auto)")
        n_ctx = rt.target.n_ctx
        if len(prompt) >= n_ctx:
            raise errors.prompt_too_long(len(prompt), n_ctx, request.fields.prompt)
        if any(t >= rt.target.n_vocab for t, _ in o.logit_bias):
            raise invalid("logit_bias", f"logit_bias names a token id past this model's {rt.target.n_vocab} tokens")
        if o.max_tokens is not None and o.max_tokens > n_ctx:
            limit = request.fields.max_tokens
            raise invalid(limit, f"{limit} is {o.max_tokens} but the context holds only {n_ctx} tokens")
        max_tokens = o.max_tokens or self.max_tokens_cap or n_ctx
        return Job(f"{next(self._ids)}", request, prompt, s, max_tokens, push, grammar=answer_grammar(rt, request))

    def submit(self, job: Job) -> None:
        """Queue `job`; 503 with Retry-After when `queue_max` jobs already wait."""
        with self._cond:
            if self.state != "ready":
                self.ready_runtime()
            if len(self._waiting) >= self.queue_max:
                wait = self._mean_s * (len(self._waiting) + 1) / self.parallel
                raise errors.busy(len(self._waiting), self.queue_max, retry_after=max(1, math.ceil(wait)))
            self._waiting.append(job)
            self._cond.notify_all()

    def cancel(self, job: Job) -> None:
        """The client is gone: a waiting job leaves the queue, a running one stops at its
        next step."""
        job.cancelled.set()
        with self._cond, contextlib.suppress(ValueError):
            self._waiting.remove(job)

    @property
    def n_waiting(self) -> int:
        return len(self._waiting)

    @property
    def slot_views(self) -> list[SlotView]:
        views = []
        for s in self.slots.slots if self.slots is not None else []:
            j = s.job if isinstance(s.job, Job) else None
            views.append(SlotView(s.index, s.rt.target.n_past) if j is None else SlotView(
                s.index, s.rt.target.n_past, j.id, len(j.prompt), j.request.endpoint or j.request.kind))
        return views

    @property
    def n_running(self) -> int:
        return sum(isinstance(s.job, Job) for s in self.slots.slots) if self.slots is not None else 0

    def stop(self) -> None:
        """Stop taking jobs: the running one ends at its next step, waiting ones get 503."""
        with self._cond:
            if self.state in ("ready", "loading"):
                self.state = "stopping"
            dropped = list(self._waiting)
            self._waiting.clear()
            self._cond.notify_all()
        for job in dropped:
            job.push(errors.shutting_down())

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end (the runtime closed, the history saved); True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the generation thread ------------------------------------------------------------
    def _main(self) -> None:
        try:
            self.rt = open_runtime(self.settings, recalibrate=self.recalibrate, n_seq=self.parallel, decode_thread=True)
            self._draft_note = self.rt.draft_note  # said once more, in the first answer's specli.notes
            self.rt.learn_across = True  # each request starts from what the earlier ones showed
            self.rt.defer_context_costs = True  # ready in seconds at any context: see Runtime
            if self.settings.drafter == "auto" and (self.recalibrate or not self.rt.calibration_stored()):
                self.on_stage("measuring this machine's costs for this pair (once per model, build and threads; "
                              "a minute or two on a small CPU)")
                self.rt.calibration()
            self.on_stage("warming up")
            self._warm_up(self.rt)
            if self.cache_options is not None:
                self.cache = open_prompt_cache(self.rt.target, self.rt.draft, self.cache_options)
            if self.heads_learn:  # before the slots: they share the heads it trains
                self.online = self.rt.online_heads(self.heads_learn, self.on_round, self.on_stage)
            self.slots = Slots(self.rt, self.parallel, self.cache)
            self.slots.rounds.backlog = lambda: len(self._waiting)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e
            self.state = "failed"
            self.on_failed(e)
            if self.rt is not None:
                with contextlib.suppress(Exception):
                    self.rt.close()
            return
        with self._cond:
            if self.state == "loading":
                self.state = "ready"
        if self.state == "ready":
            self.on_ready(self.rt)
        threads = [threading.Thread(target=self._slot_main, args=(slot,), name=f"specli-slot-{slot.index}",
                                    daemon=True) for slot in self.slots.slots]
        if self.online is not None:
            busy = lambda: bool(self.n_running or self._waiting or self._arriving)  # noqa: E731
            threading.Thread(target=self.online.run, args=(busy,), name="specli-heads-learn", daemon=True).start()
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            if self.online is not None:
                self.online.stopped.set()
            if self.cache is not None:
                self.writing_cache = True
                with contextlib.suppress(Exception):  # a full disk loses the cache, not the models' close
                    for slot in self.slots.slots:  # every slot's conversation, not only the first's
                        if slot.cache is not None:
                            slot.cache.save_live()
                    self.cache.close()
            self.rt.close()  # saves the history store and any corrected costs

    def _warm_up(self, rt: Runtime) -> None:
        """One short generation (and the calibration, where auto needs one), unrecorded; the
        grammar engine's view of the vocabulary built here, not on the first request with a
        response_format or tools (slow on a large vocabulary)."""
        tokenizer_for(rt.target.vocab)
        s = replace(self.settings, history=False, max_tokens=4, stop=())
        events = generate(rt.target, rt.prompt_tokens(WARMUP_PROMPT, s), rt.generation_config(s), rt.drafter(s))
        for _ in events:
            if self.state != "loading":
                break
        events.close()

    def _slot_main(self, slot: Slot) -> None:
        while (job := self._next(slot)) is not None:
            self._serve(slot, job)

    def _next(self, slot: Slot) -> Job | None:
        """The first waiting job, once this slot is the idle one best placed for it (the
        longest prompt prefix cached)."""
        assert self.slots is not None
        with self._cond:
            while self.state == "ready":
                if self._waiting and self.slots.best_for(self._waiting[0].prompt) is slot:
                    job = slot.job = self._waiting.popleft()
                    self._cond.notify_all()  # the next job may be another slot's
                    return job
                if not self._cond.wait(timeout=SAVE_EVERY_S / 2):
                    self._save_if_due()
            return None

    def _save_if_due(self) -> None:
        if self.n_running:  # the history store is written while no slot adds to it
            return
        if self.rt is not None and time.monotonic() - self._saved_at >= SAVE_EVERY_S:
            self.rt.save_history()
            self._saved_at = time.monotonic()

    def _serve(self, slot: Slot, job: Job) -> None:
        assert self.slots is not None
        job.t_start = time.perf_counter()
        counters = metrics.Counters(n_prompt=len(job.prompt))
        status, error, finish = 200, "", "cancelled"
        use: CacheUse | None = None
        notes: list[str] = []
        try:
            if not job.cancelled.is_set():  # its client left while it was being taken off the queue
                if self.park_idle and slot.cache is not None:
                    self._park_idle(slot, job.prompt)
                if slot.cache is not None:
                    with self.slots.cache_lock:
                        use = slot.cache.prepare(job.prompt)
                self.slots.share_prefix(slot, job.prompt)
                limit = len(job.prompt) + job.max_tokens if job.request.options.max_tokens is not None else None
                self.slots.begin(slot, limit)
                counters, finish, notes = self._generate(slot.rt, job, use)
        except SpecliError as e:
            err = errors.from_specli(e)
            status, error, finish = err.status, e.one_line(), "error"
            job.push(err)
        except Exception as e:  # noqa: BLE001 - one request fails, the server goes on
            err = errors.internal(e)
            status, error, finish = err.status, errors.describe(e), "error"
            job.push(err)
        finally:
            self.slots.end(slot)
            t_end = time.perf_counter()
            self._mean_s = 0.8 * self._mean_s + 0.2 * (t_end - job.t_start)
            if finish == "cancelled":
                status = errors.CLIENT_GONE.status
            self.on_record(RequestRecord(job.id, job.request.endpoint or job.request.kind, status, counters, finish,
                                         job.t_start - job.t_arrival, t_end - job.t_arrival, error, use,
                                         tuple(notes)))
            with self._cond:
                slot.job = None
                self._cond.notify_all()

    def _park_idle(self, slot: Slot, prompt: list[int]) -> None:
        """Idle slots' conversations this prompt does not go on with, nor any queued one,
        move to the prompt cache before it prefills (runtime.slots.PARK_MIN says why);
        meanwhile no job is given to them. Requests still being read are waited for a
        moment first: an agent sends its turn and a side call at once."""
        assert self.slots is not None
        with self._cond:
            idle = [(s.index, s.rt.target.tokens) for s in self.slots.slots if s is not slot and s.job is None]
            deadline = time.monotonic() + ARRIVING_WAIT_S
            while parkable(prompt, idle) and self._arriving and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            queued = [j.prompt for j in self._waiting]
            parked = [self.slots.slots[i] for i in parkable(prompt, idle, queued)]
            for s in parked:
                s.job = PARKING
        try:
            for s in parked:
                self.slots.park(s)
        finally:
            with self._cond:
                for s in parked:
                    s.job = None
                self._cond.notify_all()

    def _generate(self, rt: Runtime, job: Job, use: CacheUse | None) -> tuple[metrics.Counters, str, list[str]]:
        s = job.settings
        o = job.request.options
        adjust = Adjust(o.logit_bias, o.presence_penalty, o.frequency_penalty)
        config = replace(rt.generation_config(s), max_tokens=job.max_tokens, adjust=adjust, logprobs=o.logprobs)
        prediction = rt.target.tokenize(o.prediction, add_special=False) if o.prediction else ()
        drafter = rt.drafter(s, keep=o.history, prediction=prediction, bias=adjust)
        lps: list[dict[str, Any]] | None = [] if o.logprobs is not None else None
        pending: list[dict[str, Any]] = []  # logprobs of tokens whose text is held back
        counters = metrics.Counters(n_prompt=len(job.prompt))
        parts: list[str] = []
        tokens: list[int] = []
        finish: str | None = None
        stop_string: str | None = None
        structure = job.request.structure
        calls = CallStream(structure) if structure is not None and structure.calls_tools else None
        constraint = Constraint(job.grammar, rt.target.vocab) if job.grammar is not None else None
        # a whole answer's reader waits for the Outcome alone: no wake-up of the event loop a step
        # (its Python work on one of two cores competes with the decode: 34 against 37 ms a step)
        send: Callable[[Pushed], None] = job.push if job.request.stream else (lambda item: None)
        editor = EditorText(o.editor, time.perf_counter()) if o.editor.any else None
        events = generate(rt.target, job.prompt, config, drafter, constraint=constraint)
        if self.online is not None:
            events = self.online.watch(rt.target, job.prompt, events)
        marks = (SourceMarks(rt.target.stream_detokenizer().push, rt.target.vocab.piece, use, len(job.prompt))
                 if o.sources and job.request.stream and calls is None and editor is None else None)
        try:
            for ev in events:
                counters, finish, stop_string = ev.counters, ev.finish_reason, ev.stop_string
                tokens.extend(ev.tokens)
                if marks is not None:
                    marks.add(ev)
                if lps is not None and ev.logprobs:
                    pending += token_logprobs(ev.logprobs, rt.target.vocab.piece)
                piece = ev.text if editor is None else editor.push(ev.text)
                if editor is not None and editor.stopped:
                    finish = editor.stopped
                if piece:
                    parts.append(piece)
                    if calls is None:
                        send(Delta(piece, logprobs=pending if lps is not None else None,
                                   sources=marks.take(piece, counters) if marks is not None else None))
                        if lps is not None:
                            lps, pending = lps + pending, []
                    else:
                        n_before = len(calls.calls)
                        content, new = calls.push(piece)
                        if content or new:
                            send(Delta(content, tuple(enumerate(new, n_before)), pending if lps is not None else None))
                            if lps is not None:
                                lps, pending = lps + pending, []
                self.on_progress(job, counters)
                if finish is None and (job.cancelled.is_set() or self.state != "ready"):
                    finish = "cancelled" if job.cancelled.is_set() else "terminated"
                if finish in EDITOR_STOPS or finish in ("cancelled", "terminated"):
                    break
        finally:
            events.close()
        if editor is not None and (tail := editor.flush()):
            parts.append(tail)
            send(Delta(tail))
        if calls is not None:  # what was held back: content, or the fenced calls it is
            n_before = len(calls.calls)
            content, new = calls.finish()
            if content or new:
                send(Delta(content, tuple(enumerate(new, n_before))))
        finish = finish or "length"
        queue_s = (job.t_start or job.t_arrival) - job.t_arrival
        text, found = "".join(parts), list[ToolCall]()
        if calls is not None:
            text, found = calls.outcome(text)
        ended = finish_of(finish, bool(found), stop_string)
        notes = structure.notes + structure.problems(text, found) if structure is not None else []
        if self._draft_note:
            notes, self._draft_note = [self._draft_note, *notes], ""
        job.push(Outcome(text, ended, counters, finish, queue_s, tokens if o.return_tokens else None, found, use,
                         lps + pending if lps is not None else None, stop_string, notes))
        return counters, finish, notes
