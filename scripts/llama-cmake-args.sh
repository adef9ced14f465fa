#!/usr/bin/env bash
# Prints the CMAKE_ARGS specli builds llama-cpp-python with.
# A user's own CMAKE_ARGS (e.g. -DGGML_CUDA=on) always wins.
# On x86-64 Linux we build for the CPU's features but never AMX: -march=native turns
# AMX kernels on where the CPU lists AMX, and they crash in VMs that do not grant AMX
# tile state (seen on this project's CI machines: SIGSEGV in ggml_backend_amx_mul_mat).
# llamafile's tinyBLAS stays on (llama.cpp's default): it makes F16 prefill and verify
# batches much faster. It sums in another order than the one-token path, so batch rows
# can differ from one-token rows in the last bits; `verify: exact` measures per model
# which chunk size is still bit-exact (see specli/backend/system.py).
# GGML_RPC is always on (a user's CMAKE_ARGS may turn it off): the RPC client and
# server are one small library, so one wheel serves `--rpc` and `specli rpc-server`.
set -euo pipefail
if [ -n "${CMAKE_ARGS:-}" ]; then
  case "$CMAKE_ARGS" in
    *GGML_RPC=*) echo "$CMAKE_ARGS" ;;
    *) echo "$CMAKE_ARGS -DGGML_RPC=ON" ;;
  esac
  exit 0
fi
rpc="-DGGML_RPC=ON"
if [ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ] && [ -r /proc/cpuinfo ]; then
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  has() { [[ "$flags" == *" $1 "* ]]; }
  args="-DGGML_NATIVE=OFF"
  has sse4_2 && args+=" -DGGML_SSE42=ON"
  has avx && args+=" -DGGML_AVX=ON"
  has avx2 && args+=" -DGGML_AVX2=ON"
  has fma && args+=" -DGGML_FMA=ON"
  has f16c && args+=" -DGGML_F16C=ON"
  has bmi2 && args+=" -DGGML_BMI2=ON"
  has avx_vnni && args+=" -DGGML_AVX_VNNI=ON"
  if has avx512f && has avx512cd && has avx512vl && has avx512dq && has avx512bw; then
    args+=" -DGGML_AVX512=ON"
    has avx512vbmi && args+=" -DGGML_AVX512_VBMI=ON"
    has avx512_vnni && args+=" -DGGML_AVX512_VNNI=ON"
    has avx512_bf16 && args+=" -DGGML_AVX512_BF16=ON"
  fi
  echo "$args -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF $rpc"
else
  echo "$rpc"
fi
