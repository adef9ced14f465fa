"""The `specli` command: `main` (the commands), `options` (options that are settings,
declared once from the settings table), `guard` (one line and an exit code per error)."""

from specli.cli.main import app
from specli.cli.options import GENERATION

__all__ = ["GENERATION", "app"]
