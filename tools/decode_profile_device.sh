#!/usr/bin/env bash
# Decode-step profile and old-vs-new tg128 on the GPU machine, in one call
# (issues #27/#29, helper "decode"): builds `moestream` from each source tar
# given, generates the Qwen3-30B-A3B shape at each type (full and a 4-layer
# copy), then per build: `bench -p 0 -n 128 --step-timing` on the full files
# (tg128 and the GPU time of a step) and on the 4-layer files (the per-layer
# cost is the difference over 44 layers), and an ncu kernel-time table of a
# few decode steps of the 4-layer files.
#
#   OUT=dir BUILDS="old:.old.tar new:.new.tar" TYPES=q4_k,iq4_xs NCU=1 \
#     tools/decode_profile_device.sh          (carry .deps and the tars)
#
# TESTS="label:target:gtest_filter ..." also builds that test target of that
# build and runs it with the filter (one entry per target). REPS (3) repetitions; ALTERNATE=1 runs the builds' benches in turn
# per type (old, new, old, new) so a drift of the machine shows.
set -uo pipefail
cd "$(dirname "$0")/.."
R=$(pwd)
OUT=${OUT:-$R/gpu_out}
W=${WORK:-/tmp/dp}
mkdir -p "$OUT" "$W"
S=$(date +%s)
log() { echo "[dp $(($(date +%s) - S))s] $*" | tee -a "$OUT/log.txt"; }
[ -f tools/device_env.sh ] && source tools/device_env.sh
BUILDS=${BUILDS:-}
TYPES=${TYPES:-q4_k,iq4_xs}
REPS=${REPS:-3}
log "machine: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | head -1); $(nproc) cores"
NB=$(echo $BUILDS | wc -w)
J=$((16 / (NB > 0 ? NB : 1)))
for spec in $BUILDS; do
  (
    l=${spec%%:*}; t=${spec#*:}
    rm -rf "/tmp/src-$l" && mkdir -p "/tmp/src-$l" && tar xf "$t" -C "/tmp/src-$l" || exit 1
    cmake -S "/tmp/src-$l" -B "$W/build-$l" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DMOESTREAM_BENCH=OFF > "$W/cfg-$l.log" 2>&1 || exit 1
    tgt=moestream
    for ts in ${TESTS:-}; do [ "${ts%%:*}" = "$l" ] && { r=${ts#*:}; tgt="$tgt ${r%%:*}"; }; done
    cmake --build "$W/build-$l" --target $tgt -j$J > "$W/build-$l.log" 2>&1
  ) &
done
wait
for spec in $BUILDS; do l=${spec%%:*}; log "build $l: $([ -x "$W/build-$l/moestream" ] && echo ok || (echo FAIL; grep -m5 error "$W/build-$l.log"))"; done
FIRST=${BUILDS%%:*}
MS0=$W/build-$FIRST/moestream
# the tests first: some write multi-GB files of their own to /tmp
for spec in ${TESTS:-}; do
  l=${spec%%:*}; r=${spec#*:}; t=${r%%:*}; f=${r#*:}
  bin=$(find "$W/build-$l" -name "$t" -type f -perm -u+x | head -1)
  timeout "${TEST_TIMEOUT:-200}" "$bin" --gtest_filter="$f" > "$OUT/$t-$l.log" 2>&1
  log "$t $l ($f): rc=$? $(grep -E '^\[  (PASSED|FAILED)|tests ran' "$OUT/$t-$l.log" | tr '\n' ' ')"
done
bench() {  # label model args...
  local l=$1 m=$2; shift 2
  "$W/build-$l/moestream" bench -m "$m" --backend cuda -t 16 "$@" > "$W/b.out" 2> "$W/b.err"
  echo "$l $(basename "$m") $* : $(grep -E '^\| qwen3moe' "$W/b.out" | cut -d'|' -f5,6 | tr '\n' ' ') $(grep -iE 'gpu|step' "$W/b.err" | tr '\n' ' ')" | tee -a "$OUT/bench.txt"
}
# one type at a time (the 64 GB disk holds about three of these files)
IFS=, read -ra TS <<< "$TYPES"
for t in "${TS[@]}"; do
  "$MS0" gen --arch qwen3moe --preset qwen3-30b-a3b --quant "$t" -t 16 -q -o "$W/$t.gguf" > "$W/gen-$t.log" 2>&1
  four=""
  [[ ",${FOUR:-$TYPES}," == *",$t,"* ]] && four=1 &&
    "$MS0" gen --arch qwen3moe --preset qwen3-30b-a3b --quant "$t" --layers 4 -t 16 -q -o "$W/$t-4l.gguf" >> "$W/gen-$t.log" 2>&1
  log "gen $t: $(du -h "$W/$t.gguf" | cut -f1)"
  for round in 1 2; do
    for spec in $BUILDS; do
      l=${spec%%:*}
      [ "$round" = 2 ] && [ -z "${ALTERNATE:-}" ] && continue
      bench "$l" "$W/$t.gguf" -p 0 -n 128 -r "$REPS" --step-timing
      [ "$round" = 1 ] && [ -n "$four" ] && bench "$l" "$W/$t-4l.gguf" -p 0 -n 128 -r "$REPS" --step-timing
    done
  done
  rm -f "$W/$t.gguf"
done
if [ -n "${NCU:-}" ] && command -v ncu > /dev/null; then
  IFS=, read -ra NT <<< "${NCU_TYPES:-$TYPES}"
  for t in "${NT[@]}"; do
    for spec in $BUILDS; do
      l=${spec%%:*}
      [[ " $NCU " == *" $l "* || "$NCU" = 1 ]] || continue
      timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        "$W/build-$l/moestream" bench -m "$W/$t-4l.gguf" --backend cuda -p 0 -n 4 -r 1 > "$W/ncu-$l-$t.csv" 2> "$W/ncu-$l-$t.err"
      python3 tools/ncu_table.py "$W/ncu-$l-$t.csv" "$l $t (4 layers, 4+warm-up decode steps)" >> "$OUT/ncu.txt" 2>&1
      log "ncu $l $t rc=$?"
    done
  done
fi
tar czf "$OUT/logs.tgz" -C "$W" --exclude='*.gguf' --exclude='build-*' . 2> /dev/null
log done
