#!/usr/bin/env bash
# Builds the libFuzzer target for the GGUF reader (clang, ASan+UBSan) and runs
# it for $1 seconds (default 60) from the seed corpus. Fails on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
bash scripts/install_deps.sh
cmake -S . -B build-fuzz -DMOESTREAM_FUZZ=ON -DCMAKE_C_COMPILER=clang \
      -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_gguf
work=$(mktemp -d)
cp fuzz/corpus/* "$work"/ 2>/dev/null || true
echo "fuzz: running the GGUF reader fuzzer for ${SECONDS_TO_RUN}s"
./build-fuzz/fuzz_gguf "$work" -max_total_time="$SECONDS_TO_RUN" -max_len=65536 \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix=build-fuzz/ 2>&1 | tail -n 15
echo "fuzz: no findings"
