#!/usr/bin/env bash
# The `openai` npm client end to end (CTest `openai_client`, label "slow"):
# installs the package from the npm registry into BUILD_DIR/openai_client
# (a cache: done once), then runs the test_server case that serves a
# scripted model and drives tools/openai_client_test/client_test.mjs.
# Usage: run.sh BUILD_DIR TEST_SERVER_BINARY. Without node/npm or the
# network it says so and exits 77 (CTest: skipped).
set -uo pipefail
build=$1
test_server=$2
dir="$build/openai_client"
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "openai_client: $tool not found: skipped"; exit 77; }
done
if [ ! -f "$dir/node_modules/openai/package.json" ]; then
  mkdir -p "$dir"
  if ! timeout 300 npm install --prefix "$dir" --no-audit --no-fund --silent openai@4 >"$dir/npm.log" 2>&1; then
    echo "openai_client: npm install openai@4 failed (offline?): skipped"
    tail -3 "$dir/npm.log"
    exit 77
  fi
fi
echo "openai_client: openai $(node -p "require('$dir/node_modules/openai/package.json').version")"
# The test finds the package in BUILD_DIR/openai_client (MS_BINARY_DIR).
exec "$test_server" --gtest_filter='OpenAiClient.*'
