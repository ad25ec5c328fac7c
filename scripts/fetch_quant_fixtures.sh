#!/usr/bin/env bash
# Fetches gguf-py (llama.cpp's Python GGUF package, from the llama.cpp source
# that the node-llama-cpp npm package bundles) and writes, with its numpy
# dequantizers, random blocks of every quantized type and their reference
# floats into tools/quant_fixtures/out (tests/quant/ggufpy_fixture_test.cpp
# compares moestream's dequantization with them bit for bit).
# Needs Debian's /usr/bin/python3 with python3-numpy (scripts/install_deps.sh)
# and, the first time, npm, git and the network. Without them it says so and
# exits 0: the fixture test then skips itself.
set -uo pipefail
cd "$(dirname "$0")/../tools/quant_fixtures" || exit 0
PY=/usr/bin/python3
if ! [ -x "$PY" ] || ! "$PY" -c "import numpy" 2>/dev/null; then
  echo "fetch_quant_fixtures: $PY with numpy not found (apt-get install python3-numpy); gguf-py fixture test will be skipped"
  exit 0
fi
# A fixed release, so the reference does not change under the tests (the
# same one scripts/fetch_tokenizer_fixtures.sh uses).
LLAMACPP_FROM=node-llama-cpp@3.22.1
src=out/ggufpy
if ! [ -f "$src/source" ] || [ "$(cat "$src/source")" != "$LLAMACPP_FROM" ]; then
  if ! command -v npm >/dev/null 2>&1 || ! command -v git >/dev/null 2>&1; then
    echo "fetch_quant_fixtures: npm or git not found; gguf-py fixture test will be skipped"
    exit 0
  fi
  tmp=$(mktemp -d)
  # (npm pack: ~36 MB; the bundle inside is a git bundle of llama.cpp's source.)
  if ! (cd "$tmp" && timeout 600 npm pack --silent "$LLAMACPP_FROM" > /dev/null) ||
     ! tar xzf "$tmp"/node-llama-cpp-*.tgz -C "$tmp" package/llama/gitRelease.bundle ||
     ! git clone -q --no-checkout "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.cpp" 2>/dev/null; then
    echo "fetch_quant_fixtures: could not fetch $LLAMACPP_FROM (offline?); gguf-py fixture test will be skipped"
    rm -rf "$tmp"
    exit 0
  fi
  rm -rf "$src" && mkdir -p "$src/gguf"
  ok=1
  # Only the modules the dequantizers need (the package's __init__ pulls in more).
  for f in constants lazy quants; do
    git -C "$tmp/llama.cpp" show "HEAD:gguf-py/gguf/$f.py" > "$src/gguf/$f.py" 2>/dev/null || ok=0
  done
  : > "$src/gguf/__init__.py"
  rm -rf "$tmp"
  if [ $ok != 1 ]; then
    echo "fetch_quant_fixtures: $LLAMACPP_FROM lacks gguf-py's quants.py; gguf-py fixture test will be skipped"
    rm -rf "$src"
    exit 0
  fi
  echo "$LLAMACPP_FROM" > "$src/source"
fi
if [ -f out/fixtures/done ] && [ out/fixtures/done -nt make_fixtures.py ] && [ out/fixtures/done -nt "$src/source" ]; then
  echo "fetch_quant_fixtures: fixtures in $(pwd)/out/fixtures are up to date"
  exit 0
fi
rm -rf out/fixtures
if "$PY" make_fixtures.py "$src" out/fixtures; then
  echo "$LLAMACPP_FROM" > out/fixtures/done
else
  echo "fetch_quant_fixtures: make_fixtures.py failed; gguf-py fixture test will be skipped"
  rm -rf out/fixtures
fi
exit 0
