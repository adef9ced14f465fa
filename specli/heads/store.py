"""Trained heads on disk, in the user cache, keyed to the target file they were trained on.

    <heads dir>/<target file stem>-<fingerprint hash>/
        medusa.npz     the Medusa heads (heads.weights.MedusaHeads's arrays)
        eagle.npz      the EAGLE-style feature drafter (heads.eagle.EagleHead's)
        recipe.json    the target (name, file, fingerprint), the recipe, the data, the
                       held-out acceptance, when; written last, so a directory without it
                       holds a training still under way (or stopped: `train` resumes it)
        data/          the extracted rows (kept for resuming and for `eval`: heads.data)
        state.npz      Medusa's weights and optimiser after the last finished epoch
        eagle-state.npz  the feature drafter's likewise

This module is the whole contract: the names above, the recipe as written (`recipe`)
and read (`priors`, `held_out_acceptance`, HeadsEntry), the optimiser states (`save_state`,
`read_state`), and `record_round` for online learning's rounds.

A head reads the target's hidden states: it serves only the file whose states it learnt
(its fingerprint), never another model or another quantization of the same weights.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specli.errors import PairError, UsageError
from specli.heads.eagle import EagleHead
from specli.heads.kernel import Adam
from specli.heads.rows import Acceptance
from specli.heads.weights import MedusaHeads

HEADS_FILE = "medusa.npz"
EAGLE_FILE = "eagle.npz"
RECIPE_FILE = "recipe.json"
DATA_DIR = "data"
MEDUSA_STATE = "state.npz"
EAGLE_STATE = "eagle-state.npz"
KIND = "medusa-1"
# First-token acceptance on text of another kind than the training's: where auto's estimate
# starts. The held-out documents flatter (the same prompt templates): the default recipe's
# heads agreed 80 % there, 33-36 % on Spec-Bench and 24-26 % on SQL questions (docs/heads.md).
UNSEEN_PRIOR = 0.3


class HeadsMismatch(PairError):
    """Heads trained on one target asked to draft for another (exit code 5)."""


def heads_root() -> Path:
    """SPECLI_HEADS_DIR, else the user cache dir's specli/heads."""
    if override := os.environ.get("SPECLI_HEADS_DIR"):
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specli" / "heads"


def target_dir(file_name: str, fingerprint: str, root: Path | None = None) -> Path:
    """Where heads for the model file `file_name` with `fingerprint` live."""
    stem = Path(file_name).name.removesuffix(".gguf")
    return (root or heads_root()) / f"{stem}-{hashlib.sha256(fingerprint.encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class HeadsEntry:
    """One trained set of heads as `list` shows it."""

    path: Path
    recipe: dict[str, Any]

    @property
    def target(self) -> str:
        return str(self.recipe.get("target", {}).get("name", "?"))

    @property
    def fingerprint(self) -> str:
        return str(self.recipe.get("target", {}).get("fingerprint", ""))

    @property
    def rows(self) -> int:
        return int(self.recipe.get("data", {}).get("rows", 0))

    @property
    def n_bytes(self) -> int:
        return int(self.recipe.get("bytes", 0))


def recipe(target: dict[str, Any], how: dict[str, Any], data: dict[str, Any], heads: MedusaHeads,
           medusa: Acceptance, eagle: EagleHead, eagle_acc: Acceptance, seconds: dict[str, float],
           build: str) -> dict[str, Any]:
    """recipe.json for a finished training: the target (name, file, fingerprint, sizes),
    how it was trained, its data, each drafter's held-out acceptance, the seconds each
    phase took, the llama.cpp build and when."""
    return {"target": target, "kind": KIND, "recipe": how, "data": data, "held_out": medusa.to_json(),
            "eagle": {"held_out": eagle_acc.to_json(), "hidden": int(eagle.up.shape[1]), "bytes": eagle.n_bytes},
            "seconds": {k: round(v, 1) for k, v in seconds.items()}, "llama_build": build,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "bytes": heads.n_bytes}


def held_out_acceptance(recipe: dict[str, Any], drafter: str) -> dict[str, Any]:
    """A drafter's ("medusa" or "eagle") held-out acceptance as the recipe keeps it
    (`alone`, `chain`, `coverage`, `rows`); empty lists where it has none."""
    got = recipe.get("held_out") if drafter == "medusa" else recipe.get("eagle", {}).get("held_out")
    return got if isinstance(got, dict) else {"alone": [], "chain": []}


@dataclass(frozen=True)
class Prior:
    """What a controller may expect of a learned drafter before it has drafted: `start`,
    its first-token acceptance on text of another kind (where estimates begin), and
    `ceiling`, the conditional acceptance at each drafted position on the training's
    held-out documents (the best to hope for: text like the training's own)."""

    start: float
    ceiling: tuple[float, ...]


def priors(recipe: dict[str, Any], drafters: tuple[str, ...]) -> dict[str, Prior]:
    """Each drafter's Prior from the recipe (a ceiling of UNSEEN_PRIOR where it has none)."""
    out = {}
    for d in drafters:
        chain = [float(c) for c in held_out_acceptance(recipe, d).get("chain") or []] or [UNSEEN_PRIOR]
        ceiling = tuple(c / before if before > 0 else 0.0 for c, before in zip(chain, [1.0, *chain]))
        out[d] = Prior(min(UNSEEN_PRIOR, ceiling[0]), ceiling)
    return out


def record_round(folder: Path, heads: MedusaHeads, eagle: EagleHead | None, round_json: dict[str, Any]) -> None:
    """Save weights an online round adopted, the round added to the recipe's "online" rounds."""
    data = read_recipe(folder) or {}
    data.setdefault("online", {"rounds": []})["rounds"].append(round_json)
    save(folder, heads, data, eagle)


def save_state(path: Path, arrays: dict[str, np.ndarray], adam: Adam, epoch: int) -> None:
    """A training's weights and optimiser after `epoch` finished epochs, to resume from."""
    moments = {f"{m}_{name}": a for name, (mm, vv) in adam.moments.items() for m, a in (("m", mm), ("v", vv))}
    save_arrays(path, {**arrays, **moments, "t": np.array(adam.t), "epoch": np.array(epoch)})


def read_state(path: Path, params: tuple[str, ...]) -> tuple[dict[str, np.ndarray], Adam, int] | None:
    """(the weights, the optimiser over `params`, finished epochs) saved by `save_state`; None if none."""
    if not path.is_file():
        return None
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    adam = Adam({p: (arrays.pop("m_" + p), arrays.pop("v_" + p)) for p in params}, int(arrays.pop("t")))
    return arrays, adam, int(arrays.pop("epoch"))


def save(folder: Path, heads: MedusaHeads, recipe: dict[str, Any], eagle: EagleHead | None = None) -> None:
    """Write the heads, then their recipe (a file replaced whole: readers never see half)."""
    folder.mkdir(parents=True, exist_ok=True)
    save_arrays(folder / HEADS_FILE, heads.arrays())
    if eagle is not None:
        save_arrays(folder / EAGLE_FILE, eagle.arrays())
    tmp_json = folder / (RECIPE_FILE + ".tmp")
    tmp_json.write_text(json.dumps(recipe, indent=2, sort_keys=True))
    os.replace(tmp_json, folder / RECIPE_FILE)


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An .npz written whole, then moved into place."""
    tmp = path.with_name(path.name + ".tmp.npz")
    with tmp.open("wb") as f:
        np.savez(f, *[], **arrays)  # type: ignore[arg-type]  # numpy's stubs take **kwds as allow_pickle
    os.replace(tmp, path)


def read_recipe(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / RECIPE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def entries(root: Path | None = None) -> list[HeadsEntry]:
    """Every finished set of heads under the heads dir, by target name."""
    base = root or heads_root()
    found = []
    for folder in sorted(base.glob("*")) if base.is_dir() else []:
        recipe = read_recipe(folder)
        if recipe is not None and (folder / HEADS_FILE).is_file():
            found.append(HeadsEntry(folder, recipe))
    return sorted(found, key=lambda e: (e.target, e.path.name))


def load(folder: Path, fingerprint: str, target_name: str) -> MedusaHeads:
    """The heads in `folder`, for the target with `fingerprint` only."""
    recipe = read_recipe(folder)
    if recipe is None or not (folder / HEADS_FILE).is_file():
        raise UsageError(f"no trained heads in {folder}",
                         f"train them first: specli heads train --target {target_name}")
    theirs = recipe.get("target", {})
    if theirs.get("fingerprint") != fingerprint:
        raise HeadsMismatch(
            f"the heads in {folder.name} were trained on {theirs.get('file', '?')}, not on {target_name}",
            f"a head reads its own target's hidden states: train heads for this one (specli heads train "
            f"--target {target_name})")
    return read_heads(folder)


def read_heads(folder: Path) -> MedusaHeads:
    """The Medusa heads in `folder`, unchecked (`load` checks the target first; benchmarks
    that price one file's heads on another read them here)."""
    with np.load(folder / HEADS_FILE) as z:
        return MedusaHeads.from_arrays({k: z[k] for k in z.files})


def load_eagle(folder: Path, n_vocab: int) -> EagleHead | None:
    """The feature drafter trained beside the heads in `folder` (checked by `load`), if any."""
    if not (folder / EAGLE_FILE).is_file():
        return None
    with np.load(folder / EAGLE_FILE) as z:
        return EagleHead.from_arrays({k: z[k] for k in z.files}, n_vocab)


def remove(folder: Path) -> None:
    shutil.rmtree(folder)
