"""`specli bench`: speed and losslessness of drafting modes on a set of prompts.

How a run is measured:
- the models are loaded once (the draft model only if some mode needs it);
- one warm-up generation runs first and is not recorded;
- generations are interleaved per prompt and repeat (baseline, mode A, mode B,
  baseline, A, B, ...) so that drift of the machine (thermal, background load) hits
  every mode alike;
- before every generation both KV caches are cleared, so every mode pays its own
  prefill; only the later turns of one `--turns all` conversation reuse the cache,
  as a chat would;
- at temperature 0 every mode's token ids are compared with the baseline's for the
  same prompt, repeat and turn (the lossless check).

The parts, in the order a run uses them: prompts (files, suites, selection), modes
(mode, peer and sweep strings), plan (options checked, settings resolved), peers
(llama.cpp's programs, llama-cpp-python), run (models loaded, generations run),
records (records, lossless check, aggregates), report (tables, JSON, CSV, Markdown),
tune (--write-profile), command (the whole command). Only `run` and `peers` touch
models; nothing here imports Typer.
"""

from specli.bench.command import command
from specli.bench.modes import (
    BASELINE,
    FIXED_KEYS,
    Mode,
    dedupe_modes,
    parse_mode,
    parse_modes,
    parse_peer,
    parse_sweep,
    sweep_modes,
)
from specli.bench.plan import BenchOptions, Plan, plan_bench
from specli.bench.prompts import load_prompt_file, parse_prompts, select_prompts, split_list, suite_prompts
from specli.bench.records import (
    EXIT_LOSSLESS,
    Divergence,
    LosslessError,
    Record,
    Row,
    aggregate,
    check_lossless,
    classify_divergence,
    divergences_of,
    finish_records,
    first_difference,
    record_from_counters,
    replay_proposals,
)
from specli.bench.report import DEFINITIONS, bar_chart, csv_text, document, markdown_table, report
from specli.bench.run import BenchResult, execute
from specli.bench.tune import best_mode, profile_text, write_profile

__all__ = [
    "BASELINE", "DEFINITIONS", "EXIT_LOSSLESS", "FIXED_KEYS", "BenchOptions", "BenchResult", "Divergence", "LosslessError", "Mode",
    "Plan", "Record", "Row", "aggregate", "bar_chart", "best_mode", "check_lossless", "classify_divergence",
    "command", "csv_text", "dedupe_modes", "divergences_of", "document", "execute", "finish_records",
    "first_difference", "load_prompt_file", "markdown_table", "parse_mode", "parse_modes", "parse_peer",
    "parse_prompts", "parse_sweep", "plan_bench", "profile_text", "record_from_counters", "replay_proposals",
    "report", "select_prompts", "split_list", "suite_prompts", "sweep_modes", "write_profile",
]
