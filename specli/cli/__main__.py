from specli.cli import app

app()
