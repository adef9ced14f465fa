"""The `specli` command: a thin Typer layer that wires the modules together."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from specli import metrics, profiles, registry
from specli.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, SpecliError, Terminated, UsageError
from specli.profiles import Settings

app = typer.Typer(
    help="Fast, lossless speculative decoding for local GGUF models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
models_app = typer.Typer(help="Named models: list, pull, inspect.", no_args_is_help=True)
profiles_app = typer.Typer(help="Settings profiles (YAML).", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(profiles_app, name="profiles")

T = TypeVar("T")


def err_console() -> Console:
    return Console(stderr=True, highlight=False)


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def guarded(fn: Callable[[], T]) -> T:
    """Run a command body: SpecliError -> one line + its exit code; Ctrl-C -> 130,
    SIGTERM -> 143; a closed stdout -> quiet exit; anything else -> one line (or the
    traceback with --debug / SPECLI_DEBUG=1)."""
    with contextlib.suppress(ValueError):  # not in the main thread
        signal.signal(signal.SIGTERM, _on_sigterm)
    debug = bool(os.environ.get("SPECLI_DEBUG"))
    try:
        return fn()
    except SpecliError as e:
        if debug:
            raise
        err_console().print(f"[bold red]error:[/] {e.one_line()}", markup=True, soft_wrap=True)
        raise typer.Exit(e.exit_code) from None
    except Terminated:
        err_console().print("terminated")
        raise typer.Exit(EXIT_TERMINATED) from None
    except KeyboardInterrupt:
        err_console().print("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except BrokenPipeError:
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(0) from None
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except Exception as e:
        if debug:
            raise
        err_console().print(f"[bold red]internal error:[/] {type(e).__name__}: {e} (rerun with --debug for "
                            "the traceback and report it)", markup=True, soft_wrap=True)
        raise typer.Exit(1) from None


@app.callback()
def _options(
    debug: Annotated[bool, typer.Option("--debug", help="Show llama.cpp's log and Python tracebacks.")] = False,
) -> None:
    if debug:
        os.environ["SPECLI_DEBUG"] = "1"


def print_notes(notes: list[str]) -> None:
    for note in notes:
        err_console().print(f"[yellow]note:[/] {note}", markup=True, soft_wrap=True)


# ------------------------------------------------------------------------ models


@contextlib.contextmanager
def pull_progress() -> Iterator[Callable[[str, int, int], None]]:
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err_console(),
        transient=False,
    ) as bar:
        tasks: dict[str, Any] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total or None)
            bar.update(tasks[stage], completed=done, total=total or None)

        yield update


@models_app.command("list")
def models_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the registry's models and whether each is downloaded."""

    def body() -> None:
        rows = [registry.describe(s) for s in registry.load_registry().values()]
        if as_json:
            print(json.dumps(rows, indent=2))
            return
        t = Table("name", "role", "size", "present", "path")
        for r in rows:
            t.add_row(r["name"], r["role"], f"{r['size'] / 1e6:,.0f} MB", "yes" if r["present"] else "no", r["path"])
        Console().print(t)

    guarded(body)


@models_app.command("pull")
def models_pull(
    names: Annotated[list[str], typer.Argument(help="Model names (see `specli models list`).")],
    force: Annotated[bool, typer.Option(help="Download again even if present.")] = False,
) -> None:
    """Download (or derive) models, verifying size and sha256."""

    def body() -> None:
        from specli.backend import quantize_model

        for name in names:
            with pull_progress() as update:
                path = registry.pull(name, progress=update, quantize=quantize_model, force=force)
            err_console().print(f"{name}: {path}")

    guarded(body)


@models_app.command("path")
def models_path(name: str) -> None:
    """Print the local file of a pulled model."""
    guarded(lambda: print(registry.resolve(name)))


@models_app.command("info")
def models_info(
    name: str, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
) -> None:
    """Registry entry of a model and, if present, what the GGUF itself says."""

    def body() -> None:
        reg = registry.load_registry()
        info: dict[str, Any] = {}
        path: Path
        if name in reg:
            info = registry.describe(reg[name])
            path = registry.model_path(reg[name])
        else:
            path = registry.resolve(name)
            info = {"name": path.name, "path": str(path), "size": path.stat().st_size, "present": True}
        if info.get("present"):
            from specli.backend import read_model_info

            info["gguf"] = read_model_info(path)
        if as_json:
            print(json.dumps(info, indent=2))
        else:
            t = Table(show_header=False)
            for k, v in info.items():
                if isinstance(v, dict):
                    for k2, v2 in v.items():
                        t.add_row(f"{k}.{k2}", str(v2))
                else:
                    t.add_row(k, str(v))
            Console().print(t)

    guarded(body)


# ---------------------------------------------------------------------- profiles


@profiles_app.command("list")
def profiles_list() -> None:
    """Shipped and user profiles."""

    def body() -> None:
        t = Table("name", "origin", "description", "path")
        for p in profiles.list_profiles():
            t.add_row(p.name, p.origin, p.error or p.description, str(p.path))
        Console().print(t)

    guarded(body)


@profiles_app.command("show")
def profiles_show(name: str) -> None:
    """Every setting a profile resolves to (defaults filled in)."""
    guarded(lambda: print(json.dumps(profiles.settings_to_dict(profiles.resolve_settings(name)), indent=2)))


@profiles_app.command("validate")
def profiles_validate(file: Path) -> None:
    """Check a profile file; exit non-zero with the problem if it is invalid."""

    def body() -> None:
        profiles.validate_file(file)
        print(f"{file}: ok")

    guarded(body)


# ---------------------------------------------------------------------- generate

ProfileOpt = Annotated[str | None, typer.Option("--profile", "-p", help="Profile name or YAML path.")]
TargetOpt = Annotated[str | None, typer.Option(help="Target model: registry name or .gguf path.")]
DraftOpt = Annotated[str | None, typer.Option(help="Draft model: name, path, or 'none'.")]
DrafterOpt = Annotated[str | None, typer.Option(help="draft | ngram | hybrid | auto | none.")]
ExactOpt = Annotated[bool | None, typer.Option(
    "--exact", help="Verify in chunks bit-identical to one-token decoding (slower; default: one batch, "
                    "equal to the target's output except at floating-point near-ties).")]
RecalibrateOpt = Annotated[bool, typer.Option(
    "--recalibrate", help="Measure this machine's costs again instead of using the cached calibration.")]


def verify_mode(exact: bool | None) -> str | None:
    return None if exact is None else ("exact" if exact else "batch")


def settings_from(profile: str | None, overrides: dict[str, Any]) -> Settings:
    return profiles.resolve_settings(profile, {k: v for k, v in overrides.items() if v is not None})


def read_prompt(prompt: str | None) -> str:
    if prompt is None or prompt == "-":
        if sys.stdin.isatty() and prompt is None:
            raise UsageError("no prompt given", 'pass it as an argument, or pipe it in with "-"')
        data = sys.stdin.buffer.read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"stdin is not valid UTF-8 (byte {e.start})", "convert the input to UTF-8") from None
    return prompt


@app.command()
def generate(
    prompt: Annotated[str | None, typer.Argument(help="Prompt text, or - to read stdin.")] = None,
    profile: ProfileOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    drafter: DrafterOpt = None,
    draft_max: Annotated[int | None, typer.Option(help="Most tokens drafted per step (k).")] = None,
    p_min: Annotated[float | None, typer.Option(help="Stop drafting below this draft probability.")] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", "-t", help="0 = greedy.")] = None,
    top_k: Annotated[int | None, typer.Option(help="0 = off.")] = None,
    top_p: Annotated[float | None, typer.Option(help="1.0 = off.")] = None,
    min_p: Annotated[float | None, typer.Option(help="0.0 = off.")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed for sampling.")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", "-n", help="Most tokens to generate.")] = None,
    stop: Annotated[list[str] | None, typer.Option(help="Stop string (repeatable).")] = None,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    raw: Annotated[bool | None, typer.Option("--raw", help="No chat template; special tokens parsed.")] = None,
    n_gpu_layers: Annotated[int | None, typer.Option(help="Target layers on the GPU (-1 = all).")] = None,
    draft_n_gpu_layers: Annotated[int | None, typer.Option(help="Draft layers on the GPU (-1 = all).")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: all cores).")] = None,
    ctx: Annotated[int | None, typer.Option(help="Context size in tokens.")] = None,
    exact: ExactOpt = None,
    recalibrate: RecalibrateOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object when done.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the text.")] = False,
    color_draft: Annotated[bool, typer.Option(help="Colour tokens that came from the draft.")] = True,
) -> None:
    """Generate one answer, speculatively."""
    overrides = {
        "target": target, "draft": draft, "drafter": drafter, "draft_max": draft_max, "p_min": p_min,
        "temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p, "seed": seed,
        "max_tokens": max_tokens, "stop": stop or None, "system": system, "raw": raw,
        "n_gpu_layers": n_gpu_layers, "draft_n_gpu_layers": draft_n_gpu_layers, "threads": threads, "ctx": ctx,
        "verify": verify_mode(exact),
    }

    def body() -> None:
        s = settings_from(profile, overrides)
        text = read_prompt(prompt)
        run_generate(s, text, as_json=as_json, quiet=quiet, color_draft=color_draft, recalibrate=recalibrate)

    guarded(body)


def run_generate(s: Settings, prompt: str, as_json: bool, quiet: bool, color_draft: bool = True,
                 recalibrate: bool = False) -> None:
    from specli.dashboard import Dashboard, summary_line
    from specli.engine import generate as engine_generate
    from specli.runtime import open_runtime

    rt = open_runtime(s, recalibrate=recalibrate)
    print_notes(rt.notes)
    out = sys.stdout
    parts: list[str] = []
    last = None
    live = not as_json and not quiet and out.isatty()
    try:
        tokens = rt.prompt_tokens(prompt)
        events = engine_generate(rt.target, tokens, rt.generation_config(), rt.drafter())
        if live:
            with Dashboard(Console(), color_draft=color_draft) as dash:
                for ev in events:
                    last = ev
                    parts.append(ev.text)
                    dash.update(ev)
        else:
            for ev in events:
                last = ev
                parts.append(ev.text)
                if not as_json and ev.text:
                    out.write(ev.text)
                    out.flush()
    except KeyboardInterrupt:
        if as_json:  # what was generated is not lost
            print(json.dumps(result_json(s, parts, last.counters if last else metrics.Counters(), "interrupted"),
                             indent=2))
        elif not live:
            out.write("\n")
            out.flush()
        raise
    finally:
        rt.close()
    assert last is not None
    c = last.counters
    if as_json:
        print(json.dumps(result_json(s, parts, c, last.finish_reason), indent=2))
        return
    if not live:
        out.write("\n")
        out.flush()
    if not quiet:
        err_console().print(summary_line(c, last.finish_reason), highlight=False)


def result_json(s: Settings, parts: list[str], c: metrics.Counters, finish_reason: str | None) -> dict[str, Any]:
    return {
        "text": "".join(parts),
        "n_tokens": c.n_generated,
        "finish_reason": finish_reason,
        "settings": profiles.settings_to_dict(s),
        "metrics": metrics.summary(c),
    }


@app.command()
def chat(
    profile: ProfileOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    drafter: DrafterOpt = None,
    draft_max: Annotated[int | None, typer.Option(help="Most tokens drafted per step (k).")] = None,
    p_min: Annotated[float | None, typer.Option(help="Stop drafting below this draft probability.")] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", "-t", help="0 = greedy.")] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed for sampling.")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", "-n", help="Most tokens per reply.")] = None,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    n_gpu_layers: Annotated[int | None, typer.Option(help="Target layers on the GPU (-1 = all).")] = None,
    draft_n_gpu_layers: Annotated[int | None, typer.Option(help="Draft layers on the GPU (-1 = all).")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: all cores).")] = None,
    ctx: Annotated[int | None, typer.Option(help="Context size in tokens.")] = None,
    exact: ExactOpt = None,
    recalibrate: RecalibrateOpt = False,
    dashboard: Annotated[bool, typer.Option(help="Live dashboard per reply (terminal only).")] = True,
    color_draft: Annotated[bool, typer.Option(help="Colour tokens that came from the draft.")] = True,
) -> None:
    """Multi-turn chat; both KV caches are kept across turns."""
    overrides = {
        "target": target, "draft": draft, "drafter": drafter, "draft_max": draft_max, "p_min": p_min,
        "temperature": temperature, "seed": seed, "max_tokens": max_tokens, "system": system,
        "n_gpu_layers": n_gpu_layers, "draft_n_gpu_layers": draft_n_gpu_layers, "threads": threads, "ctx": ctx,
        "verify": verify_mode(exact),
    }

    def body() -> None:
        from specli.chat import ChatSession
        from specli.runtime import open_runtime

        given = {k: v for k, v in overrides.items() if v is not None}
        s = profiles.resolve_settings(profile, given)
        rt = open_runtime(s, recalibrate=recalibrate)
        print_notes(rt.notes)
        try:
            console = Console()
            session = ChatSession(rt, console, profile=profile, overrides=dict(given),
                                  live=dashboard and console.is_terminal, color_draft=color_draft)
            session.run(line_reader())
        finally:
            rt.close()

    guarded(body)


from specli import bench as bench_module  # noqa: E402 - light: no model code at import


@app.command(help="Measure drafting modes against plain decoding on a prompt set, checking that "
                  "greedy outputs are identical (lossless). Exit codes: 0 ok, 9 an output differed "
                  "from the baseline, 130 Ctrl-C / 143 SIGTERM (results so far are still written), others as "
                  "for every command.\n\nDefinitions:\n\n" + bench_module.DEFINITIONS)
def bench(
    profile: ProfileOpt = None,
    prompts: Annotated[Path | None, typer.Option(help="Prompt file: Spec-Bench or HumanEval JSONL, or text "
                                                      "(one prompt a line).")] = None,
    suite: Annotated[str | None, typer.Option(help="Built-in prompts: code, edit, chat, summarize, rag, math "
                                                   "or all (default: all, unless --prompts).")] = None,
    modes: Annotated[str | None, typer.Option(help="Modes, DRAFTER[:key=value,...] comma-separated, "
                                                   "k = draft_max; the baseline is always run "
                                                   "(default: baseline,draft,ngram).")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", "-n", help="Tokens per generation.")] = None,
    repeat: Annotated[int, typer.Option(help="Runs of every prompt and mode.")] = 1,
    temperature: Annotated[float | None, typer.Option("--temperature", "-t",
                                                      help="0 = greedy (lossless check on).")] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Write every record and aggregate as JSON "
                                                               "(- = stdout).")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write one CSV row per generation.")] = None,
    markdown_out: Annotated[Path | None, typer.Option("--markdown", help="Write the summary table.")] = None,
    sweep: Annotated[str | None, typer.Option(help="Grid of the profile's drafter, e.g. "
                                                   "'draft-max=1..8,p-min=0,0.3,0.6'.")] = None,
    write_profile: Annotated[str | None, typer.Option(help="Save the fastest lossless mode as a user "
                                                           "profile NAME.")] = None,
    peer: Annotated[list[str] | None, typer.Option(
        help="Also run a peer on the same prompts (repeatable): llama.cpp:ngram-simple, llama.cpp:ngram-mod, "
             "llama.cpp:draft:k=N (llama.cpp's own programs, built by scripts/build-llama-cpp.sh; their "
             "speedups are against llama.cpp's plain decoding), or llama-cpp-python[:k=N,ngram_max=M] "
             "(its prompt-lookup decoding).")] = None,
    limit: Annotated[int | None, typer.Option(help="At most N prompts per category.")] = None,
    categories: Annotated[str | None, typer.Option(help="Only these categories (comma-separated).")] = None,
    turns: Annotated[str, typer.Option(help="first, or all: later turns as a chat reusing the KV cache.")] = "first",
    warmup: Annotated[bool, typer.Option(help="One unrecorded warm-up generation first.")] = True,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    ctx: Annotated[int | None, typer.Option(help="Context size in tokens.")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: all cores).")] = None,
    n_gpu_layers: Annotated[int | None, typer.Option(help="Target layers on the GPU (-1 = all).")] = None,
    draft_n_gpu_layers: Annotated[int | None, typer.Option(help="Draft layers on the GPU (-1 = all).")] = None,
    exact: ExactOpt = None,
    recalibrate: RecalibrateOpt = False,
) -> None:
    opts = bench_module.BenchOptions(
        profile=profile, prompts=prompts, suite=suite, modes=modes, max_tokens=max_tokens, repeat=repeat,
        temperature=temperature, json_out=json_out, csv_out=csv_out, markdown_out=markdown_out, sweep=sweep,
        write_profile=write_profile, peer=peer, limit=limit, categories=categories, turns=turns, warmup=warmup,
        overrides={"target": target, "draft": draft, "ctx": ctx, "threads": threads, "n_gpu_layers": n_gpu_layers,
                   "draft_n_gpu_layers": draft_n_gpu_layers, "verify": verify_mode(exact)},
        recalibrate=recalibrate,
    )
    code = guarded(lambda: bench_module.command(opts))
    if code:
        raise typer.Exit(code)


@app.command()
def calibrate(
    profile: ProfileOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: all cores).")] = None,
    n_gpu_layers: Annotated[int | None, typer.Option(help="Target layers on the GPU (-1 = all).")] = None,
    draft_n_gpu_layers: Annotated[int | None, typer.Option(help="Draft layers on the GPU (-1 = all).")] = None,
    exact: ExactOpt = None,
    show: Annotated[bool, typer.Option("--show", help="Only show the cached table (measure if none).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Measure this machine's costs (plain step, one-batch verify curve, draft token) and
    numerics (batch logit noise; with --exact the largest bit-exact chunk) again, and show them."""
    overrides = {"target": target, "draft": draft, "threads": threads, "n_gpu_layers": n_gpu_layers,
                 "draft_n_gpu_layers": draft_n_gpu_layers, "drafter": "auto", "verify": verify_mode(exact)}

    def body() -> None:
        from dataclasses import asdict

        from specli.runtime import open_runtime

        s = settings_from(profile, overrides)
        rt = open_runtime(s, recalibrate=not show)
        try:
            cal = rt.calibration()
            key = rt.calibration_key()
        finally:
            rt.close()
        if as_json:
            print(json.dumps({"key": key, **asdict(cal), "tie_bound": cal.tie_bound}, indent=2))
            return
        t = Table("batch of n tokens", "cost in plain steps", "ceiling n / cost", title=f"calibration: {key}")
        for n, r in zip(cal.sizes, cal.ratios):
            t.add_row(str(n), f"{r:.2f}", f"{n / r:.2f}x")
        console = Console()
        console.print(t)
        chunk = f"largest bit-exact chunk = {cal.exact_batch}; " if s.verify == "exact" else ""
        console.print(f"plain step t1 = {cal.t1 * 1000:.1f} ms; draft token = {cal.draft_ratio:.2f} steps; {chunk}"
                      f"batch logit noise <= {cal.max_logit_diff:.3g} (near-tie bound {cal.tie_bound:.3g}); "
                      f"measured {cal.measured}", highlight=False)

    guarded(body)


def line_reader() -> Callable[[str], str]:
    """input() with line editing and history where readline exists."""
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401
    return input


def main() -> None:
    app()


if __name__ == "__main__":
    main()
