#!/usr/bin/env bash
# Set up (dev), pull the test models, run lint, types and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
. .venv/bin/activate
specli models pull smollm2-135m-instruct-q4_1 gemma-3-270m-q4_k_m \
  qwen2.5-coder-0.5b-instruct-q4_k_m qwen2.5-coder-1.5b-instruct-q4_k_m qwen2.5-coder-1.5b-instruct-f16
ruff check specli tests benchmarks scripts
mypy specli
SPECLI_REQUIRE_MODELS=1 python -m pytest -q "$@"
