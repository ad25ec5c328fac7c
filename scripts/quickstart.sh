#!/usr/bin/env bash
# A newcomer's first command: install dependencies, build, and run the main
# job on the embedded tiny model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/moestream info
