#!/usr/bin/env bash
# Downloads the Debian packages moestream builds against and unpacks them into
# .deps/root, to be carried to the GPU machine (which has no package access).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download -q libgtest-dev libgmock-dev googletest libbenchmark-dev \
  libbenchmark1debian libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libcpp-httplib0.11 libssl-dev libbrotli-dev \
  zlib1g-dev libpcre2-dev \
  libpcre2-8-0 libutf8proc-dev libutf8proc2 >/dev/null 2>&1)
rm -rf .deps && mkdir -p .deps/root
for f in "$tmp"/*.deb; do dpkg -x "$f" .deps/root; done
rm -rf "$tmp" .deps/root/usr/share/doc
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
du -sh .deps
