#!/usr/bin/env bash
# Builds a second moestream for same-call A/B runs on the GPU machine: the
# tree in build-ab/base.tar (made here with `git archive -o build-ab/base.tar
# <commit>` and carried with .deps) into build-ab/base/build/moestream.
# Then e.g. MS_BIN=build-ab/base/build/moestream tools/hybrid_variants.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/device_env.sh
rm -rf build-ab/base && mkdir -p build-ab/base
tar xf build-ab/base.tar -C build-ab/base
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S build-ab/base -B build-ab/base/build "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOESTREAM_CUDA=ON -DMOESTREAM_BENCH=OFF -DMOESTREAM_TESTS=OFF > build-ab/configure.log 2>&1
timeout 420 cmake --build build-ab/base/build --target moestream -j16 > build-ab/build.log 2>&1 \
  || { tail -20 build-ab/build.log; exit 1; }
echo "base build ok"
