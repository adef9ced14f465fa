#!/usr/bin/env bash
# The target on llama.cpp RPC servers over a simulated network, against the same run on
# this machine. Two `specli rpc-server`s run here; for each one-way delay, each sits
# behind tests/rpc_relay.py and `specli bench` runs the baseline and auto with the
# target split half and half over them (--recalibrate: the costs are the network's).
# Usage: benchmarks/bench_rpc.sh [OUT_DIR] [DELAYS_MS] [LIMIT] [MAX_TOKENS]
#   defaults: bench-rpc "0 2 10" 2 128; then: specli bench summarize --by file OUT_DIR/*.json
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-rpc}; delays=${2:-"0 2 10"}; limit=${3:-2}; n=${4:-128}
. .venv/bin/activate
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
servers=(50152 50153)
for port in "${servers[@]}"; do
  specli rpc-server --port "$port" --threads "$(nproc)" >/dev/null 2>&1 & pids+=($!)
done
sleep 3
common=(--suite all --categories code,edit --limit "$limit" -n "$n" --modes baseline,auto --recalibrate)
specli bench "${common[@]}" --json "$out/local.json" >/dev/null
for d in $delays; do
  relays=()
  for i in 0 1; do
    port=$((50160 + 10 * d + i))
    python tests/rpc_relay.py --listen "$port" --to "127.0.0.1:${servers[$i]}" --delay-ms "$d" >/dev/null & pids+=($!)
    relays+=("127.0.0.1:$port")
  done
  sleep 1
  specli bench "${common[@]}" --rpc "$(IFS=,; echo "${relays[*]}")" --n-gpu-layers -1 --tensor-split 1,1 \
    --json "$out/rpc-${d}ms.json" >/dev/null
done
echo "wrote $out/local.json $(for d in $delays; do printf '%s ' "$out/rpc-${d}ms.json"; done)"
