#!/usr/bin/env bash
# Tiered experts on the GPU machine in one call: build (sm_90), the hybrid GPU
# tests, then on the synthetic Qwen3-30B-A3B Q4_K model (16.1 GiB): greedy 64
# tokens at several VRAM budgets against the all-resident run, and
# `moestream bench` at full / 10.5G / 8G / 1.5G (and 8G with --router-skew 1.0).
# Logs and tables under $OUT; a failing step does not stop the next.
#
#   OUT=dir tools/hybrid_device.sh [steps]   steps: build,tests,alltests,greedy,bench,skew (default: all)
#   carry: .deps (tools/make_device_deps.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
mkdir -p "$OUT"
STEPS=${1:-build,tests,alltests,greedy,bench,skew}
BUILD=$ROOT/build-gpu
MS=$BUILD/moestream
MODEL=${BENCH_MODEL:-/tmp/q.gguf}
SKEW_MODEL=/tmp/q_skew.gguf
START=$(date +%s)
say() { echo "[hybrid $(($(date +%s) - START))s] $*" | tee -a "$OUT/summary.txt"; }
want() { [[ ",$STEPS," == *",$1,"* ]]; }
[ -f tools/device_env.sh ] && source tools/device_env.sh
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee -a "$OUT/summary.txt"

if want build; then
  say "build (sm_90)"
  GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DMOESTREAM_CUDA=ON -DMOESTREAM_BENCH=OFF > "$OUT/configure.log" 2>&1 || { say "FAIL configure"; exit 1; }
  timeout 480 cmake --build "$BUILD" -j16 > "$OUT/build.log" 2>&1 || { say "FAIL build"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$OUT/summary.txt"; exit 1; }
  say "build ok"
fi

if want tests; then
  say "hybrid GPU tests"
  timeout 300 "$BUILD/test_cuda" --gtest_filter='*Hybrid*' > "$OUT/hybrid_tests.log" 2>&1
  say "hybrid tests rc=$?"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$OUT/hybrid_tests.log" | tail -12 | tee -a "$OUT/summary.txt"
  grep -E "Failure|Expected|which is|step .* picks" "$OUT/hybrid_tests.log" | head -20 | tee -a "$OUT/summary.txt"
fi

if want alltests; then
  say "ctest -L gpu"
  timeout 420 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 300 -j4 > "$OUT/ctest_gpu.log" 2>&1
  grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log" | tee -a "$OUT/summary.txt"
  sed -n '/The following tests FAILED/,$p' "$OUT/ctest_gpu.log" | head -20 | tee -a "$OUT/summary.txt"
fi

if want greedy || want bench; then
  if [ ! -f "$MODEL" ]; then
    say "gen $MODEL"
    timeout 300 "$MS" gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k -o "$MODEL" > "$OUT/gen.log" 2>&1 || say "FAIL gen"
    "$MS" inspect "$MODEL" --vram 8G --ctx 4096 --no-tensors > "$OUT/inspect.txt" 2>&1
  fi
fi

if want greedy; then
  # Free-running greedy 64 from the same prompt: every budget must print the
  # all-resident run's text.
  run_text() { timeout 200 "$MS" run -m "$MODEL" -p "The history of the" -n 64 --temp 0 --ctx 512 -q "$@" 2>>"$OUT/greedy.err"; }
  run_text --vram full > "$OUT/greedy_full.txt"
  for b in 10.5G 8G 4G 1.6G; do
    run_text --vram "$b" > "$OUT/greedy_$b.txt"
    if cmp -s "$OUT/greedy_full.txt" "$OUT/greedy_$b.txt"; then say "greedy 64 at --vram $b: identical to full";
    else say "greedy 64 at --vram $b: DIFFERS from full"; fi
  done
  for p in lru lfu-decay pinned+adaptive; do
    run_text --vram 8G --policy "$p" > "$OUT/greedy_8G_$p.txt"
    cmp -s "$OUT/greedy_full.txt" "$OUT/greedy_8G_$p.txt" && say "greedy 64 at 8G policy $p: identical" || say "greedy 64 at 8G policy $p: DIFFERS"
  done
  timeout 120 "$MS" run -m "$MODEL" -p "The history of the" -n 32 --temp 0 --ctx 512 --vram 8G 2>&1 >/dev/null | tail -8 | tee -a "$OUT/summary.txt"
  timeout 60 "$MS" run -m "$MODEL" -p "x" -n 4 --vram 1G > /dev/null 2> "$OUT/too_small.txt"; say "vram 1G rc=$? ($(tail -1 "$OUT/too_small.txt"))"
fi

bench_one() {  # name, args...
  local name=$1; shift
  say "bench $name: $*"
  timeout 400 "$MS" bench -m "$MODEL" -p 512 -n 128 -r 3 --backend cuda "$@" --json -o "$OUT/bench_$name.json" > /dev/null 2> "$OUT/bench_$name.err"
  say "rc=$?"
  python3 - "$OUT/bench_$name.json" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
e = j.get("experts", {})
r = {x["test"]: (x["tps_mean"], x["tps_sd"]) for x in j["results"]}
line = " | ".join(f"{k} {v[0]:.1f} ± {v[1]:.1f}" for k, v in r.items())
if e.get("hybrid"):
    p = e["pairs"]; tot = max(1, p["resident"] + p["streamed"] + p["host"])
    line += (f" | slots {e['cache_slots']}/{e['experts_total']} hit {100*p['hit_rate']:.1f}% cpu {100*p['host']/tot:.1f}%"
             f" stream {100*p['streamed']/tot:.1f}% h2d {e['h2d_gbps']:.1f} GB/s | pcie {e['measured']['pcie_gbps']:.1f}"
             f" cpu {e['measured']['cpu_gbps']:.1f} GB/s | {e['host_pin']}")
print(line)
EOF
}

if want bench; then
  bench_one full --vram full
  for b in 10.5G 8G 1.5G; do bench_one "$b" --vram "$b"; done
fi

if want skew; then
  if [ ! -f "$SKEW_MODEL" ]; then
    rm -f "$MODEL"  # disk: one 16 GiB model at a time
    say "gen $SKEW_MODEL (--router-skew 1.0)"
    timeout 300 "$MS" gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k --router-skew 1.0 -o "$SKEW_MODEL" > "$OUT/gen_skew.log" 2>&1 || say "FAIL gen skew"
  fi
  MODEL=$SKEW_MODEL
  bench_one skew_full --vram full
  bench_one skew_8G --vram 8G
fi
say "done"
