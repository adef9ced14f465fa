#!/usr/bin/env bash
# Issue #14's check "a store full of unrelated text must not cost": for every Spec-Bench
# category, measure it with baseline, auto (default profile) and the cold n-gram, auto's
# in-run history warmed first on the other categories' prompts (--warm-history others),
# then print auto's and ngram's decode speedup per category (goal: auto >= 0.97x).
# One run at a time, nothing else running meanwhile. Writes OUT_DIR/CATEGORY.json. Cost: each
# category first generates LIMIT prompts of each of the 12 others (long summarization and rag
# prefills); LIMIT 1 with 16 tokens took 26 minutes on 2 cores.
# Usage: benchmarks/bench_warm_categories.sh LIMIT MAX_TOKENS [OUT_DIR] [SPEC_BENCH_JSONL]
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
[ $# -ge 2 ] || { sed -n '2,9p' "$0"; exit 2; }
limit=$1 max_tokens=$2
out=${3:-bench-results/warm-categories}
spec_bench=${4:-../shared/bench/spec_bench_question.jsonl}
mkdir -p "$out"
categories=$(python -c 'import json, sys
print(" ".join(dict.fromkeys(json.loads(l)["category"] for l in open(sys.argv[1]) if l.strip())))' "$spec_bench")
for cat in $categories; do
  specli bench --prompts "$spec_bench" --categories "$cat" --limit "$limit" --max-tokens "$max_tokens" \
    --modes baseline,auto,ngram --warm-history others --json "$out/$cat.json" --markdown "$out/$cat.md"
done
specli bench summarize --by category "$out"/*.json
