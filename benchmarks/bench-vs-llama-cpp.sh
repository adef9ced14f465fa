#!/usr/bin/env bash
# Reproduce the README's performance tables: specli's modes beside llama.cpp's own
# speculative decoding, in the same runs, on this machine. Greedy, 192 tokens, decode
# speed. Nothing else should run meanwhile. Results (JSON + Markdown) go to $OUT_DIR.
# Usage: benchmarks/bench-vs-llama-cpp.sh [q4|f16|exact|sampling|specbench|all] [SPEC_BENCH_JSONL]
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
scripts/build-llama-cpp.sh >/dev/null
what=${1:-all}
spec_bench=${2:-../shared/bench/spec_bench_question.jsonl}
out=${OUT_DIR:-bench-results}
mkdir -p "$out"
peers=(--peer llama.cpp:ngram-simple --peer llama.cpp:ngram-mod --peer llama.cpp:draft:k=3)
run() { local name=$1; shift; specli bench --max-tokens 192 --json "$out/$name.json" --markdown "$out/$name.md" "$@"; }
case $what in q4|all) run q4-code-edit --suite all --categories code,edit --modes baseline,auto,ngram,draft:k=3 "${peers[@]}" ;; esac
case $what in f16|all)
  run f16-code-edit --profile f16 --suite all --categories code,edit --limit 2 --modes baseline,auto \
    --peer llama.cpp:ngram-simple --peer llama.cpp:draft:k=5 ;; esac
case $what in specbench|all)
  run q4-specbench --prompts "$spec_bench" --limit "${SPEC_BENCH_LIMIT:-2}" --modes baseline,auto
  run q4-specbench-coding --prompts "$spec_bench" --categories coding --limit 2 --modes baseline,auto "${peers[@]}" ;; esac
case $what in exact|all) run q4-exact-edit --suite edit --exact --modes baseline,auto,ngram ;; esac
case $what in sampling|all) run q4-sampling --suite all --categories code,edit --temperature 0.8 --modes baseline,auto ;; esac
