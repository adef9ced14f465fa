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
  same prompt, repeat and turn (the lossless check);
- every mode drafts from its own in-run history (earlier outputs of this run), never
  from the user's store: cold at the start, so a second --repeat shows what history
  brings. `--warm-history` warms it first: before measuring, every mode that drafts
  from history (suffix; auto with history on) generates the warm prompts through the
  measured path (same settings and max_tokens; not recorded, not measured, not in any
  speedup; the baseline, the other modes and peers skip them). `split`: the selected
  prompts (--categories, --limit) are halved per category in file order, the first
  half (n // 2) warms and the rest is measured (a held-apart split; a category needs
  2 prompts). `others`: the --categories named are measured and up to --limit prompts
  of every other category of the prompt set warm (the history full of unrelated
  text). The JSON's `warm_history` says which prompts warmed which modes.

The parts, in the order a run uses them: prompts (files, suites, selection), modes
(mode, peer and sweep strings), plan (options checked, settings resolved), peers
(llama.cpp's programs, llama-cpp-python), run (models loaded, generations run),
records (records, lossless check, aggregates), report (tables, JSON, CSV, Markdown),
tune (--write-profile), command (the whole command); summarize (`specli bench summarize`:
tables from the JSON files written). Only `run` and `peers` touch models; nothing here
imports Typer.
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
from specli.bench.plan import WARM_HISTORY_HELP, BenchOptions, Plan, plan_bench, reads_history
from specli.bench.prompts import (
    load_prompt_file,
    parse_prompts,
    select_prompts,
    split_list,
    split_warm,
    suite_prompts,
)
from specli.bench.records import (
    EXIT_LOSSLESS,
    BenchRecord,
    Divergence,
    LosslessError,
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
from specli.bench.run import BenchResult, execute, warm_json
from specli.bench.tune import best_mode, profile_text, write_profile

__all__ = [
    "BASELINE", "DEFINITIONS", "EXIT_LOSSLESS", "FIXED_KEYS", "BenchOptions", "BenchResult", "Divergence", "LosslessError", "Mode",
    "Plan", "BenchRecord", "Row", "aggregate", "bar_chart", "best_mode", "check_lossless", "classify_divergence",
    "command", "csv_text", "dedupe_modes", "divergences_of", "document", "execute", "finish_records",
    "first_difference", "load_prompt_file", "markdown_table", "parse_mode", "parse_modes", "parse_peer",
    "parse_prompts", "parse_sweep", "plan_bench", "profile_text", "record_from_counters", "replay_proposals",
    "report", "select_prompts", "split_list", "suite_prompts", "sweep_modes", "write_profile",
    "WARM_HISTORY_HELP", "reads_history", "split_warm", "warm_json",
]
