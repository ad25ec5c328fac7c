#!/usr/bin/env bash
# Installs the `openai` npm package (the official OpenAI client) into
# BUILD_DIR/openai_client, where the end-to-end test OpenAiClient.ChatStreamAndTools
# (tests/server/openai_client_test.cpp) finds it: chat, streaming and tool calls
# through that library against the server; and AgentClients.OpenAiResponses
# (tests/server/agent_clients_test.cpp) its Responses API. Done once (a cache). Without
# node/npm or the network it says so and exits 0: the test then skips itself.
# Usage: scripts/fetch_openai_client.sh [BUILD_DIR]   (default: build)
set -uo pipefail
cd "$(dirname "$0")/.."
dir="$(realpath -m "${1:-build}")/openai_client"
# The Responses API test (AgentClients.OpenAiResponses) needs client.responses
# (openai 4.87 and later): an older cached install is replaced.
if [ -f "$dir/node_modules/openai/package.json" ] && [ -d "$dir/node_modules/openai/resources/responses" ]; then
  echo "fetch_openai_client: openai $(node -p "require('$dir/node_modules/openai/package.json').version" 2>/dev/null) in $dir"
  exit 0
fi
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fetch_openai_client: $tool not found; the openai client test will be skipped"; exit 0; }
done
mkdir -p "$dir"
# One major version: the test uses v4's API (chat.completions, stream, tools).
if ! timeout 300 npm install --prefix "$dir" --no-audit --no-fund --silent openai@4 >"$dir/npm.log" 2>&1; then
  echo "fetch_openai_client: npm install openai@4 failed (offline?); the openai client test will be skipped"
  tail -3 "$dir/npm.log"
  exit 0
fi
echo "fetch_openai_client: installed openai $(node -p "require('$dir/node_modules/openai/package.json').version") in $dir"
