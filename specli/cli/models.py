"""`specli models`: list, pull, path and info of the registry's models, and the pull's
progress (a live bar on a terminal, plain lines in a log)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from specli import registry
from specli.cli.guard import err_console, guarded
from specli.cli.options import JsonOpt
from specli.registry import local
from specli.registry.lookup import local_models
from specli.registry.store import human
from specli.registry.user import add_model, user_registry_path

models_app = typer.Typer(help="Named models: list, pull, add, inspect.", no_args_is_help=True)


class PlainProgress:
    """A pull's progress as plain lines, for a console that is not a terminal (a log
    file, CI, `tee`), where every redraw of a bar would be a line of its own: one line
    when a stage starts, one when it ends, with its size and seconds."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.clock = clock
        self.t0: float | None = None  # the first stage's start: the pull's
        self.started: dict[str, float] = {}
        self.ended: set[str] = set()

    def _print(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self.clock()
        self.t0 = now if self.t0 is None else self.t0
        complete = total > 0 and done >= total
        if stage not in self.started:
            self.started[stage] = now
            if complete:  # a stage that is over when first heard of (the pull's "done"): the pull's time
                self.ended.add(stage)
                self._print(f"{stage} ({human(total)}, {now - self.t0:.1f} s)")
                return
            self._print(f"{stage} started")
        if complete and stage not in self.ended:
            self.ended.add(stage)
            self._print(f"{stage} done ({human(total)}, {now - self.started[stage]:.1f} s)")


@contextlib.contextmanager
def pull_progress(console: Console | None = None) -> Iterator[Callable[[str, int, int], None]]:
    """The progress callback of one pull: rich bars on a terminal, else PlainProgress."""
    console = console or err_console()
    if not console.is_terminal:
        yield PlainProgress(console)
        return
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as bar:
        tasks: dict[str, Any] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total or None)
            bar.update(tasks[stage], completed=done, total=total or None)

        yield update


@models_app.command("list")
@guarded
def models_list(as_json: JsonOpt = False) -> None:
    """List the registry's models, those you added, and the GGUFs LM Studio, Ollama and
    the Hugging Face and llama.cpp caches keep (found read-only, run by name)."""
    rows = [registry.describe(s) for s in registry.load_registry().values()]
    rows += [{"name": m.name, "role": m.where, "size": m.size, "present": True, "path": str(m.path)}
             for m in local_models() if m.where != "registry"]
    problems = local.scan().problems
    for p in problems:  # on stderr, so that --json's output stays the list of models
        err_console().print(f"not runnable: {p.message} ({p.hint})", markup=False, soft_wrap=True, highlight=False)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    t = Table("name", "role / found in", "size", "present", "path")
    for r in rows:
        t.add_row(r["name"], r["role"], f"{r['size'] / 1e6:,.0f} MB", "yes" if r["present"] else "no", r["path"])
    Console().print(t)


@models_app.command("add")
@guarded
def models_add(
    name: Annotated[str, typer.Argument(help="The name to run it by.")],
    path: Annotated[Path, typer.Argument(help="The .gguf file (left where it is; nothing is copied).")],
) -> None:
    """Record a GGUF file under a name of yours (your registry in the user config dir),
    with its size and sha256, checked as a whole GGUF first."""
    with pull_progress() as update:
        model = add_model(name, path, set(registry.load_registry()), progress=update)
    err_console().print(f"{model.name}: {model.path} ({human(model.size)}, sha256 {model.sha256[:12]}...) "
                        f"in {user_registry_path()}", soft_wrap=True, highlight=False, markup=False)


@models_app.command("pull")
@guarded
def models_pull(
    names: Annotated[list[str], typer.Argument(help="Model names (see `specli models list`).")],
    force: Annotated[bool, typer.Option(help="Download again even if present.")] = False,
) -> None:
    """Download (or derive) models, verifying size and sha256."""
    from specli.backend import quantize_model

    for name in names:
        with pull_progress() as update:
            path = registry.pull(name, progress=update, quantize=quantize_model, force=force)
        err_console().print(f"{name}: {path}", soft_wrap=True, highlight=False)  # one line, even piped


@models_app.command("path")
@guarded
def models_path(name: str) -> None:
    """Print the local file of a pulled model."""
    print(registry.resolve(name))


@models_app.command("info")
@guarded
def models_info(name: str, as_json: JsonOpt = False) -> None:
    """Registry entry of a model and, if present, what the GGUF itself says, and which
    local models can draft for it (same vocabulary, or across tokenizers)."""
    reg = registry.load_registry()
    info: dict[str, Any] = {}
    path: Path
    if name in reg:
        info = registry.describe(reg[name])
        path = registry.model_path(reg[name])
    else:
        path = registry.resolve(name)
        info = {"name": name, "path": str(path), "size": path.stat().st_size, "present": True}
    if info.get("present"):
        from specli.backend import read_model_info
        from specli.runtime.draft_choice import local_drafts

        info["gguf"] = read_model_info(path)
        info["drafts"] = [{"name": d.name, "pairing": d.pairing, "size": d.size} for d in local_drafts(path)]
    if as_json:
        print(json.dumps(info, indent=2))
        return
    t = Table(show_header=False)
    for k, v in info.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                t.add_row(f"{k}.{k2}", str(v2))
        elif k == "drafts":
            t.add_row(k, "\n".join(f"{d['name']} ({d['pairing']}, {human(d['size'])})" for d in v) or "none local")
        else:
            t.add_row(k, str(v))
    Console().print(t)
