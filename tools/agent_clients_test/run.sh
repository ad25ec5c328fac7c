#!/usr/bin/env bash
# The official agent SDK clients end to end (CTest `agent_clients`, label
# "slow"): installs the `openai` and `@anthropic-ai/sdk` npm packages into
# BUILD_DIR (scripts/fetch_openai_client.sh, scripts/fetch_anthropic_client.sh,
# which scripts/test.sh also runs), then runs the test_server cases that serve
# a scripted model and drive responses_test.mjs and messages_test.mjs.
# Usage: run.sh BUILD_DIR TEST_SERVER_BINARY. Without node/npm or the
# network it says so and exits 77 (CTest: skipped).
set -uo pipefail
build=$1
test_server=$2
here="$(dirname "$0")"
bash "$here/../../scripts/fetch_openai_client.sh" "$build"
bash "$here/../../scripts/fetch_anthropic_client.sh" "$build"
[ -f "$build/openai_client/node_modules/openai/package.json" ] || exit 77
[ -f "$build/anthropic_client/node_modules/@anthropic-ai/sdk/package.json" ] || exit 77
exec "$test_server" --gtest_filter='AgentClients.*'
