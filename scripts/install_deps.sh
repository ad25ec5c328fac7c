#!/usr/bin/env bash
# Installs moestream's build dependencies from Debian's packages.
# Idempotent: installs nothing (and prints nothing) when all are present.
set -euo pipefail
PKGS=(cmake g++ make pkg-config libgtest-dev libgmock-dev libbenchmark-dev
      libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev
      libutf8proc-dev clang libclang-rt-14-dev python3-jinja2 python3-numpy)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install_deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
