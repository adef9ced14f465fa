"""The `specli` commands: a thin Typer layer that wires the modules together."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from specli import profiles
from specli import serve as serve_defaults  # light: constants only
from specli.cli.bench import bench_app
from specli.cli.complete import complete
from specli.cli.files import read_text_file
from specli.cli.guard import err_console, guarded, print_notes
from specli.cli.heads import heads_app
from specli.cli.manage import cache_app, profiles_app
from specli.cli.models import models_app
from specli.cli.options import (
    GENERATION,
    HARDWARE,
    MODELS,
    JsonOpt,
    ProfileOpt,
    RecalibrateOpt,
    with_settings,
)
from specli.engine import metrics
from specli.errors import SpecliError, UsageError
from specli.profiles import Settings
from specli.rpc_endpoints import DEFAULT_PORT
from specli.types import FinishReason

app = typer.Typer(
    help="Fast, lossless speculative decoding for local GGUF models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(bench_app, name="bench",
              short_help="Measure drafting modes against plain decoding.")
app.add_typer(models_app, name="models")
app.add_typer(profiles_app, name="profiles")
app.add_typer(cache_app, name="cache")
app.add_typer(heads_app, name="heads", short_help="Train and manage the learned drafters (Medusa heads, EAGLE).")
app.command(short_help="Fill in the middle of a file at a cursor.")(complete)


@app.callback()
def _options(
    debug: Annotated[bool, typer.Option("--debug", help="Show llama.cpp's log and Python tracebacks.")] = False,
) -> None:
    if debug:
        os.environ["SPECLI_DEBUG"] = "1"


# ---------------------------------------------------------------------- generate


class StatsView(str, Enum):
    """The figures printed after an answer."""

    compact = "compact"
    full = "full"


StatsOpt = Annotated[StatsView, typer.Option(
    "--stats", help="The figures after each answer: compact (a few lines, acceptance by position on one) or "
                    "full (the whole table, one line per draft position).")]


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
@guarded
@with_settings(*GENERATION)
def generate(
    prompt: Annotated[str | None, typer.Argument(help="Prompt text, or - to read stdin.")] = None,
    profile: ProfileOpt = None,
    recalibrate: RecalibrateOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object when done.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the text.")] = False,
    color_draft: Annotated[bool, typer.Option(help="Colour tokens that came from the draft.")] = True,
    json_schema: Annotated[str | None, typer.Option(
        "--json-schema", help="Constrain the answer to JSON valid under this schema: a file, or the JSON itself.",
        show_default=False)] = None,
    grammar: Annotated[Path | None, typer.Option(
        "--grammar", help="Constrain the answer to this GBNF grammar file (llama.cpp's format).",
        show_default=False)] = None,
    predict: Annotated[Path | None, typer.Option(
        "--predict", help="A file the answer is expected to repeat much of (the file being edited): "
                          "drafted from, verified like any draft (OpenAI's predicted outputs).",
        show_default=False)] = None,
    stats: StatsOpt = StatsView.compact,
    *,
    overrides: dict[str, Any],
) -> None:
    """Generate one answer, speculatively."""
    s = profiles.resolve_settings(profile, overrides)
    if json_schema is not None and grammar is not None:
        raise UsageError("--json-schema and --grammar both given", "give one of them")
    text = read_prompt(prompt)
    constrained = None
    if json_schema is not None or grammar is not None:
        from specli.engine.grammar import grammar_from_arg  # checked before any model loads

        constrained = (grammar_from_arg("json_schema", json_schema) if json_schema is not None
                       else grammar_from_arg("gbnf", str(grammar)))
    predicted = read_text_file(predict, "--predict") if predict is not None else ""
    run_generate(s, text, as_json=as_json, quiet=quiet, color_draft=color_draft,
                 recalibrate=recalibrate, grammar=constrained, prediction=predicted,
                 full_stats=stats == StatsView.full)


def run_generate(s: Settings, prompt: str, as_json: bool, quiet: bool, color_draft: bool = True,
                 recalibrate: bool = False, grammar: Any = None, prediction: str = "",
                 full_stats: bool = False) -> None:
    """`grammar`: a specli.engine.grammar.Grammar the answer must follow, or None."""
    from specli.cli.dashboard import GenerationDashboard, Reply, stats_table, summary_line
    from specli.cli.voice import Notes, announcer, loading_line
    from specli.engine import generate as engine_generate
    from specli.engine.grammar import Constraint
    from specli.runtime import open_runtime

    if not quiet and sys.stderr.isatty():  # a terminal hears something at once
        announcer()(f"{loading_line(s)}…")
    rt = open_runtime(s, recalibrate=recalibrate)
    rt.announce = announcer()  # a first use measures only what this run needs, and says so at once
    notes = Notes(rt.notes)
    notes.show()
    out = sys.stdout
    reply = Reply()
    live = not as_json and not quiet and out.isatty()

    def echo(ev: Any) -> None:
        if not as_json and ev.text:
            out.write(ev.text)
            out.flush()

    constraint = None

    def end() -> None:
        if as_json:
            record = result_json(s, reply.text, reply.counters, reply.finish_reason)
            if constraint is not None:
                record["grammar"] = {"kind": grammar.kind, "complete": constraint.complete}
            print(json.dumps(record, indent=2))
        elif not live:
            out.write("\n")
            out.flush()

    try:
        prompt_tokens = rt.prompt_tokens(prompt)
        constraint = Constraint(grammar, rt.target.vocab) if grammar is not None else None
        predicted = rt.target.tokenize(prediction, add_special=False) if prediction else ()
        config, drafter = rt.generation_config(), rt.drafter(prediction=predicted)
        notes.show()  # what calibrating said, before the answer
        events = engine_generate(rt.target, prompt_tokens, config, drafter, constraint=constraint)
        dash = GenerationDashboard(Console(), color_draft=color_draft, full_stats=full_stats) if live else None
        reply.follow(events, dash, echo)
    except KeyboardInterrupt:
        reply.finish_reason = "interrupted"
        end()  # what was generated is not lost
        raise
    except SpecliError:  # e.g. an RPC server lost mid-generation: the text so far first
        reply.finish_reason = "error"
        end()
        raise
    finally:
        rt.close()
    end()
    notes.show()  # closing's too (a history that could not be written)
    if not as_json and not quiet:
        err_console().print(summary_line(reply.counters, reply.finish_reason), highlight=False)
        if full_stats and not live:
            err_console().print(stats_table(reply.counters))
    if constraint is not None and not constraint.complete and not as_json:
        err_console().print(f"the answer stopped before its {grammar.label} was complete "
                            f"(finish: {reply.finish_reason}): raise --max-tokens", highlight=False)


def result_json(s: Settings, text: str, c: metrics.Counters, finish_reason: FinishReason | None) -> dict[str, Any]:
    return {"text": text, "n_tokens": c.n_generated, "finish_reason": finish_reason,
            "settings": profiles.settings_to_dict(s), "metrics": metrics.summary(c)}


@app.command()
@guarded
@with_settings(*GENERATION)
def chat(
    profile: ProfileOpt = None,
    recalibrate: RecalibrateOpt = False,
    dashboard: Annotated[bool, typer.Option(help="Live dashboard per reply (terminal only).")] = True,
    color_draft: Annotated[bool, typer.Option(help="Colour tokens that came from the draft.")] = True,
    stats: StatsOpt = StatsView.compact,
    *,
    overrides: dict[str, Any],
) -> None:
    """Multi-turn chat; both KV caches are kept across turns."""
    from specli.cli.chat import ChatSession
    from specli.cli.voice import announcer, loading_line
    from specli.runtime import open_runtime

    s = profiles.resolve_settings(profile, overrides)
    console = Console()
    announcer(console, "dim")(f"{loading_line(s)}…")  # at once: a large pair takes seconds to load
    rt = open_runtime(s, recalibrate=recalibrate)
    rt.learn_across = True  # a turn's drafting starts from what the earlier turns showed
    print_notes(rt.notes)
    session = ChatSession(rt, console, profile=profile, overrides=dict(overrides),
                          live=dashboard and console.is_terminal, color_draft=color_draft,
                          full_stats=stats == StatsView.full)
    try:
        session.run(line_reader())
    finally:
        session.rt.close()  # the session's runtime: reloaded after a lost RPC server


@app.command(short_help="Measure this machine's costs and numerics again, and show them.")
@guarded
@with_settings(*MODELS, *HARDWARE, "ctx")  # the context axis is measured up to --ctx
def calibrate(
    profile: ProfileOpt = None,
    show: Annotated[bool, typer.Option("--show", help="Only show the cached table (measure if none).")] = False,
    check: Annotated[bool, typer.Option("--check", help="Compare the cached table with what the last run observed "
                                                         "and with a quick measurement now; stores nothing.")] = False,
    as_json: JsonOpt = False,
    *,
    overrides: dict[str, Any],
) -> None:
    """Measure this machine's costs (plain step, one-batch verify curve, draft token) and
    numerics (batch logit noise; with --exact the largest bit-exact chunk) again, and show them."""
    from dataclasses import asdict

    from specli.cli import calibrate as view
    from specli.runtime import CALIBRATION_CONTEXT, CALIBRATION_TEXT, open_runtime
    from specli.runtime.measure.calibration import load as load_calibration
    from specli.runtime.measure.calibration import quick_probe

    s = profiles.resolve_settings(profile, {**overrides, "drafter": "auto", "history": False})
    rt = open_runtime(s, recalibrate=not (show or check))
    try:
        key = rt.calibration_key()
        # --check reads the table as stored, provisional or not (opening it may measure it again)
        if not check:
            view.say_what_is_measured(rt, show)  # before minutes of measuring
            rt.costs(s)  # the batch curve along the context axis too
        cal = (load_calibration(key) if check else None) or rt.calibration()
        if check:
            t1_now, now = quick_probe(rt.target, rt.target.tokenize(CALIBRATION_TEXT)[:CALIBRATION_CONTEXT])
    finally:
        rt.close()
    print_notes(rt.notes)
    if check:
        if as_json:
            rows = view.check_rows(cal, t1_now, now)
            print(json.dumps({"key": key, "rows": [dict(zip(("what", "stored", "last_run", "now"), r)) for r in rows]},
                             indent=2))
        else:
            view.check(Console(), cal, key, t1_now, now)
        return
    if as_json:
        print(json.dumps({"key": key, **asdict(cal), "tie_bound": cal.tie_bound}, indent=2))
        return
    view.show(Console(), cal, key, s.verify == "exact")


@app.command("rpc-server", short_help="Serve this machine's CPU or GPUs to --rpc clients.")
@guarded
def rpc_server(
    host: Annotated[str, typer.Option(help="Address to listen on. Anything but 127.0.0.1/localhost exposes this "
                                           "machine to the network: the protocol has no authentication.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = DEFAULT_PORT,
    threads: Annotated[int | None, typer.Option(help="CPU threads for the layers served (default: all cores).",
                                                min=1)] = None,
    cache: Annotated[Path | None, typer.Option(help="Keep received weights in DIR, so that a client loading the "
                                                    "same model again sends only their hashes.")] = None,
) -> None:
    """Serve this machine's CPU or GPUs to `--rpc` clients (llama.cpp's RPC server, in-process).
    Client and server must run the same specli and llama-cpp-python version."""
    from specli.cli.rpc_server import run_server

    raise typer.Exit(run_server(host, port, threads, cache, lambda text: err_console().print(text, markup=False)))


@app.command(short_help="Serve the pair over HTTP, with a chat page at /.",
             help="Serve the pair over the OpenAI, Anthropic and llama-server HTTP APIs (POST "
                  "/v1/chat/completions, /v1/completions (suffix: fill in the middle), /v1/responses, /v1/messages, "
                  "/v1/messages/count_tokens, /infill, /tokenize, /detokenize, /apply-template; GET /v1/models, "
                  "/v1/responses/ID, /props, /slots, /health, /metrics), --parallel requests at once in one batch per step, "
                  "drafting from everything served before. Exit codes: 130 Ctrl-C, 143 SIGTERM (the running "
                  "generations end at their next step, the history is saved), others as for every command.")
@guarded
@with_settings(*GENERATION)
def serve(
    profile: ProfileOpt = None,
    host: Annotated[str, typer.Option(help="Address to listen on. Anything but 127.0.0.1/localhost exposes "
                                           "the model to the network: set an API key.")] = serve_defaults.DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = serve_defaults.DEFAULT_PORT,
    api_key: Annotated[str | None, typer.Option(envvar="SPECLI_API_KEY", show_default=False,
                                                help="Require this key (Authorization: Bearer KEY, or x-api-key) on every "
                                                     "route but /health and /v1/models.")] = None,
    parallel: Annotated[int | None, typer.Option(
        help="Requests generated at once (slots), their steps in one batch. Default: 4, as llama-server's "
             "(1 with --exact, whose batches must be the request's own).", min=1, max=64,
        show_default=False)] = None,
    queue: Annotated[int, typer.Option(help="Requests that may wait while every slot generates; more get 503 "
                                            "with Retry-After.", min=0)] = serve_defaults.DEFAULT_QUEUE,
    max_body: Annotated[float, typer.Option(help="Largest request body in MiB (413 above).",
                                            min=0.001)] = serve_defaults.DEFAULT_MAX_BODY_MIB,
    dashboard: Annotated[bool, typer.Option(help="Show the requests live in a table instead of log lines.")] = False,
    recalibrate: RecalibrateOpt = False,
    cache_ram: Annotated[int | None, typer.Option(
        help="MiB of RAM for saved conversations (the prompt cache); least recently used ones spill to disk. "
             "Default: 8192, or half the memory left once the models load, whichever is less.",
        min=0, show_default=False)] = None,
    cache_dir: Annotated[Path | None, typer.Option(
        help="Folder for the prompt cache's files, kept across restarts. Default: specli/prompt-cache in the "
             "user cache folder.", show_default=False)] = None,
    cache_disk: Annotated[int | None, typer.Option(
        help="MiB of disk for the prompt cache's files. Default: 8192, or a quarter of the free space, "
             "whichever is less.", min=0, show_default=False)] = None,
    prompt_cache_disk: Annotated[bool, typer.Option(
        "--prompt-cache-disk/--no-prompt-cache-disk", help="Keep saved conversations on disk too.")] = True,
    alias: Annotated[list[str] | None, typer.Option(
        help="Another name for the model, listed by GET /v1/models (repeatable). Requests may name any model "
             "unless --strict-model.", show_default=False)] = None,
    strict_model: Annotated[bool, typer.Option(
        help="Answer 404 to a request naming a model other than the served one or an --alias (by default "
             "any name is this model, as llama-server does: agents name models of their own).")] = False,
    park_idle: Annotated[bool, typer.Option(
        help="When a request starts that does not go on with an idle slot's conversation, move that "
             "conversation to the prompt cache (restored when its next turn comes): over the shared KV cache "
             "every step attends to all cells in use, so an idle 4k-token conversation slows another "
             "request's steps by a fifth.")] = True,
    heads_learn: Annotated[bool, typer.Option(
        help="Go on training the target's heads (specli heads train) on the answers served, while idle; "
             "new weights replace the live ones only when they agree better with the target on held-out "
             "answers, and are saved then.")] = False,
    heads_learn_rows: Annotated[int, typer.Option(
        help="New rows (tokens served) between rounds of --heads-learn.", min=16)] = 2048,
    allowed_hosts: Annotated[list[str] | None, typer.Option(
        help="Host names served besides localhost, 127.0.0.1, [::1] and --host (comma-separated or repeated; * for "
             "any); others get 403 (DNS rebinding). Bound to 0.0.0.0 without it: any Host.", show_default=False)] = None,
    cors_origins: Annotated[str | None, typer.Option(
        help="Origins of other web pages that may call it from a browser, as llama-server's: scheme://host:port,... "
             "localhost (this machine's pages, any port) or *. Default: the chat page's own.", show_default=False)] = None,
    cors_methods: Annotated[str, typer.Option(help="Methods allowed to --cors-origins.")] = "GET, POST, DELETE, OPTIONS",
    cors_headers: Annotated[str, typer.Option(help="Headers allowed to --cors-origins (*: those it asks for).")] = "*",
    cors_credentials: Annotated[bool, typer.Option(help="Credentials allowed to --cors-origins.")] = False,
    *,
    overrides: dict[str, Any],
) -> None:
    """Serve the pair over the OpenAI and Anthropic HTTP APIs."""
    from specli.runtime.kv.prompt_cache import CacheOptions
    from specli.serve.server import ServeOptions, run_serve

    s = profiles.resolve_settings(profile, overrides)
    cap = s.max_tokens if "max_tokens" in overrides or _profile_sets(profile, "max_tokens") else None
    cache = CacheOptions(cache_ram, cache_dir, cache_disk, prompt_cache_disk)
    exact = s.verify == "exact"
    if exact and parallel is not None and parallel > 1:
        raise UsageError("--exact serves one request at a time: its verify batches hold its own rows only",
                         "drop --parallel, or --exact")
    slots = parallel or (1 if exact else serve_defaults.DEFAULT_PARALLEL)
    opts = ServeOptions(host, port, api_key or None, queue, int(max_body * 2**20), dashboard, cap, recalibrate,
                        None if cache_ram == 0 and not prompt_cache_disk else cache, slots,
                        tuple(dict.fromkeys(alias or ())), strict_model, park_idle,
                        heads_learn_rows if heads_learn else 0, tuple(allowed_hosts or ()), cors_origins, cors_methods,
                        cors_headers, cors_credentials)
    raise typer.Exit(run_serve(s, opts, err_console()))


def _profile_sets(profile: str | None, key: str) -> bool:
    """Whether the profile in use (the default one when none is named) sets `key`."""
    try:
        return key in profiles.load_profile(profile or profiles.DEFAULT_PROFILE)
    except SpecliError:  # no default profile at all
        return False


def line_reader() -> Callable[[str], str]:
    """input() with line editing and history where readline exists."""
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401
    return input


