#!/usr/bin/env bash
# Set up (dev), pull the test models, run lint, types and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
. .venv/bin/activate
specli models pull smollm2-135m-instruct-q4_1 gemma-3-270m-q4_k_m \
  qwen2.5-coder-0.5b-instruct-q4_k_m qwen2.5-coder-1.5b-instruct-q4_k_m qwen2.5-coder-1.5b-instruct-f16
# the web page's tests run in Debian's Chromium; without it they skip and say why
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; } \
    || echo "chromium could not be installed: the browser tests will skip" >&2
fi
ruff check specli tests benchmarks harness scripts
mypy specli
SPECLI_REQUIRE_MODELS=1 python -m pytest -q "$@"
