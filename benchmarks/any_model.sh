#!/usr/bin/env bash
# Issue 60's figures: targets of other families with the default drafter (auto drafts with
# no model where none pairs), and a draft model of another vocabulary drafting text for the
# target (SmolLM2-135M for the Qwen2.5-Coder 1.5B target, Qwen2.5-Coder 0.5B for Gemma 3
# 270m), beside plain decoding and the n-gram lookup, in the same runs. Greedy, decode
# speed, lossless check. Nothing else should run meanwhile. Results go to $OUT_DIR.
# Usage: benchmarks/any_model.sh [cross|default|all]
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
what=${1:-all}
out=${OUT_DIR:-bench-results}
n=${MAX_TOKENS:-128}
mkdir -p "$out"
run() { local name=$1; shift; specli bench --max-tokens "$n" --ctx "${CTX:-2048}" --json "$out/$name.json" --markdown "$out/$name.md" "$@"; }
suites=(--suite all --categories code,edit,chat --limit "${LIMIT:-2}")
case $what in cross|all)
  run cross-smollm-for-qwen --target qwen2.5-coder-1.5b-instruct-q4_k_m --draft smollm2-135m-instruct-q4_1 \
    "${suites[@]}" --modes baseline,draft:k=3,auto,ngram
  run cross-qwen-for-gemma --target gemma-3-270m-q4_k_m --draft qwen2.5-coder-0.5b-instruct-q4_k_m --raw \
    "${suites[@]}" --modes baseline,draft:k=3,auto,ngram ;; esac
case $what in default|all)
  for target in smollm2-135m-instruct-q4_1 gemma-3-270m-q4_k_m qwen2.5-coder-0.5b-instruct-q4_k_m; do
    extra=(); [ "$target" = gemma-3-270m-q4_k_m ] && extra=(--raw)
    run "default-$target" --target "$target" "${extra[@]}" "${suites[@]}" --modes baseline,auto
  done ;; esac
