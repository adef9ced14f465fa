"""`specli heads`: train, list, evaluate and remove the learned drafters (Medusa heads
and the EAGLE-style feature drafter, specli.heads)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from specli import profiles, registry
from specli.cli.guard import guarded
from specli.cli.options import JsonOpt
from specli.errors import UsageError

heads_app = typer.Typer(help="Learned drafters: Medusa heads and an EAGLE-style feature drafter, trained on a "
                             "target's own hidden states.", no_args_is_help=True)
TargetOpt = Annotated[str | None, typer.Option("--target", help="Target model (default: the default pair's).")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", help="CPU threads (default: llama.cpp's choice).")]


def _target(name: str | None) -> tuple[str, Path]:
    name = name or profiles.resolve_settings().target
    return name, registry.resolve(name)


@heads_app.command("train")
@guarded
def heads_train(
    target: TargetOpt = None,
    data: Annotated[list[Path] | None, typer.Option("--data", help="Text files to learn from too (after the "
                                                                    "history store's outputs).")] = None,
    rows: Annotated[int, typer.Option("--rows", min=1, help="Rows (token positions) to extract; every tenth "
                                      "document is held out, so at least 9 x --max-new + 1 (3,457) without "
                                      "history or --data (checked before any work).")] = 40_000,
    epochs: Annotated[int, typer.Option("--epochs", min=1, max=100, help="Epochs of the Medusa heads.")] = 4,
    eagle_epochs: Annotated[int, typer.Option("--eagle-epochs", min=1, max=100,
                                              help="Epochs of the EAGLE feature drafter.")] = 8,
    n_heads: Annotated[int, typer.Option("--heads", min=1, max=8, help="Heads (tokens a chain drafts).")] = 3,
    vocab: Annotated[int, typer.Option("--vocab", min=64, help="Reduced draft vocabulary size.")] = 8192,
    max_new: Annotated[int, typer.Option("--max-new", min=16, help="Tokens of each self-written answer.")] = 384,
    threads: ThreadsOpt = None,
) -> None:
    """Train both learned drafters for a target on its own rows; Ctrl-C stops, the same
    command resumes. A recipe that would hold no document out is refused at once (exit 2)."""
    from specli.heads import training as heads_training

    for f in data or []:
        if not f.is_file():
            raise UsageError(f"--data {f}: no such file", "name text files to learn from")
    name, path = _target(target)
    recipe = heads_training.Recipe(n_heads, vocab, rows, epochs, eagle_epochs=eagle_epochs, max_new=max_new)
    console = Console(stderr=True)
    model = heads_training.open_target(path, threads, recipe)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                      TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console) as bar:
            task = bar.add_task("rows", total=rows, note="")
            trained = heads_training.train(model, name, recipe, data or [], _reporter(bar, task))
    finally:
        model.close()
    console.print(f"heads for {name} saved in {trained.folder}")
    _print_acceptance(trained.recipe)


def _reporter(bar: Progress, task: Any) -> Any:
    def report(p: Any) -> None:
        if p.phase == "data":
            kinds = ", ".join(f"{k} {v:,}" for k, v in p.kinds.items())
            bar.update(task, description="rows", completed=p.done, total=p.total, note=kinds)
        elif p.phase == "lm_head":
            bar.update(task, description="lm_head", note="solving the lm_head on the reduced vocabulary")
        elif p.phase == "train":
            held = f" held-out alpha_1 {p.held_out.alone[0]:.1%}" if p.held_out and p.held_out.rows else ""
            bar.update(task, description=f"epoch {p.epoch}", completed=p.done, total=p.total,
                       note=f"loss {p.loss:.3f}{held}")
        elif p.phase == "eagle":
            bar.update(task, description=f"EAGLE epoch {p.epoch}", completed=p.done, total=p.total,
                       note=f"loss {p.loss:.3f}")
        elif p.phase == "eval":
            bar.update(task, note=f"epoch {p.epoch}: measuring held-out acceptance")
    return report


def _print_acceptance(recipe: dict[str, Any]) -> None:
    from specli.heads import store

    held, eagle = store.held_out_acceptance(recipe, "medusa"), store.held_out_acceptance(recipe, "eagle")
    t = Table("drafted token k", "Medusa head k alone", "Medusa chain", "Medusa tau", "EAGLE alone", "EAGLE chain",
              "EAGLE tau", title="held-out agreement with the target")
    for i, (a, c) in enumerate(zip(held["alone"], held["chain"])):
        e = [f"{eagle['alone'][i]:.1%}", f"{eagle['chain'][i]:.1%}", f"{1 + sum(eagle['chain'][: i + 1]):.2f}"] \
            if i < len(eagle["chain"]) else ["-"] * 3
        t.add_row(str(i + 1), f"{a:.1%}", f"{c:.1%}", f"{1 + sum(held['chain'][: i + 1]):.2f}", *e)
    Console().print(t)
    Console().print(f"reduced vocabulary covers {held['coverage']:.1%} of the held-out tokens "
                    f"({held['rows']:,} rows)")


@heads_app.command("list")
@guarded
def heads_list(as_json: JsonOpt = False) -> None:
    """Trained learned drafters: target, rows, held-out acceptance, size, folder."""
    from specli.heads import store

    found = store.entries()
    if as_json:
        print(json.dumps([{"path": str(e.path), **e.recipe} for e in found], indent=2))
        return
    t = Table("target", "kind", "rows", "alpha_1", "tau at 3", "MB", "folder")
    for e in found:
        chain = store.held_out_acceptance(e.recipe, "medusa")["chain"] or [0.0]
        t.add_row(e.target, str(e.recipe.get("kind")), f"{e.rows:,}", f"{chain[0]:.1%}", f"{1 + sum(chain[:3]):.2f}",
                  f"{e.n_bytes / 2**20:.0f}", e.path.name)
    Console().print(t if found else "no heads trained (specli heads train)")


@heads_app.command("rm")
@guarded
def heads_rm(folder: Annotated[str, typer.Argument(help="A folder `specli heads list` shows, or all.")]) -> None:
    """Delete trained learned drafters (their extracted rows too)."""
    from specli.heads import store

    root = store.heads_root()
    targets = [e.path for e in store.entries()] if folder == "all" else [root / folder]
    for path in targets:
        if path.parent != root or not path.is_dir():
            raise UsageError(f"no heads folder {folder!r} under {root}", "name one `specli heads list` shows")
        store.remove(path)
    print(f"removed {len(targets)} set(s) of heads")


@heads_app.command("eval")
@guarded
def heads_eval(target: TargetOpt = None, threads: ThreadsOpt = None, as_json: JsonOpt = False) -> None:
    """Held-out acceptance per drafted token, tau, the draft cost in plain steps and the
    break-even, with the batch costs of this machine's calibration (measured first if none)."""
    name, _ = _target(target)
    t0 = time.perf_counter()
    report = _evaluate(name, threads)
    if as_json:
        print(json.dumps(report, indent=2))
        return
    t = Table("drafter", "drafted k", "tau (held out)", "draft cost (steps)", "verify cost (steps)", "tau needed",
              "speed")
    for row in report["by_k"]:
        t.add_row(row["drafter"], str(row["k"]), f"{row['tau']:.2f}", f"{row['draft_steps']:.3f}",
                  f"{row['verify_steps']:.2f}", f"{row['tau_needed']:.2f}", f"{row['speed']:.2f}x")
    Console().print(t)
    Console().print(f"per head alone {', '.join(f'{a:.1%}' for a in report['alone'])}; coverage "
                    f"{report['coverage']:.1%}; plain step {report['step_ms']:.1f} ms ({time.perf_counter() - t0:.0f} s)")


def _evaluate(name: str, threads: int | None) -> dict[str, Any]:
    """`heads eval`'s report, the batch costs read from the calibration the runtime keeps
    for this target alone (what auto prices verify batches with)."""
    from specli.cli.voice import announcer
    from specli.drafters.auto.costs import interpolate
    from specli.heads import evaluate as he
    from specli.runtime import open_runtime

    s = profiles.resolve_settings(None, {"target": name, "threads": threads, "draft": "none", "history": False})
    rt = open_runtime(s)
    rt.announce = announcer()  # a first use measures only what it needs, and says so
    try:
        cal = rt.calibration()
        return he.evaluate_target(rt.target.path, name, rt.target.n_vocab, cal.t1,
                                  lambda n: interpolate(cal.sizes, cal.ratios, n))
    finally:
        rt.close()
