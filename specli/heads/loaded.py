"""The target's learned drafters, loaded for a runtime: its trained Medusa heads (or
those a setting names, refused when trained on another file), the EAGLE-style feature
drafter beside them, what a controller may expect of each and the cost of their arithmetic measured
here; `drafter` makes the drafters (specli.drafters.heads) that read them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specli.drafters import EagleDrafter, LearnedDrafter, MedusaDrafter
from specli.errors import UsageError
from specli.gguf import fingerprint
from specli.heads import store as heads_store
from specli.heads.blas import limit_blas_threads
from specli.heads.eagle import EagleHead
from specli.heads.weights import MedusaHeads
from specli.types import SamplingParams

LEARNED_DRAFTERS = ("medusa", "eagle")


def heads_folder(target_path: Path, named: str | None) -> Path:
    """The target's own heads folder, or the one `named` (a path, or a name under the heads dir)."""
    folder = Path(named).expanduser() if named else heads_store.target_dir(target_path.name, fingerprint(target_path))
    return folder if not named or folder.is_dir() else heads_store.heads_root() / named


def has_heads(target_path: Path) -> bool:
    """Whether heads were trained on this target file."""
    return heads_store.read_recipe(heads_folder(target_path, None)) is not None


@dataclass
class LoadedHeads:
    """A target's learned drafters' weights, what a controller may expect of each
    (heads.store.Prior), and seconds each takes per drafted token here."""

    medusa: MedusaHeads
    eagle: EagleHead | None
    priors: dict[str, heads_store.Prior]
    seconds: dict[str, float]

    def drafter(self, name: str, target: Any, sampling: SamplingParams) -> LearnedDrafter:
        if name == "medusa":
            p = self.priors["medusa"]
            return MedusaDrafter(self.medusa, target, target.n_vocab, sampling, prior=p.start, ceiling=p.ceiling)
        if self.eagle is None:
            raise UsageError("these heads were trained without the EAGLE feature drafter",
                             "train them again: specli heads train")
        p = self.priors["eagle"]
        return EagleDrafter(self.eagle, target, target.n_vocab, sampling, prior=p.start, ceiling=p.ceiling,
                            n_heads=self.medusa.n_heads)

    def drafters(self, target: Any, sampling: SamplingParams) -> list[LearnedDrafter]:
        return [self.drafter(n, target, sampling) for n in LEARNED_DRAFTERS if n in self.priors]


def load_heads(target_path: Path, target_name: str, named: str | None, n_vocab: int = 0) -> LoadedHeads:
    """The heads trained on this target file, or those in folder `named` (refused, exit
    code 5, when they were trained on another file), timed on this machine."""
    folder = heads_folder(target_path, named)
    medusa = heads_store.load(folder, fingerprint(target_path), target_name)
    eagle = heads_store.load_eagle(folder, n_vocab) if n_vocab else None
    drafters = LEARNED_DRAFTERS if eagle is not None else ("medusa",)
    priors = heads_store.priors(heads_store.read_recipe(folder) or {}, drafters)
    limit_blas_threads(1)  # before timing: drafting runs beside llama.cpp's threads (heads.blas)
    h = np.zeros(medusa.n_embd, np.float32)
    seconds = {"medusa": median_seconds(lambda: medusa.draft(h, medusa.n_heads)) / medusa.n_heads}
    if eagle is not None:
        seconds["eagle"] = median_seconds(lambda: eagle.draft(h, int(eagle.vocab[0]), medusa.n_heads)) / medusa.n_heads
    return LoadedHeads(medusa, eagle, priors, seconds)


def median_seconds(fn: Any, repeats: int = 5) -> float:
    """The median of `repeats` timed calls of fn."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
