#!/usr/bin/env bash
# Packs llama.cpp's source (the release bundled in the `node-llama-cpp` npm
# package as llama/gitRelease.bundle) into .llama/llama-src.tar.xz (~8 MB),
# from which tools/llama_bench_local.sh builds llama-bench and llama-server
# for the GPU machine (no network there; tools/matrix.py runs them). Needs
# npm and the network here; nothing of it is part of moestream's build.
#
#   tools/make_llama_src.sh [node-llama-cpp version]    (default: the registry's latest)
set -euo pipefail
cd "$(dirname "$0")/.."
ver=${1:-latest}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "node-llama-cpp@$ver" >/dev/null)
tar xzf "$tmp"/node-llama-cpp-*.tgz -C "$tmp" package/llama/gitRelease.bundle
git clone -q "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.cpp" 2>/dev/null
commit=$(git -C "$tmp/llama.cpp" rev-parse --short HEAD)
mkdir -p .llama
# The library, ggml and tools/ (llama-bench); not the models, docs, tests or examples.
tar cJf .llama/llama-src.tar.xz -C "$tmp/llama.cpp" --exclude=.git --exclude=./models --exclude=./docs \
  --exclude=./examples --exclude=./tests --exclude=./media --exclude=./gguf-py --exclude=./app \
  --exclude=./pocs --exclude=./benches --exclude=./skills .
echo "$commit (node-llama-cpp $ver)" > .llama/llama-src.version
echo "wrote .llama/llama-src.tar.xz: llama.cpp $commit, $(du -h .llama/llama-src.tar.xz | cut -f1)"
