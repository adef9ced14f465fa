"""How every command fails: one line and a documented exit code, never a traceback."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console

from specli import profiles
from specli.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, SpecliError, Terminated

P = ParamSpec("P")
T = TypeVar("T")


def err_console() -> Console:
    return Console(stderr=True, highlight=False)


def print_notes(notes: list[str]) -> None:
    for note in notes:
        err_console().print(f"[yellow]note:[/] {note}", markup=True, soft_wrap=True)


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def _note_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    print_notes([str(message)])


def bounded_lost() -> bool:
    bounded = sys.modules.get("specli.backend.bounded")  # loaded only by a run that used RPC
    return bounded is not None and bool(bounded.ever_lost())


def _leave_if_rpc_lost(code: int) -> None:
    """After an RPC server was lost, llama.cpp threads are parked for good: end the
    process here (output flushed) rather than let interpreter shutdown wait on them."""
    if bounded_lost():
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def guarded(command: Callable[P, T]) -> Callable[P, T]:
    """Decorate a command: SpecliError -> one line + its exit code; Ctrl-C -> 130,
    SIGTERM -> 143; a closed stdout -> quiet exit; anything else -> one line (or the
    traceback with --debug / SPECLI_DEBUG=1). A deprecated profile key is a note."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            result = _run(*args, **kwargs)
        except typer.Exit as e:
            _leave_if_rpc_lost(e.exit_code)
            raise
        except BaseException as e:  # --debug's traceback, typer.Abort: not a success either
            if bounded_lost():
                traceback.print_exception(e)
            _leave_if_rpc_lost(1)
            raise
        _leave_if_rpc_lost(0)
        return result

    def _run(*args: P.args, **kwargs: P.kwargs) -> T:
        with contextlib.suppress(ValueError):  # not in the main thread
            signal.signal(signal.SIGTERM, _on_sigterm)
        debug = bool(os.environ.get("SPECLI_DEBUG"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("default", profiles.DeprecatedKey)
                warnings.showwarning = _note_warning
                return command(*args, **kwargs)
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

    return run
