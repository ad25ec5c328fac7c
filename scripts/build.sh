#!/usr/bin/env bash
# Configures and builds moestream into ./build (Release). Extra arguments go to
# CMake's configure step, e.g. scripts/build.sh -DMOESTREAM_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$JOBS"
