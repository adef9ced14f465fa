#!/usr/bin/env bash
# Set up specli in ./.venv: llama-cpp-python built once for this machine (wheel cached
# under the user cache dir), then specli itself. Usage: scripts/setup.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_VERSION=0.3.36
PY=${PYTHON:-python3}

[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip wheel setuptools

args=$(scripts/llama-cmake-args.sh)
key=$(echo "$LLAMA_VERSION $args" | sha256sum | cut -c1-12)
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/specli/wheels/$key"
have=$(python - <<PY
try:
    import importlib.metadata as m; print(m.version("llama_cpp_python"))
except Exception:
    print("")
PY
)
stamp=".venv/.llama-build-key"
if [ "$have" != "$LLAMA_VERSION" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$key" ]; then
  if ! ls "$wheels"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "Building llama-cpp-python $LLAMA_VERSION (compiles llama.cpp: several minutes, once per machine)"
    echo "  CMAKE_ARGS=$args"
    mkdir -p "$wheels"
    CMAKE_ARGS="$args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}" \
      python -m pip wheel -q --no-deps --no-cache-dir "llama-cpp-python==$LLAMA_VERSION" -w "$wheels"
  fi
  python -m pip install -q --force-reinstall --no-deps "$wheels"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
  echo "$key" > "$stamp"
fi

if [ "${1:-}" = "--dev" ]; then
  python -m pip install -q -e ".[dev]"
else
  python -m pip install -q -e .
fi
echo "specli is installed in .venv (activate with: . .venv/bin/activate)"
