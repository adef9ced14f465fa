#!/usr/bin/env bash
# The GPU check (#21): what specli's steps cost on an NVIDIA GPU, with random-weight models
# of Qwen2.5's real shapes (no weights can be downloaded there). Writes gpu-check.json and
# gpu-check.md (scripts/gpu_check.py says what is in them).
#
#   scripts/gpu-check.sh --pack .gpu-check          # here: the pinned llama.cpp source, trimmed
#                                                   # to 7 MB, and the wheels the check needs
#   scripts/gpu-check.sh .gpu-check [OUT]           # there (CUDA compiler, CMake, no network):
#                                                   # builds llama.cpp with CUDA, runs the check
#                                                   # (the device tool: carry [".gpu-check"], OUT=$OUT)
#   scripts/gpu-check.sh --small [OUT]              # this CPU, tiny shapes (CI keeps it working)
#
# On the GPU machine llama.cpp is built once as shared libraries for the GPU it has
# (CMAKE_CUDA_ARCHITECTURES=native) with llama-bench beside it; llama-cpp-python's Python
# package from the same source is pointed at those libraries, so specli and llama-bench run
# the same build. Meant to finish inside 10 minutes on 16 cores (the build is most of it).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_VERSION=$(sed -n 's/^LLAMA_VERSION=//p' scripts/setup.sh)

case "${1:-}" in
  --small)
    PY=python3
    [ -x .venv/bin/python ] && PY=.venv/bin/python
    exec "$PY" scripts/gpu_check.py --small --out "${2:-$(mktemp -d)}" ;;
  --pack)
    dir=${2:?usage: scripts/gpu-check.sh --pack DIR}
    mkdir -p "$dir/wheels"
    PY=python3
    [ -x .venv/bin/python ] && PY=.venv/bin/python
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$tmp" >&2
    tar -xzf "$tmp/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$tmp"
    src="llama_cpp_python-$LLAMA_VERSION"
    # the vocabularies, docs, tests, web UI, git history and other backends are most of the
    # sdist and none of a CUDA build (the device tool carries 64 MB at most)
    v="$src/vendor/llama.cpp"
    tar -czf "$dir/llama-src.tar.gz" -C "$tmp" --exclude="$src/.git" --exclude="$v/models" --exclude="$v/docs" \
      --exclude="$v/benches" --exclude="$v/tests" --exclude="$v/tools/ui" --exclude="$v/media" \
      --exclude="$v/ggml/src/ggml-sycl" --exclude="$v/ggml/src/ggml-vulkan" --exclude="$v/ggml/src/ggml-opencl" \
      --exclude="$v/ggml/src/ggml-hexagon" --exclude="$v/ggml/src/ggml-metal" "$src"
    "$PY" -m pip download -q --only-binary :all: -d "$dir/wheels" numpy jinja2 diskcache typing-extensions >&2
    du -sh "$dir"
    exit 0 ;;
esac

pack=${1:?usage: scripts/gpu-check.sh PACK_DIR [OUT] | --pack DIR | --small [OUT]}
out=${2:-docs/gpu-check}
# kept inside the pack: a second call on a machine still warm skips the build
# (GPU_CHECK_BUILD_ONLY=1 stops after it, for a device call limit under the whole)
work=${GPU_CHECK_WORK:-$pack/work}
src="$work/llama_cpp_python-$LLAMA_VERSION"
mkdir -p "$work"
if [ ! -x "$work/build/bin/llama-bench" ] || [ ! -e "$src/llama_cpp/lib/libllama.so" ]; then
  command -v nvcc >/dev/null || { echo "nvcc (the CUDA compiler) is needed" >&2; exit 1; }
  command -v cmake >/dev/null || { echo "cmake is needed" >&2; exit 1; }
  tar -xzf "$pack/llama-src.tar.gz" -C "$work"
  # tests/ is not in the pack: llama.cpp's CMake only wants it with LLAMA_BUILD_TESTS
  cmake -S "$src/vendor/llama.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=native -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
  cmake --build "$work/build" -j "$(nproc)" --target llama llama-bench >&2
  mkdir -p "$src/llama_cpp/lib"
  cp -a "$work"/build/bin/*.so* "$src/llama_cpp/lib/"
fi
[ "${GPU_CHECK_BUILD_ONLY:-0}" = 1 ] && exit 0
# numpy, jinja2 (llama_cpp's chat formats) and diskcache: from the pack's wheels where missing
site=""
if ! python3 -c "import numpy, jinja2, diskcache" 2>/dev/null; then
  site="$work/site"
  python3 -m pip install -q --no-index --find-links "$pack/wheels" --target "$site" \
    numpy jinja2 diskcache typing-extensions >&2
fi
PYTHONPATH="$src:$PWD${site:+:$site}" python3 scripts/gpu_check.py --out "$out" --gpu-layers 99 \
  --llama-bench "$work/build/bin/llama-bench" --models "$work/models" ${GPU_CHECK_SIZES:+--sizes "$GPU_CHECK_SIZES"}
