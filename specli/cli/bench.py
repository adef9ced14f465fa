"""`specli bench`: run the bench (the group's own options, as before), or `specli bench
summarize` the JSON files it wrote."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from specli import bench as bench_module
from specli.bench import DEFINITIONS
from specli.cli.guard import guarded
from specli.cli.options import GENERATION, ProfileOpt, RecalibrateOpt, with_settings

bench_app = typer.Typer()


@bench_app.callback(
    invoke_without_command=True,
    help="Measure drafting modes against plain decoding on a prompt set, checking that "
         "greedy outputs are identical (lossless). Exit codes: 0 ok, 9 an output differed "
         "from the baseline, 130 Ctrl-C / 143 SIGTERM (results so far are still written), others as "
         "for every command.\n\nDefinitions:\n\n" + DEFINITIONS)
@guarded
@with_settings(*GENERATION)
def bench(
    context: typer.Context,  # not `ctx`: that is the --ctx setting
    profile: ProfileOpt = None,
    prompts: Annotated[Path | None, typer.Option(help="Prompt file: Spec-Bench or HumanEval JSONL, or text "
                                                      "(one prompt a line).")] = None,
    suite: Annotated[str | None, typer.Option(help="Built-in prompts: code, edit, chat, summarize, rag, math "
                                                   "or all (default: all, unless --prompts); fim: "
                                                   "fill-in-the-middle holes over /infill against "
                                                   "each --peer's llama-server.")] = None,
    modes: Annotated[str | None, typer.Option(help="Modes, DRAFTER[:key=value,...] comma-separated, "
                                                   "k = draft_max; the baseline is always run "
                                                   "(default: baseline,draft,ngram).")] = None,
    repeat: Annotated[int, typer.Option(help="Runs of every prompt and mode.")] = 1,
    json_out: Annotated[str | None, typer.Option("--json", help="Write every record and aggregate as JSON "
                                                               "(- = stdout).")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write one CSV row per generation.")] = None,
    markdown_out: Annotated[Path | None, typer.Option("--markdown", help="Write the summary table.")] = None,
    sweep: Annotated[str | None, typer.Option(help="Grid of the profile's drafter, e.g. "
                                                   "'draft-max=1..8,draft-p-min=0,0.3,0.6'.")] = None,
    write_profile: Annotated[str | None, typer.Option(help="Save the fastest lossless mode as a user "
                                                           "profile NAME.")] = None,
    peer: Annotated[list[str] | None, typer.Option(
        help="Also run a peer on the same prompts (repeatable): llama.cpp:ngram-simple, llama.cpp:ngram-mod, "
             "llama.cpp:draft:k=N (llama.cpp's own programs, built by scripts/build-llama-cpp.sh; their "
             "speedups are against llama.cpp's plain decoding), or llama-cpp-python[:k=N,ngram_max=M] "
             "(its prompt-lookup decoding).")] = None,
    clients: Annotated[int | None, typer.Option(
        help="Replay the prompts' first turns over HTTP, N at once, against `specli serve --parallel N` and "
             "llama-server with N slots for each --peer llama.cpp:TYPE (llama.cpp:none for plain slots); "
             "modes are not run.", min=1, show_default=False)] = None,
    limit: Annotated[int | None, typer.Option(help="At most N prompts per category.")] = None,
    categories: Annotated[str | None, typer.Option(help="Only these categories (comma-separated).")] = None,
    turns: Annotated[str, typer.Option(help="first, or all: later turns as a chat reusing the KV cache (at temperature 0 every mode goes on from the baseline's answers).")] = "first",
    warmup: Annotated[bool, typer.Option(help="One unrecorded warm-up generation first.")] = True,
    warm_history: Annotated[str | None, typer.Option(help=bench_module.WARM_HISTORY_HELP)] = None,
    recalibrate: RecalibrateOpt = False,
    *,
    overrides: dict[str, Any],
) -> None:
    if context.invoked_subcommand is not None:  # `specli bench summarize ...`: no run
        return
    opts = bench_module.BenchOptions(
        profile=profile, prompts=prompts, suite=suite, modes=modes, max_tokens=overrides.pop("max_tokens", None),
        repeat=repeat, temperature=overrides.pop("temperature", None), json_out=json_out, csv_out=csv_out,
        markdown_out=markdown_out, sweep=sweep, write_profile=write_profile, peer=peer, limit=limit,
        categories=categories, turns=turns, warmup=warmup, warm_history=warm_history, overrides=overrides,
        recalibrate=recalibrate,
    )
    if suite == "fim":  # fill-in-the-middle: its own tasks and servers
        from rich.console import Console

        from specli.bench.fim import fim_command

        raise typer.Exit(fim_command(opts, Console(highlight=False)))
    if clients is not None:
        from rich.console import Console

        from specli.bench.clients import clients_command

        raise typer.Exit(clients_command(opts, clients, Console(highlight=False)))
    code = bench_module.command(opts)
    if code:
        raise typer.Exit(code)


class View(str, Enum):
    """The tables of `specli bench summarize` (specli.bench.summarize.VIEWS)."""

    category = "category"
    repeat = "repeat"
    file = "file"


@bench_app.command("summarize")
@guarded
def summarize(
    files: Annotated[list[Path], typer.Argument(help="JSON files written by `specli bench --json`.",
                                                show_default=False)],
    by: Annotated[View, typer.Option(
        help="category: decode speedup per file, category and mode, with the speedup modelled from the "
             "calibrated costs and how the history was warmed; repeat: per file, mode, category and "
             "repeat (cold, then warm); file: one row per file, the baseline against --mode.")] = View.category,
    mode: Annotated[str, typer.Option(help="The mode the file view sets against the baseline.")] = "auto",
) -> None:
    """Markdown tables of decode speedups from `specli bench --json` files."""
    from specli.bench.summarize import summarize as tables

    print(tables(files, by.value, mode), end="")
