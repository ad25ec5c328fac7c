#!/usr/bin/env bash
# Fetches the official JSON-Schema-Test-Suite's draft 2020-12 cases
# (tests/draft2020-12/*.json) for tests/grammar/json_schema_suite_test.cpp,
# which compiles every schema there to a grammar: refusals must name the
# keyword, accepted schemas must give only valid texts. The files come from
# Debian's libtest-json-schema-acceptance-perl (Test::JSON::Schema::Acceptance
# ships the suite) via `apt-get download`, into tools/schema_test_suite/out.
# Without apt-get or the network it says so and exits 0: the test then skips itself.
set -uo pipefail
cd "$(dirname "$0")/.." && mkdir -p tools/schema_test_suite && cd tools/schema_test_suite || exit 0
PKG=libtest-json-schema-acceptance-perl
if [ -f out/.source ] && ls out/*.json >/dev/null 2>&1; then
  echo "fetch_schema_test_suite: $(cat out/.source) in $(pwd)/out"
  exit 0
fi
for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fetch_schema_test_suite: $tool not found; the JSON-Schema-Test-Suite test will be skipped"; exit 0; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && timeout 300 apt-get download "$PKG" >/dev/null 2>&1); then
  echo "fetch_schema_test_suite: apt-get download $PKG failed (offline?); the JSON-Schema-Test-Suite test will be skipped"
  exit 0
fi
dpkg-deb -x "$tmp"/"$PKG"_*.deb "$tmp/x" || exit 0
src=$(find "$tmp/x" -type d -path '*Test-JSON-Schema-Acceptance/tests/draft2020-12' | head -1)
if [ -z "$src" ]; then
  echo "fetch_schema_test_suite: $PKG has no tests/draft2020-12; the JSON-Schema-Test-Suite test will be skipped"
  exit 0
fi
rm -rf out && mkdir -p out && cp "$src"/*.json out/ &&
  basename "$tmp"/"$PKG"_*.deb > out/.source &&
  echo "fetch_schema_test_suite: $(ls out/*.json | wc -l) files of $(cat out/.source) in $(pwd)/out"
