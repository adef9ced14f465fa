#!/usr/bin/env bash
# Build llama.cpp's own `llama-speculative-simple`, `llama-completion` and `llama-server`
# from the source that the pinned llama-cpp-python vendors, for `specli bench --peer
# llama.cpp:...` and benchmarks/serve.py. llama-server is built without its web UI
# (its assets are downloaded at build time; the API needs none of them).
# Default llama.cpp flags (the reference a llama.cpp user gets), with the same CPU
# features and AMX exclusions as specli's own build. About 5 minutes on 2 cores, once:
# cached under ~/.cache/specli/llama.cpp/<version>/bin. Prints that directory.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_VERSION=$(sed -n 's/^LLAMA_VERSION=//p' scripts/setup.sh)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/specli/llama.cpp/$LLAMA_VERSION"
bin="$cache/bin"
if [ -x "$bin/llama-speculative-simple" ] && [ -x "$bin/llama-completion" ] && [ -x "$bin/llama-server" ]; then
  echo "$bin"
  exit 0
fi
command -v cmake >/dev/null || { echo "cmake is needed: pip install cmake (or apt-get install cmake)" >&2; exit 1; }
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "Building llama.cpp $LLAMA_VERSION's speculative-simple, completion and server (several minutes, once)" >&2
"$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$work" >&2
tar -xzf "$work"/llama_cpp_python-"$LLAMA_VERSION".tar.gz -C "$work"
src="$work/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
# shellcheck disable=SC2046
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF $(scripts/llama-cmake-args.sh) >&2
cmake --build "$work/build" -j "$(nproc 2>/dev/null || echo 2)" \
  --target llama-speculative-simple llama-completion llama-server >&2
mkdir -p "$bin"
cp "$work/build/bin/llama-speculative-simple" "$work/build/bin/llama-completion" "$work/build/bin/llama-server" "$bin/"
echo "$bin"
