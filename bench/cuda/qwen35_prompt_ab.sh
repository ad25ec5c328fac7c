#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root: where a qwen35moe
# (Qwen3.6-35B-A3B shape) prompt pass spends its time, and an A/B of two
# moestream binaries built on the dev machine and carried (the GPU machine
# has no time to build them inside a small device grant).
#
#   CARRY=.pp36 OUT=dir bench/cuda/qwen35_prompt_ab.sh
#   $CARRY/bin.tgz holds base/moestream, new/moestream, test/test_pp36
#   (the GPU tests of the changed kernels: delta_net, linear, matvec and the
#   qwen35moe backend tests, linked on their own) and lib/ (the shared
#   libraries moestream links that a bare machine may lack).
# Steps, in order of value, each packed into $OUT/qwen35_ab.tgz when done:
#   0. tests: test/test_pp36 (all of its tests)
#   1. gen: the 35B-A3B preset (q4_k) cut to $LAYERS layers (3 of 4 are Gated DeltaNet)
#   2. bench: pp$PP of base and new, alternating, -r $REPS (same call, same file)
#   3. ncu: kernel-time summaries (ncu --clock-control none) of one prompt of
#      $NCU_PP tokens on a 4-layer file, base then new (tools/ncu_table.py)
#   4. long: pp$LONG_PP of base and new
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
CARRY=${CARRY:-.pp36}
OUT=${OUT:-$ROOT/gpu_out}
LAYERS=${LAYERS:-8}
PP=${PP:-8192}
LONG_PP=${LONG_PP:-32768}
NCU_PP=${NCU_PP:-4096}
REPS=${REPS:-3}
mkdir -p "$OUT" /tmp/ab
S=$OUT/summary.txt
START=$(date +%s)
say() { echo "[ab $(($(date +%s) - START))s] $*" | tee -a "$S"; }
pack() { tar -czf "$OUT/qwen35_ab.tgz" -C /tmp/ab . 2>/dev/null; }

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | sed 's/^/device: /' | tee -a "$S"
tar -xzf "$CARRY/bin.tgz" -C /tmp/ab || { say "FAIL unpack"; exit 1; }
export LD_LIBRARY_PATH=/tmp/ab/lib:${LD_LIBRARY_PATH:-}
for b in base new; do /tmp/ab/$b/moestream --version > /dev/null 2>&1 || say "$b: --version rc=$? ($(/tmp/ab/$b/moestream --version 2>&1 | head -2))"; done

if [ -x /tmp/ab/test/test_pp36 ]; then
  timeout 150 /tmp/ab/test/test_pp36 > /tmp/ab/tests.log 2>&1
  say "tests rc=$?: $(grep -E "PASSED|FAILED" /tmp/ab/tests.log | tr '\n' ' ')"
  grep -E "^\[  FAILED" /tmp/ab/tests.log | head -20 | tee -a "$S"
  pack
fi

M=/tmp/q36.gguf
M4=/tmp/q36_4.gguf
say "gen $LAYERS layers"
timeout 120 /tmp/ab/new/moestream gen --arch qwen35moe --preset qwen3.6-35b-a3b --quant q4_k --layers "$LAYERS" \
  -q -o "$M" > /tmp/ab/gen.log 2>&1 || say "FAIL gen"
ls -l "$M" | tee -a "$S"

bench() {  # label binary args...
  local label=$1 bin=$2; shift 2
  timeout 150 "$bin" bench -m "$M" --backend cuda "$@" > /tmp/ab/bench_$label.md 2> /tmp/ab/bench_$label.err
  local rc=$?
  grep -E "^\| " /tmp/ab/bench_$label.md | grep -v -- "---" | sed "s/^/$label: /" | tee -a "$S"
  [ $rc -ne 0 ] && { say "$label rc=$rc"; tail -3 /tmp/ab/bench_$label.err | tee -a "$S"; }
}
say "bench pp$PP"
bench base1 /tmp/ab/base/moestream -p "$PP" -n 0 -r "$REPS"
bench new1 /tmp/ab/new/moestream -p "$PP" -n 0 -r "$REPS"
bench base2 /tmp/ab/base/moestream -p "$PP" -n 0 -r "$REPS"
bench new2 /tmp/ab/new/moestream -p "$PP" -n 0 -r "$REPS"
pack

if command -v ncu > /dev/null; then
  timeout 60 /tmp/ab/new/moestream gen --arch qwen35moe --preset qwen3.6-35b-a3b --quant q4_k --layers 4 -q -o "$M4" \
    > /dev/null 2>&1 || say "FAIL gen4"
  for b in base new; do
    timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      /tmp/ab/$b/moestream bench -m "$M4" --backend cuda -p "$NCU_PP" -n 0 -r 1 > /tmp/ab/ncu_$b.csv 2> /tmp/ab/ncu_$b.err
    say "ncu $b rc=$?"
    python3 tools/ncu_table.py /tmp/ab/ncu_$b.csv "$b pp$NCU_PP 4 layers" > /tmp/ab/ncu_$b.txt 2>&1
    head -40 /tmp/ab/ncu_$b.txt >> "$S"
    pack
  done
else
  say "no ncu on this machine"
fi

say "bench pp$LONG_PP"
bench base_long /tmp/ab/base/moestream -p "$LONG_PP" -n 0 -r 2
bench new_long /tmp/ab/new/moestream -p "$LONG_PP" -n 0 -r 2
pack
cp "$S" /tmp/ab/ && pack
say "done"
