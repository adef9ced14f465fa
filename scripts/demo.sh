#!/usr/bin/env bash
# Set up, pull the default pair, and run the main job: one speculative generation.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
specli models pull qwen2.5-coder-1.5b-instruct-q4_k_m qwen2.5-coder-0.5b-instruct-q4_k_m
specli generate --max-tokens 256 "${@:-Write a Python function that returns the n-th Fibonacci number, with a docstring and a short test.}"
