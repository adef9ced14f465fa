"""`specli heads train`: rows from the target, the reduced vocabulary and its lm_head,
then epochs of Medusa training and of the feature drafter's, each step resumable, the
result in the heads store.

Phases, each saved before the next starts (a stopped training resumes at the phase and
document or epoch it stopped in): check that the recipe holds a document out (`check`,
before any work), extract rows (heads.data), choose the reduced vocabulary (the target's
most frequent tokens on the training rows), solve the lm_head on it, train Medusa's
heads, then the feature drafter, evaluate on the held-out documents, save (heads.store).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specli.backend import LoadOptions, Model, build_id
from specli.errors import UsageError
from specli.gguf import fingerprint
from specli.heads import data, eagle_train, medusa_train, store
from specli.heads.eagle import EagleHead
from specli.heads.rows import Acceptance, Rows
from specli.heads.weights import MedusaHeads, fit_lm_head, vocab_index

MIN_TRAIN_ROWS, MIN_HELD_ROWS = 64, 8


@dataclass(frozen=True)
class Recipe:
    """How heads are trained: the defaults finish within an hour for the 1.5B target on a
    2-core CPU (docs/heads.md)."""

    n_heads: int = 3
    vocab: int = 8192  # reduced draft vocabulary
    rows: int = 40_000  # rows extracted (a tenth held out)
    epochs: int = 4
    eagle_epochs: int = 8  # the feature drafter learns from its own guesses too: slower to settle
    lr: float = 1e-3
    batch: int = 256
    max_new: int = 384  # tokens of each answer the target writes itself
    seed: int = 0
    eagle_hidden: int = 0  # the feature drafter's MLP width (0: half the target's hidden size)


@dataclass
class Progress:
    """What a training is doing, for a progress display."""

    phase: str  # "data" | "lm_head" | "train" (Medusa) | "eagle" | "eval" | "done"
    done: int = 0
    total: int = 0
    epoch: int = 0
    loss: float | None = None
    held_out: Acceptance | None = None
    kinds: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Trained:
    folder: Path
    recipe: dict[str, Any]
    acceptance: Acceptance
    eagle: Acceptance


def open_target(path: Path, threads: int | None, recipe: Recipe) -> Model:
    return Model(path, LoadOptions(n_ctx=data.WINDOW + recipe.max_new + 64, n_threads=threads))


def check(model: Model, recipe: Recipe, data_files: Sequence[Path]) -> int:
    """The rows `recipe` needs (raised, exit code 2, when it asks fewer): enough that a
    document is held out. Extraction stops once it has the rows asked for, so it must still
    want some after the documents before the first held-out one, each as long as it can be."""
    need = max(data.rows_before_held_out(model, data_files, recipe.seed, recipe.max_new) + 1,
               MIN_TRAIN_ROWS + MIN_HELD_ROWS)
    if recipe.rows < need:
        raise UsageError(f"--rows {recipe.rows:,} holds no document out: every tenth document is held out to judge "
                         f"the drafters on, and this target's first documents take {need:,} rows",
                         f"use --rows {need:,} or more" + (", or a smaller --max-new" if not data_files else ""))
    return need


def train(model: Model, target_name: str, recipe: Recipe, data_files: Sequence[Path],
          report: Callable[[Progress], None], root: Path | None = None) -> Trained:
    """Train heads for `model` (a loaded target) and save them; resumes a stopped training."""
    check(model, recipe, data_files)
    folder = store.target_dir(model.path.name, fingerprint(model.path), root)
    rows_dir = data.DataDir(folder / store.DATA_DIR)
    t0 = time.perf_counter()

    def on_doc(rows: int, kind: str) -> None:
        report(Progress("data", min(rows, recipe.rows), recipe.rows, kinds=rows_dir.manifest["by_kind"]))

    on_doc(rows_dir.n_rows, "")
    data.extract(model, rows_dir, data.docs(model, data_files, recipe.seed), recipe.rows, recipe.max_new, on_doc)
    t_data = time.perf_counter() - t0
    train_rows, held, tokens = rows_dir.load()
    if len(train_rows) < MIN_TRAIN_ROWS or len(held) < MIN_HELD_ROWS:
        raise UsageError(f"only {len(train_rows):,} training rows and {len(held):,} held out in {rows_dir.n_docs} "
                         "documents", "raise --rows")
    report(Progress("lm_head"))
    vocab = np.argsort(-np.bincount(train_rows.top, minlength=model.n_vocab), kind="stable")[:recipe.vocab]
    vocab = vocab.astype(np.int32)
    heads = _start(folder, model, tokens, vocab, recipe)
    t1 = time.perf_counter()
    acceptance = _epochs(folder, heads, train_rows, held, model.n_vocab, recipe, report)
    t2 = time.perf_counter()
    eagle, eagle_acc = _eagle_epochs(folder, heads, train_rows, held, model.n_vocab, recipe, report)
    target = {"name": target_name, "file": model.path.name, "fingerprint": fingerprint(model.path),
              "n_embd": model.n_embd, "n_vocab": model.n_vocab}
    used = {"rows": rows_dir.n_rows, "train_rows": len(train_rows), "held_out_rows": len(held),
            "by_kind": rows_dir.manifest["by_kind"], "files": [str(p) for p in data_files]}
    seconds = {"data": t_data, "train": t2 - t1, "eagle": time.perf_counter() - t2}
    recipe_json = store.recipe(target, asdict(recipe), used, heads, acceptance, eagle, eagle_acc, seconds, build_id())
    store.save(folder, heads, recipe_json, eagle)
    report(Progress("done", held_out=acceptance))
    return Trained(folder, recipe_json, acceptance, eagle_acc)


def _start(folder: Path, model: Model, tokens: list[np.ndarray], vocab: np.ndarray, recipe: Recipe) -> MedusaHeads:
    """The heads at the last finished epoch of a stopped training with this vocabulary,
    else fresh ones over an lm_head solved from the target's rows."""
    state = store.read_state(folder / store.MEDUSA_STATE, medusa_train.PARAMS)
    if state is not None and np.array_equal(state[0]["vocab"], vocab) and state[0]["a"].shape[0] == recipe.n_heads:
        return MedusaHeads.from_arrays(state[0])
    h, z = data.fit_rows(model, tokens, vocab, 2 * model.n_embd + 256)
    return MedusaHeads.fresh(vocab, fit_lm_head(h, z), recipe.n_heads)


def _epochs(folder: Path, heads: MedusaHeads, rows: Rows, held: Rows, n_vocab: int, recipe: Recipe,
            report: Callable[[Progress], None]) -> Acceptance:
    """Train the epochs not done yet, saving the heads and the optimiser after each."""
    path = folder / store.MEDUSA_STATE
    adam, done = medusa_train.fresh_adam(heads), 0
    state = store.read_state(path, medusa_train.PARAMS)
    if state is not None and np.array_equal(state[0]["vocab"], heads.vocab) and state[0]["a"].shape == heads.a.shape:
        _, adam, done = state
    trainer = medusa_train.Trainer(heads, adam, recipe.lr, recipe.batch)
    index = vocab_index(heads.vocab, n_vocab)
    n_batches = -(-len(rows) // recipe.batch)
    acceptance = medusa_train.evaluate(heads, held)
    for epoch in range(done, recipe.epochs):
        rng = np.random.default_rng(recipe.seed + epoch)
        for b, loss in enumerate(trainer.epoch(rows, index, rng)):
            report(Progress("train", epoch * n_batches + b + 1, recipe.epochs * n_batches, epoch + 1, loss,
                            acceptance))
        report(Progress("eval", epoch=epoch + 1))
        acceptance = medusa_train.evaluate(heads, held)
        store.save_state(path, heads.arrays(), adam, epoch + 1)
    return acceptance


def _eagle_epochs(folder: Path, heads: MedusaHeads, rows: Rows, held: Rows, n_vocab: int, recipe: Recipe,
                  report: Callable[[Progress], None]) -> tuple[EagleHead, Acceptance]:
    """The feature drafter over the heads' vocabulary and lm_head, trained for the epochs
    not done yet (saved after each), and its held-out acceptance."""
    path = folder / store.EAGLE_STATE
    hidden = recipe.eagle_hidden or heads.n_embd // 2
    head = EagleHead.fresh(heads.vocab, heads.w, n_vocab, hidden, recipe.seed)
    adam, done = eagle_train.fresh_adam(head), 0
    state = store.read_state(path, eagle_train.PARAMS)
    if state is not None and np.array_equal(state[0]["vocab"], heads.vocab) and state[0]["up"].shape[1] == hidden:
        head, adam, done = EagleHead.from_arrays(state[0], n_vocab), state[1], state[2]
    trainer = eagle_train.EagleTrainer(head, adam, recipe.lr, recipe.batch, recipe.seed)
    index = vocab_index(heads.vocab, n_vocab)
    n_batches = -(-len(eagle_train.examples(rows)) // recipe.batch)
    for epoch in range(done, recipe.eagle_epochs):
        rng = np.random.default_rng(recipe.seed + 100 + epoch)
        for b, loss in enumerate(trainer.epoch(rows, index, rng)):
            report(Progress("eagle", epoch * n_batches + b + 1, recipe.eagle_epochs * n_batches, epoch + 1, loss))
        store.save_state(path, head.arrays(), adam, epoch + 1)
    report(Progress("eval"))
    return head, eagle_train.evaluate_eagle(head, held, heads.n_heads)
