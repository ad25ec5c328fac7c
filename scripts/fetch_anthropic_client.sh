#!/usr/bin/env bash
# Installs the `@anthropic-ai/sdk` npm package (Anthropic's official client)
# into BUILD_DIR/anthropic_client, where the end-to-end test
# AgentClients.AnthropicMessages (tests/server/agent_clients_test.cpp) finds
# it: messages, streams, tool use and count_tokens through that library
# against the server. Done once (a cache). Without node/npm or the network it
# says so and exits 0: the test then skips itself.
# Usage: scripts/fetch_anthropic_client.sh [BUILD_DIR]   (default: build)
set -uo pipefail
cd "$(dirname "$0")/.."
dir="$(realpath -m "${1:-build}")/anthropic_client"
pkg="$dir/node_modules/@anthropic-ai/sdk/package.json"
if [ -f "$pkg" ]; then
  echo "fetch_anthropic_client: @anthropic-ai/sdk $(node -p "require('$pkg').version" 2>/dev/null) in $dir"
  exit 0
fi
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fetch_anthropic_client: $tool not found; the Anthropic client test will be skipped"; exit 0; }
done
mkdir -p "$dir"
# One major version: the test uses its messages.create / stream / countTokens.
if ! timeout 300 npm install --prefix "$dir" --no-audit --no-fund --silent @anthropic-ai/sdk@1 >"$dir/npm.log" 2>&1; then
  echo "fetch_anthropic_client: npm install @anthropic-ai/sdk@1 failed (offline?); the Anthropic client test will be skipped"
  tail -3 "$dir/npm.log"
  exit 0
fi
echo "fetch_anthropic_client: installed @anthropic-ai/sdk $(node -p "require('$pkg').version") in $dir"
