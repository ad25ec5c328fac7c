#!/usr/bin/env bash
# The `openai` npm client end to end (CTest `openai_client`, label "slow"):
# installs the package from the npm registry into BUILD_DIR/openai_client
# (scripts/fetch_openai_client.sh, which scripts/test.sh also runs, so the
# default suite's OpenAiClient case runs too), then runs the test_server case
# that serves a scripted model and drives tools/openai_client_test/client_test.mjs.
# Usage: run.sh BUILD_DIR TEST_SERVER_BINARY. Without node/npm or the
# network it says so and exits 77 (CTest: skipped).
set -uo pipefail
build=$1
test_server=$2
bash "$(dirname "$0")/../../scripts/fetch_openai_client.sh" "$build"
[ -f "$build/openai_client/node_modules/openai/package.json" ] || exit 77
# The test finds the package in BUILD_DIR/openai_client (MS_BINARY_DIR).
exec "$test_server" --gtest_filter='OpenAiClient.*'
