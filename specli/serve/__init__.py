"""`specli serve`: an OpenAI-compatible HTTP server over one loaded pair.

schema (the OpenAI shapes: requests checked, errors, responses and chunks), worker (the
one generation thread and its bounded queue), app (Starlette routes: auth, body cap,
JSON and server-sent events), metrics (counters -> Prometheus text), view (log lines and
the live table), server (uvicorn, signals, exit codes). Imported only by the command."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_QUEUE = 8
DEFAULT_MAX_BODY_MIB = 8.0
