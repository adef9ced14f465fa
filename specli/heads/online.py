"""Online training of a target's heads on the answers a server writes (`serve --heads-learn`),
the way Online Speculative Decoding adapts a drafter to its users' queries.

Rows cost no forward pass: with features on, every step's decode already gives the
hidden state of each row it verified, and the token the target then chose is the row's
label (its argmax when greedy, its sample otherwise: a sample's cross-entropy is the
target distribution's in expectation). `watch` reads them as a job's events pass, the
rows of one job kept together (a document), every tenth document held out as a training
run holds them out (heads.rows.held_out).

A round runs once enough new rows are in and the server is idle: copies of the live
weights train on every row kept, at the lowest CPU priority, pausing while any request
runs; each family's copy replaces the live weights (in place: drafters keep their
references, and a draft made of half old, half new weights is verified like any other)
only when its tau on the held-out rows beats the live weights', and is saved then.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from specli.drafters.heads import Features
from specli.engine.text import StepEvent
from specli.heads import eagle_train, medusa_train, store
from specli.heads.eagle import EagleHead
from specli.heads.loaded import LoadedHeads
from specli.heads.rows import HELD_OUT_EVERY, Rows, held_out
from specli.heads.weights import MedusaHeads, vocab_index

MAX_ROWS = 32_768  # training rows kept (the newest); held-out rows keep a tenth of that
MIN_HELD = 32  # held-out rows a round needs before it can compare weights
EPOCHS = 2  # per round, over every training row kept
LR = 3e-4  # fine-tuning trained weights: a third of training's rate
BATCH = 256
IDLE_S = 1.0  # a round starts once no request has run for this long
CHECK_S = 0.25


@dataclass(frozen=True)
class Verdict:
    """One family's comparison in a round: tau on the held-out rows, live and trained."""

    drafter: str
    live: float
    trained: float

    @property
    def adopted(self) -> bool:
        return self.trained > self.live


@dataclass(frozen=True)
class Round:
    """What one round of online training did."""

    number: int
    train_rows: int
    held_rows: int
    verdicts: tuple[Verdict, ...]
    seconds: float
    saved: str = ""  # a note when saving failed

    def line(self) -> str:
        parts = [f"{v.drafter} tau {v.live:.2f} -> {v.trained:.2f} {'adopted' if v.adopted else 'kept the live weights'}"
                 for v in self.verdicts]
        return (f"heads: round {self.number} on {self.train_rows:,} served rows ({self.held_rows:,} held out): "
                f"{'; '.join(parts)} ({self.seconds:.0f} s){self.saved}")


class _Docs:
    """Documents of rows, the newest kept up to a number of rows."""

    def __init__(self, cap: int) -> None:
        self.cap, self.docs, self.n = cap, list[Rows](), 0

    def add(self, rows: Rows) -> None:
        self.docs.append(rows)
        self.n += len(rows)
        while self.n > self.cap and len(self.docs) > 1:
            self.n -= len(self.docs.pop(0))

    def rows(self) -> Rows:
        """Every document's rows, one after another, each its own document id."""
        return Rows.join(self.docs)


class OnlineHeads:
    """Rows from served answers, and rounds of training on them while the server is idle."""

    def __init__(self, heads: LoadedHeads, folder: Path, n_vocab: int, every: int,
                 on_round: Callable[[Round], None] = lambda r: None, lr: float = LR,
                 on_error: Callable[[str], None] = lambda text: None) -> None:
        """`every`: new rows between rounds; `folder`: where adopted weights are saved;
        `on_error` hears why learning stopped, if it fails (serving goes on)."""
        self.heads, self.folder, self.n_vocab, self.every = heads, folder, n_vocab, every
        self.on_round, self.lr, self.on_error = on_round, lr, on_error
        self._train, self._held = _Docs(MAX_ROWS), _Docs(MAX_ROWS // HELD_OUT_EVERY)
        self._lock = threading.Lock()
        self.n_docs = self.rows_seen = self.new_rows = 0
        self.rounds: list[Round] = []
        self.stopped = threading.Event()

    # -- rows, as a job's events pass ----------------------------------------------------
    def watch(self, target: Features, prompt: Sequence[int],
              events: Generator[StepEvent, None, None]) -> Generator[StepEvent, None, None]:
        """`events` unchanged; on the way, each emitted token's row (the hidden state of the
        position before it, where the last decode computed one) is kept, added as one
        document when the job ends."""
        hidden: list[np.ndarray] = []
        tops: list[int] = []
        tokens: list[int] = []
        pos, before = len(prompt), int(prompt[-1]) if len(prompt) else -1
        try:
            for ev in events:
                for t in ev.tokens:
                    h = target.hidden_at(pos - 1)
                    if h is None:  # a gap (a prefill's row): what came before is a document of its own
                        self._add(hidden, tops, tokens)
                        hidden, tops, tokens = [], [], []
                    else:
                        hidden.append(h.astype(np.float16))
                        tops.append(int(t))
                        tokens.append(before)
                    pos, before = pos + 1, int(t)
                yield ev
        finally:
            events.close()  # the engine's generator ends with this one
            self._add(hidden, tops, tokens)

    def _add(self, hidden: list[np.ndarray], tops: list[int], tokens: list[int]) -> None:
        if len(tops) < 2:
            return
        rows = Rows.document(np.asarray(tokens, np.int32), np.stack(hidden), np.asarray(tops, np.int32))
        with self._lock:
            (self._held if held_out(self.n_docs) else self._train).add(rows)
            self.n_docs += 1
            self.rows_seen += len(rows)
            self.new_rows += len(rows)

    def kept(self) -> Rows:
        """Every row kept, held-out documents and training ones (for measuring)."""
        return Rows.join(self._held.docs + self._train.docs)

    def due(self) -> bool:
        """Whether enough new rows came in for a round (and there are held-out rows to judge it)."""
        return self.new_rows >= self.every and self._held.n >= MIN_HELD

    # -- rounds ------------------------------------------------------------------------
    def run(self, busy: Callable[[], bool]) -> None:
        """The learning thread's loop until `stopped`: a round whenever one is due and no
        request has run for IDLE_S."""
        lowest_priority()
        quiet_since = time.monotonic()
        while not self.stopped.wait(CHECK_S):
            if busy():
                quiet_since = time.monotonic()
            elif self.due() and time.monotonic() - quiet_since >= IDLE_S:
                try:
                    self.learn(lambda: self._wait_idle(busy))
                except Exception as e:  # noqa: BLE001 - learning stops, serving goes on, and the log says so
                    self.on_error(f"heads: --heads-learn stopped, the live weights stay: {type(e).__name__}: {e}")
                    return

    def _wait_idle(self, busy: Callable[[], bool]) -> bool:
        """Block while a request runs; False once stopped."""
        while busy() and not self.stopped.is_set():
            self.stopped.wait(0.05)
        return not self.stopped.is_set()

    def learn(self, go_on: Callable[[], bool] = lambda: True) -> Round | None:
        """One round: train copies, compare on the held-out rows, adopt and save the better.
        `go_on` is asked between batches (it may block); None when it says stop."""
        t0 = time.perf_counter()
        with self._lock:
            train, held = self._train.rows(), self._held.rows()
            self.new_rows = 0
        index = vocab_index(self.heads.medusa.vocab, self.n_vocab)
        rng = np.random.default_rng(len(self.rounds))
        medusa = replace(self.heads.medusa, **_copies(self.heads.medusa, medusa_train.PARAMS))
        trainer = medusa_train.Trainer(medusa, medusa_train.fresh_adam(medusa), self.lr, BATCH)
        if not _epochs(lambda: trainer.epoch(train, index, rng), go_on):
            return None
        k = medusa.n_heads
        verdicts = [Verdict("medusa", medusa_train.evaluate(self.heads.medusa, held).tau(k),
                            medusa_train.evaluate(medusa, held).tau(k))]
        live_eagle = self.heads.eagle
        eagle = replace(live_eagle, **_copies(live_eagle, eagle_train.PARAMS)) if live_eagle is not None else None
        if live_eagle is not None and eagle is not None:
            e_trainer = eagle_train.EagleTrainer(eagle, eagle_train.fresh_adam(eagle), self.lr, BATCH,
                                                 len(self.rounds))
            if not _epochs(lambda: e_trainer.epoch(train, index, rng), go_on):
                return None
            verdicts.append(Verdict("eagle", eagle_train.evaluate_eagle(live_eagle, held, k).tau(k),
                                    eagle_train.evaluate_eagle(eagle, held, k).tau(k)))
        self._adopt(verdicts, medusa, eagle)
        done = Round(len(self.rounds) + 1, len(train), len(held), tuple(verdicts), time.perf_counter() - t0)
        if any(v.adopted for v in verdicts):
            done = replace(done, saved=self._save(done))
        self.rounds.append(done)
        self.on_round(done)
        return done

    def _adopt(self, verdicts: list[Verdict], medusa: MedusaHeads, eagle: EagleHead | None) -> None:
        live = self.heads
        for v in verdicts:
            if v.adopted and v.drafter == "medusa":
                _move(medusa, live.medusa, medusa_train.PARAMS)
            elif v.adopted and eagle is not None and live.eagle is not None:
                _move(eagle, live.eagle, eagle_train.PARAMS)

    def _save(self, done: Round) -> str:
        """Write the live weights with the round in recipe.json ("online"); a note if it failed."""
        try:
            store.record_round(self.folder, self.heads.medusa, self.heads.eagle, {
                "train_rows": done.train_rows, "held_rows": done.held_rows,
                "tau": {v.drafter: {"live": v.live, "trained": v.trained, "adopted": v.adopted}
                        for v in done.verdicts},
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            return ""
        except OSError as e:
            return f"; not saved ({e.strerror or e}): the adopted weights last until the server stops"


def _epochs(epoch: Callable[[], Iterator[float]], go_on: Callable[[], bool]) -> bool:
    for _ in range(EPOCHS):
        for _loss in epoch():
            if not go_on():
                return False
    return True


def _copies(weights: MedusaHeads | EagleHead, params: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Copies of what training moves (the lm_head and the vocabulary are frozen: shared)."""
    return {p: getattr(weights, p).copy() for p in params}


def _move(trained: MedusaHeads | EagleHead, live: MedusaHeads | EagleHead, params: tuple[str, ...]) -> None:
    """The live weights become the trained ones, array by array (drafters keep `live`)."""
    for p in params:
        setattr(live, p, getattr(trained, p))


def lowest_priority() -> None:
    """This thread (only: Linux's nice is per thread) yields the CPU to every other."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
