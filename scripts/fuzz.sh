#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for $1 seconds
# (default 60) from its seed corpus. Fails on any finding.
#   scripts/fuzz.sh [SECONDS] [TARGET...]    (default: every target below)
# A target is "name corpus-folder max-input-bytes"; fuzz/<name>_fuzz.cpp builds
# fuzz_<name> (see the MOESTREAM_FUZZ block of CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
shift || true
TARGETS=(
  "gguf fuzz/corpus 65536"          # the GGUF reader
  "http fuzz/corpus_http 262144"    # the server's request parsing and validation
  "agent_api fuzz/corpus_agent_api 65536"  # /v1/responses and /v1/messages: translations, event writers
  "http_framing fuzz/corpus_http_framing 4096"  # HTTP request framing, whole vs in pieces
  "jinja fuzz/corpus_jinja 65536"   # the chat-template engine (templates from GGUF files)
  "tool_call fuzz/corpus_tool_call 16384"  # model replies through the tool-call parser, whole vs streamed
  "tokenizer fuzz/corpus_tokenizer 8192"   # a client's text through the tokenizers (round trip)
  "json_schema fuzz/corpus_json_schema 8192"  # response_format schemas: compiled, walked, the walk is JSON
)
bash scripts/install_deps.sh
cmake -S . -B build-fuzz -DMOESTREAM_FUZZ=ON -DCMAKE_C_COMPILER=clang \
      -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
for t in "${TARGETS[@]}"; do
  read -r name corpus max_len <<<"$t"
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  cmake --build build-fuzz -j "$(nproc)" --target "fuzz_$name"
  work=$(mktemp -d)
  cp "$corpus"/* "$work"/ 2>/dev/null || true
  echo "fuzz: running fuzz_$name for ${SECONDS_TO_RUN}s"
  dict=()  # fuzz/<name>.dict: the input language's tokens, where there is one
  [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")
  log="build-fuzz/fuzz_$name.log"
  rm -f build-fuzz/crash-* build-fuzz/timeout-* build-fuzz/oom-* build-fuzz/leak-*
  if ! ./build-fuzz/"fuzz_$name" "$work" "${dict[@]}" -max_total_time="$SECONDS_TO_RUN" -max_len="$max_len" \
      -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix=build-fuzz/ >"$log" 2>&1; then
    # What a CI log needs to reproduce the finding here: the report with its
    # whole stack, and the input itself (base64, where it is small).
    echo "fuzz: fuzz_$name FOUND A PROBLEM; its report:"
    grep -n -m1 -A80 -E "ALARM|==ERROR|deadly signal|out-of-memory|runtime error" "$log" || tail -n 80 "$log"
    for a in build-fuzz/crash-* build-fuzz/timeout-* build-fuzz/oom-* build-fuzz/leak-*; do
      [ -f "$a" ] || continue
      echo "fuzz: input $a ($(stat -c %s "$a") bytes), base64 (first 64 KiB):"
      head -c 65536 "$a" | base64 -w 120
    done
    rm -rf "$work"
    exit 1
  fi
  tail -n 15 "$log"
  rm -rf "$work"
  echo "fuzz: fuzz_$name: no findings"
done
