"""Measurements beyond `specli bench`, run from the repository root as modules
(`python -m benchmarks.serve --help`). None is a test: they measure and assert nothing.
Server processes, HTTP requests and memory readings come from benchmarks/processes.py,
the helper the tests use too.

- serve: `specli serve` against llama.cpp's llama-server over HTTP, on the workloads of
  serve_workloads (an agentic edit session, fresh coding questions).
- structured: JSON-schema tool calls over HTTP, specli's modes against llama-server's.
- serve_overhead: what the server adds to the engine (decode speed, time to first token).
- serve_memory, rpc_memory, long_session: memory (and speed) over many requests,
  generations or chat turns; flat is good.
- history_scale, history_draft_share: the suffix history store at 10 M tokens (build,
  save, load, lookups) and drafting's share of decode time with it full.
- profile_step: specli's own work per target forward and the functions it goes to.
"""
