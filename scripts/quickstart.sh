#!/usr/bin/env bash
# A newcomer's first command: install dependencies, build, and run the main
# job — text generation — on the embedded tiny model (random weights, made by
# `moestream gen` on first use). Extra arguments go to `moestream run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/moestream info
./build/moestream run -p "The quick brown fox" -n 32 "$@"
