#!/usr/bin/env bash
# One GPU-machine session in one command: build everything for sm_90, run the
# GPU tests, the whole-model benchmark and the Hugging Face parity script, and
# leave logs under $OUT. Each step has its own time limit and a failing step
# does not stop the next, so one call gives a full picture.
#
#   OUT=dir tools/device_full.sh [steps]     steps: build,tests,bench,greedy,parity-cpu,parity-cuda
#                                            (default: all of them; greedy: CPU vs CUDA greedy 64 on the
#                                            bench model, tools/greedy_backends.py)
#   BENCH_MODEL=/tmp/q.gguf  reuse or place the generated 16 GiB model there
#
# The dev machine's .deps (Debian headers/libs, tools/make_device_deps.sh) and
# the tokenizer fixtures (scripts/fetch_tokenizer_fixtures.sh) must be carried.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
mkdir -p "$OUT"
STEPS=${1:-build,tests,bench,greedy,parity-cpu,parity-cuda}
BUILD=$ROOT/build-gpu
MODEL=${BENCH_MODEL:-/tmp/q.gguf}
START=$(date +%s)
say() { echo "[device_full $(($(date +%s) - START))s] $*" | tee -a "$OUT/summary.txt"; }
want() { [[ ",$STEPS," == *",$1,"* ]]; }
[ -f tools/device_env.sh ] && source tools/device_env.sh

if want build; then
  say "configure + build (sm_90, Release, all targets)"
  GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DMOESTREAM_CUDA=ON -DMOESTREAM_BENCH=OFF > "$OUT/configure.log" 2>&1 || { say "FAIL configure"; tail -20 "$OUT/configure.log"; exit 1; }
  timeout 420 cmake --build "$BUILD" -j16 > "$OUT/build.log" 2>&1 || { say "FAIL build"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$OUT/summary.txt"; exit 1; }
  say "build ok"
fi
MS=$BUILD/moestream

if want tests; then
  say "ctest -L gpu"
  timeout 300 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 200 -j4 > "$OUT/ctest_gpu.log" 2>&1
  grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log" | tee -a "$OUT/summary.txt"
  sed -n '/The following tests FAILED/,$p' "$OUT/ctest_gpu.log" | head -30 | tee -a "$OUT/summary.txt"
fi

if want bench || want greedy; then
  if [ ! -f "$MODEL" ]; then
    say "gen $MODEL (synthetic Qwen3-30B-A3B, q4_k)"
    timeout 240 "$MS" gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k -o "$MODEL" > "$OUT/gen.log" 2>&1 || say "FAIL gen"
  fi
fi
if want bench; then
  say "bench -p 512 -n 128 -r 3 --backend cuda"
  timeout 300 "$MS" bench -m "$MODEL" -p 512 -n 128 -r 3 --backend cuda > "$OUT/bench.md" 2> "$OUT/bench.err"
  say "bench rc=$?"; cat "$OUT/bench.md" | tee -a "$OUT/summary.txt"; tail -3 "$OUT/bench.err"
fi

if want greedy; then
  say "greedy 64, cpu vs cuda, on $MODEL"
  timeout 400 python3 tools/greedy_backends.py --moestream "$MS" -m "$MODEL" -n 64 --out /tmp/greedy \
    > "$OUT/greedy.log" 2>&1
  say "greedy rc=$?"; tail -8 "$OUT/greedy.log" | tee -a "$OUT/summary.txt"
fi

for be in cpu cuda; do
  if want parity-$be; then
    say "hf_parity --backend $be"
    timeout 300 python3 tools/hf_parity.py --moestream "$MS" --out "/tmp/parity-$be" --backend "$be" \
      > "$OUT/parity_$be.log" 2>&1
    say "parity $be rc=$?"
    cp "/tmp/parity-$be/parity.md" "$OUT/parity_$be.md" 2>/dev/null
    tail -40 "$OUT/parity_$be.log" | tee -a "$OUT/summary.txt"
  fi
done
say "done"
