#!/usr/bin/env bash
# Fetches real chat templates for the Jinja renderer's parity tests
# (tests/tokenizer/jinja_parity_test.cpp): llama.cpp's models/templates/*.jinja,
# taken from the git bundle of llama.cpp's source that the npm package
# node-llama-cpp ships (llama/gitRelease.bundle). Only the template text
# files are extracted, to tools/chat_templates/out/. Without npm, git or the
# network it says so and exits 0: the parity tests then skip themselves.
set -uo pipefail
cd "$(dirname "$0")/../tools/chat_templates"
VERSION=3.22.1
if [ -f out/.version ] && [ "$(cat out/.version)" = "$VERSION" ]; then
  echo "fetch_chat_templates: templates in $(pwd)/out are up to date"
  exit 0
fi
for tool in npm git tar; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "fetch_chat_templates: $tool not found; chat template parity tests will be skipped"
    exit 0
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && timeout 600 npm pack "node-llama-cpp@$VERSION" --silent >/dev/null 2>&1); then
  echo "fetch_chat_templates: npm pack failed (offline?); chat template parity tests will be skipped"
  exit 0
fi
tar -xzf "$tmp"/node-llama-cpp-*.tgz -C "$tmp" package/llama/gitRelease.bundle || exit 0
git init -q "$tmp/repo" &&
  git -C "$tmp/repo" bundle unbundle "$tmp/package/llama/gitRelease.bundle" >"$tmp/heads" 2>/dev/null || {
  echo "fetch_chat_templates: could not read the bundle; chat template parity tests will be skipped"
  exit 0
}
head=$(awk '{print $1; exit}' "$tmp/heads")
rm -rf out && mkdir -p out
git -C "$tmp/repo" archive "$head" models/templates | tar -x -C "$tmp" &&
  cp "$tmp"/models/templates/*.jinja out/ &&
  echo "$VERSION" > out/.version &&
  echo "fetch_chat_templates: $(ls out/*.jinja | wc -l) templates in $(pwd)/out (llama.cpp $head)"
