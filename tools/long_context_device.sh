#!/usr/bin/env bash
# Issue #29's long-context rows on the GPU machine, moestream and llama.cpp's
# llama-bench on the same file in the same call: pp at PP tokens (empty
# cache) and tg128 at depth DEPTH, at --vram full and each tiered budget.
# llama.cpp runs -ngl 99 -fa 1, and at a budget --n-cpu-moe N with N the
# fewest CPU layers whose VRAM use fits (tools/quant_types_rows.py ncmoe),
# counting its KV cache at DEPTH+128 tokens and compute buffers (OVERHEAD_GIB)
# as moestream's budget counts its own. Peak VRAM of each moestream bench
# call is sampled with nvidia-smi.
#
#   OUT=dir MS=build-gpu/moestream LLAMA_BUILD=/tmp/llama-build \
#     tools/long_context_device.sh MODEL.gguf
#
# Settings: BUDGETS (10.5G,8G), PP (8192,32768), DEPTH (32768), REPS (2),
# THREADS (16), OVERHEAD_GIB (3.5: f16 K/V of Qwen3-30B-A3B at 32.9k tokens,
# 3.0 GiB, plus ~0.5 GiB of buffers), LLAMA_LM (llama-bench's load mode for
# the budget rows: none, its pinned buffers, its faster prompt mode),
# LLAMA_PP_BUDGETS (llama-bench's prompt lengths at the budgets; default PP:
# the issue's targets there are moestream's own full-VRAM figure, so fewer
# lengths save the device's time).
# llama-bench is built by tools/llamacpp_sweep.sh (LLAMA_BUILD_ONLY=1).
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: tools/long_context_device.sh MODEL.gguf}
OUT=${OUT:-$(pwd)/gpu_out}
WORK=${WORK:-/tmp/lc}  # every file; $OUT gets lc_log.txt and lc.tgz after each step (the device tool returns few files)
mkdir -p "$OUT" "$WORK"
MS=${MS:-build-gpu/moestream}
LB=${LLAMA_BUILD:-/tmp/llama-build}/bin/llama-bench
BUDGETS=${BUDGETS:-10.5G,8G}
PP=${PP:-8192,32768}
DEPTH=${DEPTH:-32768}
REPS=${REPS:-2}
THREADS=${THREADS:-16}
OVERHEAD_GIB=${OVERHEAD_GIB:-3.5}
LLAMA_LM=${LLAMA_LM:-none}
LLAMA_PP_BUDGETS=${LLAMA_PP_BUDGETS:-$PP}
START=$(date +%s)
say() { echo "[lc $(($(date +%s) - START))s] $*" | tee -a "$WORK/lc_log.txt"; pack; }
pack() { cp "$WORK/lc_log.txt" "$OUT/" 2> /dev/null; tar czf "$OUT/lc.tgz" -C "$WORK" . 2> /dev/null; }
[ -f tools/device_env.sh ] && source tools/device_env.sh

# A step is skipped when its table already holds rows (resumable: run it
# again on the same warm machine and it goes on where a call's limit stopped it).
done_md() { grep -qE "^\| .*[0-9]+\.[0-9]+ ± " "$1" 2> /dev/null && grep -qE "^build: |^floor tok/s" "$1"; }

# Peak GPU memory in use while a command runs (MiB, whole device).
with_peak_vram() {  # label cmd...
  local label=$1; shift
  local f=$WORK/lc_vram_$label.txt
  (while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | head -1; sleep 0.5; done) > "$f" &
  local sampler=$!
  "$@"
  local rc=$?
  kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null
  say "$label: peak VRAM $(sort -n "$f" | tail -1) MiB (device-wide), rc=$rc"
  return $rc
}

say "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); model $(basename "$MODEL")"
# ---- moestream: prompts from an empty cache, then decode at depth.
done_md "$WORK/lc_ms_pp.md" || with_peak_vram ms_pp timeout 400 "$MS" bench -m "$MODEL" -p "$PP" -n 0 -r "$REPS" -t "$THREADS" --backend cuda \
  --vram "full,$BUDGETS" -o "$WORK/lc_ms_pp.md" > /dev/null 2> "$WORK/lc_ms_pp.err" || say "ms pp failed: $(tail -2 "$WORK/lc_ms_pp.err")"
done_md "$WORK/lc_ms_tg.md" || with_peak_vram ms_tg timeout 400 "$MS" bench -m "$MODEL" -p 0 -n 128 -d "$DEPTH" -r "$REPS" -t "$THREADS" --backend cuda \
  --vram "full,$BUDGETS" -o "$WORK/lc_ms_tg.md" > /dev/null 2> "$WORK/lc_ms_tg.err" || say "ms tg failed: $(tail -2 "$WORK/lc_ms_tg.err")"
grep -h "moestream: " "$WORK"/lc_ms_*.err | grep -iE "pass|context" | sort -u | head -8 >> "$WORK/lc_log.txt"
grep -hE "^\| " "$WORK"/lc_ms_*.md 2> /dev/null  # (printed now: the call may end before llama.cpp's rows)
pack

# ---- llama.cpp: the same tests; N per budget from the file's layout.
[ -x "$LB" ] || { say "no llama-bench at $LB"; exit 1; }
"$MS" inspect --json "$MODEL" > "$WORK/lc_inspect.json" 2> /dev/null
python3 tools/quant_types_rows.py ncmoe "$WORK/lc_inspect.json" "$BUDGETS" "$OVERHEAD_GIB" > "$WORK/lc_ncmoe.txt" \
  2> "$WORK/lc_ncmoe_arith.txt" || { say "ncmoe arithmetic failed"; exit 1; }
say "llama.cpp --n-cpu-moe for $BUDGETS: $(cat "$WORK/lc_ncmoe.txt")"
llama() {  # tag args...
  local tag=$1; shift
  done_md "$WORK/lc_llama_$tag.md" && return 0
  timeout 500 "$LB" -m "$MODEL" -ngl 99 -fa 1 -t "$THREADS" -r "$REPS" -o md "$@" > "$WORK/lc_llama_$tag.md" \
    2> "$WORK/lc_llama_$tag.err" || say "llama-bench $tag failed: $(tail -2 "$WORK/lc_llama_$tag.err")"
}
llama pp_full -ncmoe 0 -p "$PP" -n 0
llama tg_full -ncmoe 0 -p 0 -n 128 -d "$DEPTH"
llama pp_budgets -ncmoe "$(cat "$WORK/lc_ncmoe.txt")" -lm "$LLAMA_LM" -p "$LLAMA_PP_BUDGETS" -n 0
llama tg_budgets -ncmoe "$(cat "$WORK/lc_ncmoe.txt")" -lm "$LLAMA_LM" -p 0 -n 128 -d "$DEPTH"
say "done"
cat "$WORK"/lc_ms_*.md "$WORK"/lc_llama_*.md 2> /dev/null | grep -E "^\|" | grep -vE "^\|[ -]*\|[ -]*\|" | head -60
