"""The `specli` command: `main` (the app and the generation commands), `bench` (`specli
bench` and `bench summarize`), `models` (the registry's models and the pull's progress),
`manage` (profiles and the history cache), `options` (options that are settings,
declared once from the settings table), `guard` (one line and an exit code per error);
`chat`, `dashboard` and `rpc_server` serve the commands of those names."""

from specli.cli.main import app
from specli.cli.options import GENERATION

__all__ = ["GENERATION", "app"]
