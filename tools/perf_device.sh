#!/usr/bin/env bash
# Performance session on the GPU machine, one call: build this tree (and,
# optionally, a baseline tree's moestream), run the GPU tests, generate the
# synthetic Qwen3-30B-A3B model, run bench variants (env toggles) of both
# builds, and ncu kernel-time summaries of decode and prefill on a 4-layer
# model. Everything goes to $OUT/summary.txt (plus a few logs).
#
#   OUT=dir BASE=/path/to/baseline/tree tools/perf_device.sh [steps]
#   steps: build,tests,bench,ncu,ncu-gemm (default: build,tests,bench,ncu)
#   VARIANTS="label|ENV=1|bench args;..." overrides the env-toggle variants benched
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
mkdir -p "$OUT"
STEPS=${1:-build,tests,bench,ncu}
BASE=${BASE:-}
B=$ROOT/build-gpu
BB=/tmp/build-base
MODEL=/tmp/q.gguf
M4=/tmp/q4.gguf
START=$(date +%s)
S=$OUT/summary.txt
say() { echo "[perf $(($(date +%s) - START))s] $*" | tee -a "$S"; }
want() { [[ ",$STEPS," == *",$1,"* ]]; }
[ -f tools/device_env.sh ] && source tools/device_env.sh
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
CFG=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DMOESTREAM_CUDA=ON -DMOESTREAM_BENCH=OFF)

if want build; then
  say "build (this tree, all targets)"
  cmake -S . -B "$B" "${GEN[@]}" "${CFG[@]}" > "$OUT/build.log" 2>&1 &&
    timeout 300 cmake --build "$B" -j16 >> "$OUT/build.log" 2>&1 || { say "FAIL build"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$S"; exit 1; }
  say "build ok"
  if [ -n "$BASE" ]; then
    # The baseline's moestream builds while the tests run (CPU vs GPU).
    ( cmake -S "$BASE" -B "$BB" "${GEN[@]}" "${CFG[@]}" > /tmp/base_build.log 2>&1 &&
      cmake --build "$BB" -j12 --target moestream >> /tmp/base_build.log 2>&1; echo "rc $?" >> /tmp/base_build.log ) &
    BASE_PID=$!
  fi
fi
MS=$B/moestream

if want tests; then
  say "ctest -L gpu"
  timeout 240 ctest --test-dir "$B" -L gpu --output-on-failure --timeout 200 -j4 > "$OUT/ctest_gpu.log" 2>&1
  grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log" | tee -a "$S"
  sed -n '/The following tests FAILED/,$p' "$OUT/ctest_gpu.log" | head -30 | tee -a "$S"
  grep -hE "worst rel|prefill vs token|rel [0-9]" "$OUT/ctest_gpu.log" | sort | uniq | head -20 >> "$S"
fi
[ -n "${BASE_PID:-}" ] && { wait "$BASE_PID"; say "base build: $(tail -1 /tmp/base_build.log)"; }

bench() {  # label, binary, env..., -- args
  local label=$1 bin=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 120 "$bin" bench -m "$MODEL" --backend cuda "$@" > /tmp/b.out 2> /tmp/b.err
  local rc=$?
  grep -E "^\| qwen3moe" /tmp/b.out | sed "s/^/$label: /" | tee -a "$S"
  grep -E "timing|error|Error" /tmp/b.err | sed "s/^/$label: /" | tee -a "$S"
  [ $rc -ne 0 ] && say "$label rc=$rc"
  return 0
}

if want bench || want ncu || want ncu-gemm; then
  say "gen models"
  timeout 240 "$MS" gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k -o "$MODEL" > /tmp/gen.log 2>&1 || say "FAIL gen"
  timeout 60 "$MS" gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k --layers 4 -o "$M4" > /tmp/gen4.log 2>&1 || say "FAIL gen4"
fi
if want bench; then
  "$MS" bench -m "$MODEL" --backend cuda -p 512 -n 128 -r 3 > "$OUT/bench.md" 2> /tmp/b.err; cat "$OUT/bench.md" >> "$S"
  # Variants: VARIANTS="label|ENV=1 ENV2=0|bench args;..." (default below: tuning flags, `--help`'s "Tuning")
  V=${VARIANTS:-"timing||--step-timing -p 0 -n 128 -r 3;nofuseprefill||--no-fuse-prefill -p 512 -n 0 -r 3;nofusedecode||--no-fuse-decode -p 0 -n 128 -r 3"}
  IFS=';' read -ra VS <<< "$V"
  for v in "${VS[@]}"; do
    IFS='|' read -r label envs args <<< "$v"
    # shellcheck disable=SC2086
    bench "perf-$label" "$MS" X=1 $envs -- $args
  done
  if [ -x "$BB/moestream" ]; then
    bench base "$BB/moestream" X=1 -- -p 512 -n 128 -r 3
    bench base-again "$BB/moestream" X=1 -- -p 512 -n 128 -r 3
  fi
  bench perf-again "$MS" X=1 -- -p 512 -n 128 -r 3
fi

ncu_sum() {  # label, binary
  local label=$1 bin=$2
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    "$bin" bench -m "$M4" --backend cuda -p 512 -n 4 -r 1 > /tmp/ncu_$label.csv 2> /tmp/ncu_$label.err
  say "ncu $label rc=$?"
  python3 tools/ncu_table.py /tmp/ncu_$label.csv "$label" >> "$OUT/ncu.txt" 2>&1
}
if want ncu && command -v ncu > /dev/null; then
  ncu_sum perf "$MS"
  [ -x "$BB/moestream" ] && ncu_sum base "$BB/moestream"
fi
if want ncu-gemm && command -v ncu > /dev/null; then
  # The first layer's prompt GEMMs (qkv, o, expert gate/up, expert down): where their time goes.
  timeout 150 ncu --clock-control none -k regex:gemm_q8 -c 4 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis \
    "$MS" bench -m "$M4" --backend cuda -p 512 -n 0 -r 1 > "$OUT/ncu_gemm.txt" 2>&1
  say "ncu gemm rc=$?"
fi
say "done"
