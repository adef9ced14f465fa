"""`specli profiles` and `specli cache`: the settings profiles and the history store."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from specli import profiles
from specli.cli.guard import guarded
from specli.cli.options import JsonOpt

profiles_app = typer.Typer(help="Settings profiles (YAML).", no_args_is_help=True)
cache_app = typer.Typer(help="The history of generated text that suffix and auto draft from.",
                        no_args_is_help=True)


@profiles_app.command("list")
@guarded
def profiles_list() -> None:
    """Shipped and user profiles."""
    t = Table("name", "origin", "description", "path")
    for p in profiles.list_profiles():
        t.add_row(p.name, p.origin, p.error or p.description, str(p.path))
    Console().print(t)


@profiles_app.command("show")
@guarded
def profiles_show(name: str) -> None:
    """Every setting a profile resolves to (defaults filled in)."""
    print(json.dumps(profiles.settings_to_dict(profiles.resolve_settings(name)), indent=2))


@profiles_app.command("validate")
@guarded
def profiles_validate(file: Path) -> None:
    """Check a profile file; exit non-zero with the problem if it is invalid."""
    profiles.validate_file(file)
    print(f"{file}: ok")


@cache_app.command("stats")
@guarded
def cache_stats(as_json: JsonOpt = False) -> None:
    """Each history store: documents, tokens, size (one per tokenizer)."""
    from specli.history import HistoryStore

    rows = HistoryStore.all_stats()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    t = Table("path", "documents", "tokens", "bytes", "status")
    for r in rows:
        t.add_row(*(str(r.get(k, "-")) for k in ("path", "n_documents", "n_tokens", "file_bytes", "status")))
    Console().print(t if rows else "no history stored")


@cache_app.command("clear")
@guarded
def cache_clear() -> None:
    """Delete every history store (the generated text kept for drafting)."""
    from specli.history import HistoryStore

    print(f"removed {HistoryStore.clear()} history store(s)")
