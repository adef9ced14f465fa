"""`specli complete`: fill in the middle of a file at a cursor, speculatively, as an editor
would ask `specli serve`'s /infill; prints the completion and the dashboard's figures."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from specli import profiles
from specli.cli.files import read_text_file
from specli.cli.guard import err_console, guarded, print_notes
from specli.cli.options import GENERATION, JsonOpt, ProfileOpt, RecalibrateOpt, with_settings
from specli.errors import UsageError
from specli.serve.fim import EDITOR_STOPS, EditorStops, EditorText, FimFields, first_code_line

_CURSOR = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+)$")


def split_at_cursor(text: str, line: int, col: int, where: str) -> tuple[str, str]:
    """(prefix, suffix) of `text` at 1-based LINE:COL (COL counts characters; one past
    the line's end is its end)."""
    lines = text.splitlines(keepends=True) or [""]
    if not 1 <= line <= len(lines) + 1:
        raise UsageError(f"{where}: line {line} is outside the file's {len(lines)} lines", "give FILE:LINE:COL")
    offset = sum(len(x) for x in lines[:line - 1])
    current = lines[line - 1].rstrip("\r\n") if line <= len(lines) else ""
    if not 1 <= col <= len(current) + 1:
        raise UsageError(f"{where}: column {col} is outside line {line} ({len(current)} characters)",
                         "give FILE:LINE:COL, COL from 1")
    at = offset + col - 1
    return text[:at], text[at:]


def fields_from(cursor: str | None, prefix: Path | None, suffix: Path | None, extra: list[Path]) -> FimFields:
    if cursor is not None:
        if prefix is not None or suffix is not None:
            raise UsageError("a cursor and --prefix/--suffix both given", "give FILE:LINE:COL or --prefix and --suffix")
        m = _CURSOR.match(cursor)
        if m is None:
            raise UsageError(f"{cursor!r} is not FILE:LINE:COL", "e.g. src/app.py:42:9")
        before, after = split_at_cursor(read_text_file(Path(m["path"]), "file"), int(m["line"]), int(m["col"]), cursor)
    elif prefix is not None:
        before, after = read_text_file(prefix, "--prefix"), read_text_file(suffix, "--suffix") if suffix is not None else ""
    else:
        raise UsageError("no cursor given", "give FILE:LINE:COL, or --prefix FILE [--suffix FILE]")
    return FimFields(before, after, tuple((str(p), read_text_file(p, "--extra")) for p in extra))


@guarded
@with_settings(*GENERATION)
def complete(
    cursor: Annotated[str | None, typer.Argument(help="FILE:LINE:COL: complete FILE at that cursor (1-based).")] = None,
    prefix: Annotated[Path | None, typer.Option("--prefix", help="A file holding the code before the cursor.",
                                                show_default=False)] = None,
    suffix: Annotated[Path | None, typer.Option("--suffix", help="A file holding the code after the cursor.",
                                                show_default=False)] = None,
    extra: Annotated[list[Path] | None, typer.Option(
        "--extra", help="Another file the completion may draw on (repeatable; llama-server's input_extra).",
        show_default=False)] = None,
    n_indent: Annotated[int, typer.Option("--n-indent", min=0, help="Stop at a new line indented less than this.")] = 0,
    suffix_stop: Annotated[bool, typer.Option(help="Stop where the completion writes the suffix's first line.")] = True,
    profile: ProfileOpt = None,
    recalibrate: RecalibrateOpt = False,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the completion.")] = False,
    *,
    overrides: dict[str, Any],
) -> None:
    """Fill in the middle: complete code at a cursor, from the model's own FIM tokens."""
    from specli.cli.dashboard import summary_line
    from specli.engine import generate, metrics
    from specli.runtime import open_runtime
    from specli.serve.fim import model_fim_prompt

    s = profiles.resolve_settings(profile, overrides)
    fields = fields_from(cursor, prefix, suffix, extra or [])
    stops = EditorStops(n_indent, 0, first_code_line(fields.suffix) if suffix_stop else None)
    rt = open_runtime(s, recalibrate=recalibrate)
    print_notes(rt.notes)
    try:
        tokens = model_fim_prompt(rt.target, fields, s.max_tokens or -1)
        editor = EditorText(stops, time.perf_counter())
        counters, finish = metrics.Counters(), None
        events = generate(rt.target, tokens, rt.generation_config(), rt.drafter())
        for ev in events:
            piece = editor.push(ev.text)
            counters, finish = ev.counters, editor.stopped or ev.finish_reason
            if piece and not as_json:
                sys.stdout.write(piece)
                sys.stdout.flush()
            if editor.stopped:
                break
        events.close()
        tail = editor.flush()
        if tail and not as_json:
            sys.stdout.write(tail)
    finally:
        rt.close()
    if as_json:
        print(json.dumps({"completion": editor.text, "n_prompt": len(tokens), "finish_reason": finish,
                          "stopped_by_editor": finish in EDITOR_STOPS, "metrics": metrics.summary(counters)},
                         indent=2))
        return
    sys.stdout.write("\n")
    if not quiet:
        err_console().print(summary_line(counters, finish), highlight=False)  # type: ignore[arg-type]
