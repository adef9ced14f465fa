"""`specli serve`: an OpenAI-compatible HTTP server over one loaded pair.

requests (bodies checked into records), responses (the OpenAI response and chunk
shapes), errors (every error a client gets, its status chosen by its kind), tools
(response_format and tool calls), worker (the one generation thread and its bounded
queue), app (Starlette routes: auth, body cap, JSON and server-sent events), metrics
(counters -> Prometheus text), view (log lines and the live table), server (uvicorn,
signals, exit codes). Imported only by the command."""

DEFAULT_HOST = "127.0.0.1"  # local only unless asked: the server has no TLS of its own
DEFAULT_PORT = 8080  # llama-server's, so clients set up for it find this one
# slots, as llama-server's default: on the 2-core machine 4 plain rows cost 2.8 plain steps
# (1.4x one slot's throughput), and 4 contexts of 4096 tokens of the 1.5B target's f16 KV
# cache take 448 MiB (28 KiB a token)
DEFAULT_PARALLEL = 4
DEFAULT_QUEUE = 8  # requests waiting while every slot is busy before a 503 asks clients to retry
DEFAULT_MAX_BODY_MIB = 8.0  # room for a long conversation; a larger body is a 413
