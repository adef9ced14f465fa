"""`specli serve`: one loaded pair over HTTP, in several protocols. Imported only by the
command (`specli complete` shares fim). The tree, in the order a request meets it:

- server: uvicorn, signals, exit codes; view: the log lines and the live table
- security: before any route, the Host, Origin and Content-Type checks and CORS (what the
  web pages the user visits cannot do)
- app: the route table (one line per protocol) and the error handlers
- served: what every route shares (configuration, worker, counters), the key check, the body reader
- generation: the routes that generate and count tokens, for any protocol
- protocols/: one package per protocol (request.py: its body into the one `Request`;
  reply.py: the outcome into its answer, frames and errors), and what they share
- request: the one internal request; outcome: what a job pushes back (`Delta`, `Outcome`)
- rendering: a request's prompt tokens and answer grammar; tools, schemas: tool calls and
  structured output
- fim: fill-in-the-middle prompts from the model's FIM tokens, and the stops an editor needs
- worker: the slots, the queue and the generation threads; sources: the web page's token marks
- figures: `timings` and the `specli` object every answer carries; stats: /metrics
- errors: every error a client gets; web/: the chat page at /
"""

DEFAULT_HOST = "127.0.0.1"  # local only unless asked: the server has no TLS of its own
DEFAULT_PORT = 8080  # llama-server's, so clients set up for it find this one
# slots, as llama-server's default: on the 2-core machine 4 plain rows cost 2.8 plain steps
# (1.4x one slot's throughput), and 4 contexts of 4096 tokens of the 1.5B target's f16 KV
# cache take 448 MiB (28 KiB a token)
DEFAULT_PARALLEL = 4
DEFAULT_QUEUE = 8  # requests waiting while every slot is busy before a 503 asks clients to retry
DEFAULT_MAX_BODY_MIB = 8.0  # room for a long conversation; a larger body is a 413
