"""`specli heads train`: rows from the target, the reduced vocabulary and its lm_head,
then epochs of Medusa training, each step resumable, the result in the heads store.

Phases, each saved before the next starts (a stopped training resumes at the phase and
document or epoch it stopped in): extract rows (runtime.heads_data), choose the reduced
vocabulary (the target's most frequent tokens on the training rows), solve the lm_head on
it, train, evaluate on the held-out documents, save (heads.store).
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specli.backend import LoadOptions, Model, build_id
from specli.errors import UsageError
from specli.gguf import fingerprint
from specli.heads import data as heads_data
from specli.heads import store
from specli.heads.eagle import EagleHead
from specli.heads.eagle_train import PARAMS as EAGLE_PARAMS
from specli.heads.eagle_train import EagleTrainer, evaluate_eagle, examples
from specli.heads.medusa_train import Acceptance, Adam, Rows, Trainer, evaluate
from specli.heads.weights import MedusaHeads, fit_lm_head, vocab_index

STATE_FILE = "state.npz"
EAGLE_STATE = "eagle-state.npz"


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
    return Model(path, LoadOptions(n_ctx=heads_data.WINDOW + recipe.max_new + 64, n_threads=threads))


def train(model: Model, target_name: str, recipe: Recipe, data_files: Sequence[Path],
          report: Callable[[Progress], None], root: Path | None = None) -> Trained:
    """Train heads for `model` (a loaded target) and save them; resumes a stopped training."""
    folder = store.target_dir(model.path.name, fingerprint(model.path), root)
    data = heads_data.DataDir(folder / "data")
    t0 = time.perf_counter()

    def on_doc(rows: int, kind: str) -> None:
        report(Progress("data", min(rows, recipe.rows), recipe.rows, kinds=data.manifest["by_kind"]))

    report(Progress("data", min(data.n_rows, recipe.rows), recipe.rows, kinds=data.manifest["by_kind"]))
    heads_data.extract(model, data, heads_data.docs(model, data_files, recipe.seed), recipe.rows, recipe.max_new,
                       on_doc)
    t_data = time.perf_counter() - t0
    train_rows, held, tokens = data.load()
    if len(train_rows) < 64 or len(held) < 8:
        raise UsageError(f"only {data.n_rows} rows to train on", "raise --rows")
    report(Progress("lm_head"))
    vocab = np.argsort(-np.bincount(train_rows.top, minlength=model.n_vocab), kind="stable")[:recipe.vocab]
    vocab = vocab.astype(np.int32)
    heads = _start(folder, model, tokens, vocab, recipe)
    t1 = time.perf_counter()
    acceptance = _epochs(folder, heads, train_rows, held, model.n_vocab, recipe, report)
    t2 = time.perf_counter()
    eagle, eagle_acc = _eagle_epochs(folder, heads, train_rows, held, model.n_vocab, recipe, report)
    recipe_json = {
        "target": {"name": target_name, "file": model.path.name, "fingerprint": fingerprint(model.path),
                   "n_embd": model.n_embd, "n_vocab": model.n_vocab},
        "kind": "medusa-1",
        "recipe": asdict(recipe),
        "data": {"rows": data.n_rows, "train_rows": len(train_rows), "held_out_rows": len(held),
                 "by_kind": data.manifest["by_kind"], "files": [str(p) for p in data_files]},
        "held_out": _held_out(acceptance),
        "eagle": {"held_out": _held_out(eagle_acc), "hidden": int(eagle.up.shape[1]), "bytes": eagle.n_bytes},
        "seconds": {"data": round(t_data, 1), "train": round(t2 - t1, 1), "eagle": round(time.perf_counter() - t2, 1)},
        "llama_build": build_id(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "bytes": heads.n_bytes,
    }
    store.save(folder, heads, recipe_json, eagle)
    report(Progress("done", held_out=acceptance))
    return Trained(folder, recipe_json, acceptance, eagle_acc)


def _held_out(a: Acceptance) -> dict[str, Any]:
    return {"alone": a.alone, "chain": a.chain, "coverage": a.coverage, "rows": a.rows}


def _start(folder: Path, model: Model, tokens: list[np.ndarray], vocab: np.ndarray, recipe: Recipe) -> MedusaHeads:
    """The heads at the last finished epoch of a stopped training with this vocabulary,
    else fresh ones over an lm_head solved from the target's rows."""
    state = folder / STATE_FILE
    if state.is_file():
        with np.load(state) as z:
            if np.array_equal(z["vocab"], vocab) and z["a"].shape[0] == recipe.n_heads:
                return MedusaHeads.from_arrays({k: z[k] for k in ("vocab", "w", "a", "b")})
    h, z = heads_data.fit_rows(model, tokens, vocab, 2 * model.n_embd + 256)
    return MedusaHeads.fresh(vocab, fit_lm_head(h, z), recipe.n_heads)


def _epochs(folder: Path, heads: MedusaHeads, rows: Rows, held: Rows, n_vocab: int, recipe: Recipe,
            report: Callable[[Progress], None]) -> Acceptance:
    """Train the epochs not done yet, saving the heads and the optimiser after each."""
    adam, done = Adam.like(heads), 0
    state = folder / STATE_FILE
    if state.is_file():
        with np.load(state) as z:
            if np.array_equal(z["vocab"], heads.vocab) and z["a"].shape == heads.a.shape:
                adam = Adam(z["m_a"], z["v_a"], z["m_b"], z["v_b"], int(z["t"]))
                done = int(z["epoch"])
    trainer = Trainer(heads, adam, recipe.lr, recipe.batch)
    index = vocab_index(heads.vocab, n_vocab)
    n_batches = -(-len(rows) // recipe.batch)
    acceptance = evaluate(heads, held)
    for epoch in range(done, recipe.epochs):
        rng = np.random.default_rng(recipe.seed + epoch)
        for b, loss in enumerate(trainer.epoch(rows, index, rng)):
            report(Progress("train", epoch * n_batches + b + 1, recipe.epochs * n_batches, epoch + 1, loss,
                            acceptance))
        report(Progress("eval", epoch=epoch + 1))
        acceptance = evaluate(heads, held)
        np.savez(folder / (STATE_FILE + ".tmp.npz"), vocab=heads.vocab, w=heads.w, a=heads.a, b=heads.b, m_a=adam.m_a, v_a=adam.v_a, m_b=adam.m_b,
                 v_b=adam.v_b, t=adam.t, epoch=epoch + 1)
        (folder / (STATE_FILE + ".tmp.npz")).replace(state)
    return acceptance


def _eagle_epochs(folder: Path, heads: MedusaHeads, rows: Rows, held: Rows, n_vocab: int, recipe: Recipe,
                  report: Callable[[Progress], None]) -> tuple[EagleHead, Acceptance]:
    """The feature drafter over the heads' vocabulary and lm_head, trained for the epochs
    not done yet (saved after each), and its held-out acceptance."""
    state = folder / EAGLE_STATE
    hidden = recipe.eagle_hidden or heads.n_embd // 2
    head, trainer, done = EagleHead.fresh(heads.vocab, heads.w, n_vocab, hidden, recipe.seed), None, 0
    if state.is_file():
        with np.load(state) as z:
            if np.array_equal(z["vocab"], heads.vocab) and z["up"].shape[1] == hidden:
                head = EagleHead.from_arrays({k: z[k] for k in z.files}, n_vocab)
                moments = {p: (z["m_" + p], z["v_" + p]) for p in EAGLE_PARAMS}
                trainer = EagleTrainer(head, recipe.lr, recipe.batch, recipe.seed, t=int(z["t"]), moments=moments)
                done = int(z["epoch"])
    trainer = trainer or EagleTrainer(head, recipe.lr, recipe.batch, recipe.seed)
    index = vocab_index(heads.vocab, n_vocab)
    n_batches = -(-len(examples(rows)) // recipe.batch)
    for epoch in range(done, recipe.eagle_epochs):
        rng = np.random.default_rng(recipe.seed + 100 + epoch)
        for b, loss in enumerate(trainer.epoch(rows, index, rng)):
            report(Progress("eagle", epoch * n_batches + b + 1, recipe.eagle_epochs * n_batches, epoch + 1, loss))
        extra = {f"{m}_{p}": a for p, (mm, vv) in trainer.moments.items() for m, a in (("m", mm), ("v", vv))}
        store.save_arrays(state, {**head.arrays(), **extra, "t": np.array(trainer.t), "epoch": np.array(epoch + 1)})
    report(Progress("eval"))
    return head, evaluate_eagle(head, held, heads.n_heads)


def recipe_text(recipe: dict[str, Any]) -> str:
    return json.dumps(recipe, indent=2, sort_keys=True)
