"""`python -m specli`: the same as the `specli` command."""

from specli.cli import app

app(prog_name="specli")
