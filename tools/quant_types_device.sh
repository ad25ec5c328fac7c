#!/usr/bin/env bash
# Issue #27's speed check on the GPU machine, in one call: moestream against
# llama.cpp's llama-bench on the same files, the Qwen3-30B-A3B shape at the
# quantizer's Q3_K_M, IQ4_XS and Q2_K mixes (`moestream gen`), at --vram full
# and each tiered budget. Prints one table (tools/quant_types_rows.py table).
#
#   OUT=dir tools/quant_types_device.sh
#
# Steps, as they overlap:
#  - builds, on the cores the benches do not use (BUILD_CPUS): moestream's
#    `moestream` target for sm_90 (from SRC_TAR, a `git archive` of the commit
#    measured, else the working tree) and llama-bench (tools/llamacpp_sweep.sh,
#    from .llama/llama-src.tar.xz), in parallel;
#  - gen of every type's file on BENCH_CPUS meanwhile (MS_CPU_BIN: a CPU-only
#    moestream carried along, so gen need not wait for the CUDA build);
#  - per type: `moestream bench -p 512 -n 128 -r 2 --vram full,BUDGETS`, then
#    llama-bench (-ngl 99 -fa 1, -p 512 -n 128 -r 2) at --n-cpu-moe 0 and at
#    the N that makes llama.cpp's VRAM use match each budget (from `moestream
#    inspect --json`: tools/quant_types_rows.py ncmoe), in the load mode that
#    gave llama.cpp its better tg128 at that budget in bench/results/hybrid_bench.md
#    run 16 (mmap at full, 10.5G and 1.5G; none, its pinned buffers, at 8G).
#    Both pinned to BENCH_CPUS with THREADS threads, one GPU.
# Resumable: what is done is kept under WORK (markers, JSON); run it again on
# the same (warm) machine and it goes on where it stopped. The table is
# printed from whatever rows exist.
#
# Settings (environment, as the other device scripts): TYPES (q3_k_m,iq4_xs,q2_k),
# BUDGETS (10.5G,8G,1.5G), BENCH_CPUS (0-15), BUILD_CPUS (16-<last core>; all
# cores when the machine has 16 or fewer), THREADS (16), WORK (/tmp/qt),
# OVERHEAD_GIB (0.4: llama.cpp's KV cache and compute buffers at -p 512 -n 128),
# KEEP_FILES=1 (do not delete a type's file after its rows), DEADLINE (seconds
# after start past which no new bench starts; default 540),
# DRY_RUN=1 (here, without a GPU: `--backend cpu`, tiny preset, MS_BIN and
# LLAMA_BUILD given, no builds). carry: .deps, .llama (and MS_CPU_BIN's folder).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
WORK=${WORK:-/tmp/qt}
mkdir -p "$OUT" "$WORK"
START=$(date +%s)
say() { echo "[qt $(($(date +%s) - START))s] $*" | tee -a "$WORK/log.txt"; }
TYPES=${TYPES:-q3_k_m,iq4_xs,q2_k}
BUDGETS=${BUDGETS:-10.5G,8G,1.5G}
THREADS=${THREADS:-16}
NCPU=$(nproc)
BENCH_CPUS=${BENCH_CPUS:-0-$((THREADS - 1))}
if [ "$NCPU" -gt "$THREADS" ]; then BUILD_CPUS=${BUILD_CPUS:-$THREADS-$((NCPU - 1))}; else BUILD_CPUS=${BUILD_CPUS:-0-$((NCPU - 1))}; fi
DEADLINE=${DEADLINE:-540}
OVERHEAD_GIB=${OVERHEAD_GIB:-0.4}
DRY=${DRY_RUN:-}
PRESET=${GEN_PRESET:-qwen3-30b-a3b}; BACKEND=cuda
[ -n "$DRY" ] && { PRESET=tiny; BACKEND=cpu; }
export LLAMA_BUILD=${LLAMA_BUILD:-/tmp/llama-build}
MS=${MS_BIN:-$ROOT/build-qbench-gpu/moestream}
GEN_MS=${MS_CPU_BIN:-$MS}
[ -f tools/device_env.sh ] && source tools/device_env.sh
if command -v taskset > /dev/null; then on_bench() { taskset -c "$BENCH_CPUS" "$@"; }; on_build() { taskset -c "$BUILD_CPUS" "$@"; }
else on_bench() { "$@"; }; on_build() { "$@"; }; fi  # (no taskset: builds and benches share the cores)
time_left() { [ $(($(date +%s) - START)) -lt "$DEADLINE" ]; }
IFS=, read -r -a TYPE_LIST <<< "$TYPES"

# ---------------------------------------------------------------- machine
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  lscpu 2>/dev/null | grep -E "^(Model name|CPU\(s\)|NUMA node)" || true
  echo "benches on cores $BENCH_CPUS ($THREADS threads), builds on $BUILD_CPUS; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}"
} > "$WORK/machine.txt" 2>&1
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
say "machine: $(head -1 "$WORK/machine.txt")"

# ---------------------------------------------------------------- builds
ms_build() {
  local src=$ROOT
  if [ -n "${SRC_TAR:-}" ]; then
    src=/tmp/qt-src; rm -rf "$src"; mkdir -p "$src" && tar xf "$SRC_TAR" -C "$src" || return 1
  fi
  local gen=(); command -v ninja > /dev/null && gen=(-G Ninja)
  cmake -S "$src" -B "$ROOT/build-qbench-gpu" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DMOESTREAM_CUDA=ON -DMOESTREAM_BENCH=OFF -DMOESTREAM_TESTS=OFF > "$WORK/ms_configure.log" 2>&1 &&
    on_build timeout 400 cmake --build "$ROOT/build-qbench-gpu" --target moestream -j"$((NCPU > THREADS ? NCPU - THREADS : NCPU))" \
      > "$WORK/ms_build.log" 2>&1 && touch "$WORK/ms.built"
}
MS_PID=; LLAMA_PID=
if [ -z "$DRY" ]; then
  if [ ! -f "$WORK/ms.built" ] && [ -z "${MS_BIN:-}" ]; then ms_build & MS_PID=$!; fi
  if [ ! -x "$LLAMA_BUILD/bin/llama-bench" ]; then
    OUT=$WORK LLAMA_BUILD_ONLY=1 LLAMA_BUILD_TIMEOUT=${LLAMA_BUILD_TIMEOUT:-420} on_build \
      bash tools/llamacpp_sweep.sh none > "$WORK/llama_build_step.log" 2>&1 & LLAMA_PID=$!
  fi
fi
ms_ready() {  # (in a subshell, such as the gens', it waits by polling)
  if [ -n "$MS_PID" ] && [ "$BASHPID" != "$$" ]; then
    while [ ! -f "$WORK/ms.built" ] && kill -0 "$MS_PID" 2> /dev/null; do sleep 2; done
  elif [ -n "$MS_PID" ]; then
    wait "$MS_PID"; local rc=$?; MS_PID=
    say "moestream build rc=$rc"
    [ $rc -eq 0 ] || { grep -E "error" "$WORK/ms_build.log" | head -20; tail -5 "$WORK/ms_configure.log"; }
  fi
  [ -x "$MS" ]
}
llama_ready() {  # $1=wait: block until the build ends
  if [ -n "$LLAMA_PID" ]; then
    if [ "${1:-}" = wait ] || ! kill -0 "$LLAMA_PID" 2> /dev/null; then
      wait "$LLAMA_PID"; local rc=$?; LLAMA_PID=
      say "llama-bench build rc=$rc"; [ $rc -eq 0 ] || tail -5 "$WORK/llama_build_step.log"
    fi
  fi
  [ -z "$LLAMA_PID" ] && [ -x "$LLAMA_BUILD/bin/llama-bench" ]  # (not while its link may still be writing it)
}

# ---------------------------------------------------------------- files
file_of() { echo "$WORK/$1.gguf"; }
gen_file() {
  local t=$1 f; f=$(file_of "$t")
  [ -f "$f" ] || [ -f "$WORK/$t.llama.done" ] && return 0
  [ "$GEN_MS" = "$MS" ] && ! ms_ready && return 1
  local free_gb; free_gb=$(df -BG --output=avail "$WORK" | tail -1 | tr -dc 0-9)
  [ "$free_gb" -lt 20 ] && { say "gen $t: only ${free_gb} GB free"; return 1; }
  on_bench timeout 300 "$GEN_MS" gen --arch qwen3moe --preset "$PRESET" --quant "$t" -t "$THREADS" -q -o "$f.part" \
    > "$WORK/gen_$t.log" 2>&1 && mv "$f.part" "$f" || { say "gen $t failed: $(tail -1 "$WORK/gen_$t.log")"; rm -f "$f.part"; return 1; }
  say "gen $t: $(du -h "$f" | cut -f1)"
}
# Every file up front while the builds run, when the disk holds them all
# (about 40 GB for the three); else each just before its rows.
free_gb=$(df -BG --output=avail "$WORK" | tail -1 | tr -dc 0-9)
GEN_PID=
if [ "$free_gb" -gt 60 ]; then
  (for t in "${TYPE_LIST[@]}"; do gen_file "$t"; done) & GEN_PID=$!
fi
gens_done() { [ -z "$GEN_PID" ] || { wait "$GEN_PID"; GEN_PID=; }; }

# ---------------------------------------------------------------- rows
ms_rows() {
  local t=$1 f; f=$(file_of "$t")
  [ -f "$WORK/$t.ms.done" ] && return 0
  gens_done; gen_file "$t" || return 1
  ms_ready || return 1
  time_left || { say "deadline: no moestream rows for $t"; return 1; }
  say "moestream bench $t${DRY:+  (dry run: default budget only)}"
  on_bench timeout 300 "$MS" bench -m "$f" -p 512 -n 128 -r 2 --backend "$BACKEND" -t "$THREADS" \
    $([ -z "$DRY" ] && echo "--vram full,$BUDGETS") --json -o "$WORK/${t}_ms.json" > /dev/null 2> "$WORK/${t}_ms.err" ||
    { say "moestream bench $t failed: $(tail -2 "$WORK/${t}_ms.err")"; return 1; }
  touch "$WORK/$t.ms.done"
}
llama_rows() {
  local t=$1 f; f=$(file_of "$t")
  [ -f "$WORK/$t.llama.done" ] && return 0
  [ -f "$f" ] || return 1
  time_left || { say "deadline: no llama.cpp rows for $t"; return 1; }
  "$MS" inspect --json "$f" > "$WORK/${t}_inspect.json" 2> "$WORK/${t}_inspect.err" || { say "inspect $t failed"; return 1; }
  python3 tools/quant_types_rows.py ncmoe "$WORK/${t}_inspect.json" "$BUDGETS" "$OVERHEAD_GIB" \
    > "$WORK/${t}_ncmoe.txt" 2> "$WORK/${t}_ncmoe_arith.txt" || return 1
  local ns; IFS=, read -r -a ns < "$WORK/${t}_ncmoe.txt"
  IFS=, read -r -a bs <<< "$BUDGETS"
  # The load mode per budget (see the header); the list of N per mode.
  local mmap="0" none="" i
  echo "full 0 mmap" > "$WORK/${t}_llama_plan.txt"
  for i in "${!bs[@]}"; do
    if [ "${bs[$i]}" = 8G ]; then none+="${none:+,}${ns[$i]}"; echo "${bs[$i]} ${ns[$i]} none"
    else mmap+=",${ns[$i]}"; echo "${bs[$i]} ${ns[$i]} mmap"; fi >> "$WORK/${t}_llama_plan.txt"
  done
  say "llama-bench $t: mmap at -ncmoe $mmap${none:+, none at -ncmoe $none}"
  for mode in mmap none; do
    local list=$mmap; [ $mode = none ] && list=$none
    [ -n "$list" ] || continue
    OUT=$WORK LLAMA_TAG="${t}_$mode" LLAMA_FORMAT=json LLAMA_LOAD_MODE=$mode LLAMA_ARGS="-t $THREADS" \
      on_bench bash tools/llamacpp_sweep.sh "$f" "$list" > /dev/null 2>> "$WORK/llama_run.err"
    # llamacpp_sweep.sh names it llama_bench_TAG.json; the table reads TYPE_llama_MODE.json.
    mv -f "$WORK/llama_bench_${t}_$mode.json" "$WORK/${t}_llama_$mode.json" 2> /dev/null
    python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$WORK/${t}_llama_$mode.json" 2> /dev/null ||
      { say "llama-bench $t $mode: no result ($(tail -2 "$WORK/llama_bench_${t}_$mode.err" 2> /dev/null))"; return 1; }
  done
  touch "$WORK/$t.llama.done"
}
finish_type() {  # the file goes once both sets of rows exist (64 GiB disk on the one-GPU machine)
  local t=$1
  [ -f "$WORK/$t.ms.done" ] && [ -f "$WORK/$t.llama.done" ] && [ -z "${KEEP_FILES:-}" ] && rm -f "$(file_of "$t")"
  return 0
}
publish() {  # what comes back: the table, the logs, the raw JSON (at most 8 files in $OUT)
  python3 tools/quant_types_rows.py table "$WORK" "$TYPES" "$BUDGETS" > "$WORK/table.md" 2> "$WORK/table.err"
  cp "$WORK/table.md" "$WORK/machine.txt" "$WORK/log.txt" "$OUT/" 2> /dev/null
  (cd "$WORK" && tar czf "$OUT/qt_json.tgz" ./*.json ./*.txt ./*.err ./*.log 2> /dev/null)
}

if [ -n "$DRY" ]; then  # --vram and --n-cpu-moe need the GPU: rows at full only, the N still computed
  for t in "${TYPE_LIST[@]}"; do ms_rows "$t"; llama_rows "$t"; finish_type "$t"; done
else
  # moestream rows first, llama.cpp's as soon as its build is there; both on the one GPU in turn.
  for t in "${TYPE_LIST[@]}"; do
    ms_rows "$t"
    for u in "${TYPE_LIST[@]}"; do
      [ -f "$WORK/$u.ms.done" ] && llama_ready && { llama_rows "$u"; finish_type "$u"; }
    done
    publish
  done
  if llama_ready wait; then
    for t in "${TYPE_LIST[@]}"; do llama_rows "$t"; finish_type "$t"; publish; done
  fi
fi
[ -n "$MS_PID" ] && wait "$MS_PID"
publish
say "done"
for t in "${TYPE_LIST[@]}"; do [ -f "$WORK/${t}_ncmoe_arith.txt" ] && sed "s/^/$t /" "$WORK/${t}_ncmoe_arith.txt"; done
cat "$WORK/table.md"
