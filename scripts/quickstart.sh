#!/usr/bin/env bash
# A newcomer's first command: install dependencies, build, run the main job —
# text generation — on the embedded tiny model (random weights, made by
# `moestream gen` on first use), then show the OpenAI-compatible endpoint
# (`moestream serve`) answering one chat request. Extra arguments go to
# `moestream run`.
#
# It builds only what that needs: the `moestream` target, no test or
# benchmark binaries, and CUDA code only for the GPU(s) nvidia-smi shows (no
# GPU: no CUDA at all). On a 2-core machine with nvcc and no GPU the full build
# took 18 minutes (192 C++ units and 25 CUDA units x 5 architectures); this
# one is 115 C++ units, 635 s of CPU time (measured with ccache off).
# scripts/test.sh (CI) reconfigures the same build/ for the complete build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
ARGS=(-DMOESTREAM_TESTS=OFF -DMOESTREAM_BENCH=OFF)
# The visible GPUs' compute capabilities ("8.9" -> 89) as a CMake list ("89;90").
gpu_archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d '. ' | sort -u | paste -sd';' || true)
if [[ "$gpu_archs" =~ ^[0-9]+(\;[0-9]+)*$ ]]; then
  ARGS+=(-DMOESTREAM_CUDA=AUTO "-DCMAKE_CUDA_ARCHITECTURES=$gpu_archs")
else
  ARGS+=(-DMOESTREAM_CUDA=OFF)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${ARGS[@]}" >/dev/null
cmake --build build -j "${JOBS:-$(nproc)}" --target moestream
./build/moestream info
./build/moestream run -p "The quick brown fox" -n 32 "$@"

echo
echo "== moestream serve (the same tiny model), one request to /v1/chat/completions:"
log=$(mktemp)
./build/moestream serve --port 0 -q 2> "$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=""
for _ in $(seq 100); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$log"; exit 1; }
body='{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16}'
echo "curl http://127.0.0.1:$port/v1/chat/completions -d '$body'"
if command -v curl >/dev/null 2>&1; then
  curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body"
else
  python3 -c "import http.client,sys; c=http.client.HTTPConnection('127.0.0.1',$port); c.request('POST','/v1/chat/completions',sys.argv[1]); print(c.getresponse().read().decode())" "$body"
fi
echo
echo "Tests: bash scripts/test.sh (this build has none: it builds them, then runs the suite)"
