"""What the tests and the benchmarks both drive, outside specli and never shipped: tests
import it (pyproject's pythonpath is the repository root) and so do benchmarks, run from
the root as `python -m benchmarks.X`. Nothing here measures or asserts.

- processes: a `specli serve` or `specli rpc-server` on 127.0.0.1, one HTTP request, a
  process's resident memory.
- slots: the logit noise of a slot's rows, and where two generations first differ.
- serve_workloads: the agentic edit session and fresh coding questions benchmarks.serve replays.
- agent_proxy: the pass-through proxy benchmarks.agents reads the servers' answers through.
- agent_recorder: the stand-in model server benchmarks.record_agents records agents with.
"""
