#!/usr/bin/env bash
# The GPU machine's rows for issues #29 and #27 over several calls on one warm
# machine: each call does the next steps until DEADLINE seconds have passed,
# then exits; call it again (within the machine's idle window) to go on.
# What is done is kept under WORK (markers); $OUT gets rows.tgz and log.txt.
#
#   OUT=dir tools/issue_rows_device.sh            (carry .deps, .llama, .llamaconv)
#
# Steps, in order:
#   build   moestream (sm_90, build-rows/) on half the cores while llama.cpp's
#           llama-bench and llama-quantize build on the other half
#   q30     gen Qwen3-30B-A3B Q4_K; tools/long_context_device.sh on it
#           (full, 10.5G, 8G)
#   q36     gen Qwen3.6-35B-A3B Q4_K; tools/long_context_device.sh (full, 12G, 8G)
#   qt      tools/quant_types_device.sh (Q3_K_M, IQ4_XS, Q2_K at full, 10.5G, 8G, 1.5G)
#   parity  tools/hf_parity.py on the CUDA backend (its prompts include ones
#           longer than an attention tile)
#   files   tools/llamacpp_files.sh run with QUANT=1: llama.cpp-converted tiny
#           checkpoints requantized by llama-quantize to every type (carry .llamaconv)
#   oss     gen gpt-oss-20b (mxfp4 experts); moestream bench (pp512, tg128) at
#           full and at budgets holding ~60% and ~30% of the experts, beside
#           llama-bench -ngl 99 -fa 1 --n-cpu-moe N (tools/long_context_device.sh,
#           N from the same budgets); rows in oss_rows.md (for bench/results/gpt_oss.md)
# STEPS=... picks a subset (comma list).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
WORK=${WORK:-/tmp/rows}
STEPS=${STEPS:-build,parity,q30,q36,qt,files,oss}
DEADLINE=${DEADLINE:-560}
mkdir -p "$OUT" "$WORK"
START=$(date +%s)
NCPU=$(nproc)
HALF=$((NCPU / 2))
MS=${MS:-$ROOT/build-rows/moestream}  # MS=path: a moestream built already (skips the build)
export LLAMA_BUILD=${LLAMA_BUILD:-/tmp/llama-build}
[ -f tools/device_env.sh ] && source tools/device_env.sh
pack() { cp "$WORK/log.txt" "$OUT/" 2> /dev/null; tar czf "$OUT/rows.tgz" -C "$WORK" --exclude='*.gguf' --exclude='*.part' \
  --exclude='./hf' --exclude='*.safetensors' . 2> /dev/null; }
say() { echo "[rows $(($(date +%s) - START))s] $*" | tee -a "$WORK/log.txt"; pack; }
left() { echo $((DEADLINE - ($(date +%s) - START))); }
want() { [[ ",$STEPS," == *",$1,"* ]] && [ ! -f "$WORK/$1.done" ]; }

say "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1); $NCPU cores; disk free $(df -BG --output=avail /tmp | tail -1)"

# llama.cpp builds detached (setsid): it goes on across calls while the
# machine stays warm; llama_build.rc says when it has ended.
wait_llama() {
  while [ ! -f "$WORK/llama_build.rc" ] && [ "$(left)" -gt 30 ]; do sleep 5; done
  [ "$(cat "$WORK/llama_build.rc" 2> /dev/null)" = 0 ]
}
if want build; then
  if [ ! -f "$WORK/llama_build.started" ]; then
    touch "$WORK/llama_build.started"
    setsid nohup bash -c "mkdir -p /tmp/llama-src && tar xJf .llama/llama-src.tar.xz -C /tmp/llama-src &&
      cmake -S /tmp/llama-src -B '$LLAMA_BUILD' -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF > '$WORK/llama_cfg.log' 2>&1 &&
      taskset -c $HALF-$((NCPU - 1)) cmake --build '$LLAMA_BUILD' --target llama-bench llama-quantize -j$HALF \
        > '$WORK/llama_build.log' 2>&1; echo \$? > '$WORK/llama_build.rc'; [ -f '$WORK/llama_build.rc' ] || echo 9 > '$WORK/llama_build.rc'" \
      > "$WORK/llama_step.log" 2>&1 < /dev/null &
  fi
  if [ ! -x "$MS" ]; then
    SRC=.
    if [ -n "${SRC_TAR:-}" ]; then rm -rf /tmp/ms-src && mkdir -p /tmp/ms-src && tar xf "$SRC_TAR" -C /tmp/ms-src && SRC=/tmp/ms-src; fi
    cmake -S "$SRC" -B build-rows -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DMOESTREAM_BENCH=OFF \
      > "$WORK/ms_cfg.log" 2>&1 || { rm -rf build-rows; cmake -S "$SRC" -B build-rows -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DMOESTREAM_BENCH=OFF > "$WORK/ms_cfg.log" 2>&1; }
    taskset -c "0-$((HALF - 1))" cmake --build build-rows --target moestream -j"$HALF" > "$WORK/ms_build.log" 2>&1
    say "moestream build rc=$? ($($MS version 2> /dev/null | head -1))"
    grep -E "error" "$WORK/ms_build.log" | head -5
  fi
  # the first file while llama.cpp still builds
  [ -f "$WORK/q30.gguf" ] || { timeout 300 taskset -c "0-$((HALF - 1))" "$MS" gen --arch qwen3moe --preset qwen3-30b-a3b \
    --quant q4_k -t "$HALF" -q -o "$WORK/q30.gguf.part" > "$WORK/gen_q30.log" 2>&1 && mv "$WORK/q30.gguf.part" "$WORK/q30.gguf"; }
  say "gen q30: $(du -h "$WORK/q30.gguf" 2> /dev/null | cut -f1)"
  [ -x "$MS" ] && [ -f "$WORK/q30.gguf" ] && touch "$WORK/build.done"
fi

lc() {  # tag model budgets
  local tag=$1 model=$2 budgets=$3
  wait_llama || { say "llama.cpp build not ready (rc $(cat "$WORK/llama_build.rc" 2> /dev/null)): $(tail -3 "$WORK/llama_build.log" "$WORK/llama_cfg.log" "$WORK/llama_step.log" 2> /dev/null | tr '\n' ' ')"; return 1; }
  OUT=$WORK/lc_$tag WORK=$WORK/lc_$tag MS=$MS BUDGETS=$budgets REPS=${REPS:-2} \
    timeout "$(left)" bash tools/long_context_device.sh "$model" > "$WORK/lc_$tag.stdout" 2>&1
  grep -q "^\[lc .*\] done" "$WORK/lc_$tag/lc_log.txt" 2> /dev/null
}
if want parity && [ "$(left)" -gt 120 ]; then
  timeout "$(left)" python3 tools/hf_parity.py --moestream "$MS" --out "$WORK/hf" --backend cuda --models qwen3moe,qwen35moe,mixtral \
    > "$WORK/parity.stdout" 2>&1 && touch "$WORK/parity.done"
  cp "$WORK/hf/parity.md" "$WORK/parity.md" 2> /dev/null; touch "$WORK/parity.done"
  say "parity rc: $(tail -2 "$WORK/parity.stdout" | tr '\n' ' ')"
fi
if want q30 && [ "$(left)" -gt 60 ]; then
  lc q30 "$WORK/q30.gguf" 10.5G,8G && { touch "$WORK/q30.done"; rm -f "$WORK/q30.gguf"; }
  say "q30 rows: $(tail -1 "$WORK/lc_q30/lc_log.txt")"
fi
if want q36 && [ "$(left)" -gt 90 ]; then
  [ -f "$WORK/q36.gguf" ] || { timeout 300 "$MS" gen --arch qwen35moe --preset qwen3.6-35b-a3b --quant q4_k -t "$NCPU" -q \
    -o "$WORK/q36.gguf.part" > "$WORK/gen_q36.log" 2>&1 && mv "$WORK/q36.gguf.part" "$WORK/q36.gguf"; }
  say "gen q36: $(du -h "$WORK/q36.gguf" 2> /dev/null | cut -f1)"
  [ "$(left)" -gt 60 ] && lc q36 "$WORK/q36.gguf" 12G,8G && { touch "$WORK/q36.done"; rm -f "$WORK/q36.gguf"; }
  say "q36 rows: $(tail -1 "$WORK/lc_q36/lc_log.txt" 2> /dev/null)"
fi
if want qt && [ "$(left)" -gt 90 ] && wait_llama; then
  OUT=$WORK/qt WORK=$WORK/qt MS_BIN=$MS DEADLINE=$(($(left) - 40)) timeout "$(left)" bash tools/quant_types_device.sh \
    > "$WORK/qt.stdout" 2>&1
  ls "$WORK"/qt/{q3_k_m,iq4_xs,q2_k}.{ms,llama}.done > /dev/null 2>&1 && touch "$WORK/qt.done"
  say "qt: $(tail -3 "$WORK/qt/log.txt" 2> /dev/null | tr '\n' ' ')"
fi
# llama.cpp's converter + quantizer files of every type (carry .llamaconv):
# logits on CPU and CUDA against Hugging Face and each other.
QTYPES_ALL=q4_0,q4_1,q5_0,q5_1,q2_k,q2_k_s,q3_k_s,q3_k_m,q3_k_l,q4_k_s,q4_k_m,q5_k_s,q5_k_m,q6_k,iq4_xs,iq4_nl,iq3_s,iq3_m,iq3_xxs,iq3_xs,iq2_s,iq2_m,iq2_xs,iq2_xxs,iq1_s,iq1_m,tq1_0,tq2_0
if want files && [ "$(left)" -gt 150 ] && wait_llama; then
  [ -x "$LLAMA_BUILD/bin/llama-imatrix" ] || cmake --build "$LLAMA_BUILD" --target llama-imatrix -j"$NCPU" > "$WORK/imatrix_build.log" 2>&1
  QUANT=1 LLAMA_BIN=$LLAMA_BUILD/bin MS_BIN=$MS QTYPES=${QTYPES:-$QTYPES_ALL} OUT=$WORK/files WORK=/tmp/lf \
    PY_TIMEOUT=$(($(left) - 20)) timeout "$(left)" bash tools/llamacpp_files.sh run > "$WORK/files.stdout" 2>&1 &&
    touch "$WORK/files.done"
  say "files: $(tail -2 "$WORK/files/steps.txt" 2> /dev/null | tr '\n' ' ')"
fi
# gpt-oss-20b under --vram: the budgets hold OSS_FRACTIONS of the routed
# experts past the minimum (dense + KV + reserve at the bench's context, from
# moestream inspect); llama.cpp's N from the same budgets (OVERHEAD_GIB: its
# KV and compute buffers, the 201k-vocab logits of a 512-token batch ~0.4 GiB).
oss_budgets() {  # INSPECT.json FRACTIONS -> "12.3G,9.8G"
  python3 - "$1" "$2" << 'PY'
import json, sys
j = json.load(open(sys.argv[1]))
minimum, experts = j["vram"]["minimum_bytes"], j["split"]["expert_bytes"]
print(",".join(f"{(minimum + float(f) * experts) / (1 << 30):.2f}G" for f in sys.argv[2].split(",")))
PY
}
if want oss && [ "$(left)" -gt 150 ]; then
  [ -f "$WORK/oss.gguf" ] || { timeout 400 "$MS" gen --arch gpt-oss --preset gpt-oss-20b --quant mxfp4_moe -t "$NCPU" -q \
    -o "$WORK/oss.gguf.part" > "$WORK/gen_oss.log" 2>&1 && mv "$WORK/oss.gguf.part" "$WORK/oss.gguf"; }
  say "gen oss: $(du -h "$WORK/oss.gguf" 2> /dev/null | cut -f1) $(tail -1 "$WORK/gen_oss.log" 2> /dev/null)"
  "$MS" inspect --json --ctx 1024 "$WORK/oss.gguf" > "$WORK/oss_inspect.json" 2> "$WORK/oss_inspect.err"
  OSS_BUDGETS=$(oss_budgets "$WORK/oss_inspect.json" "${OSS_FRACTIONS:-0.6,0.3}") || OSS_BUDGETS=
  say "oss budgets (${OSS_FRACTIONS:-0.6,0.3} of the experts): $OSS_BUDGETS"
  if [ -n "$OSS_BUDGETS" ] && [ -f "$WORK/oss.gguf" ] && wait_llama; then
    OUT=$WORK/lc_oss WORK=$WORK/lc_oss MS=$MS BUDGETS=$OSS_BUDGETS PP=512 DEPTH=0 REPS=${REPS:-2} OVERHEAD_GIB=1.0 \
      timeout "$(left)" bash tools/long_context_device.sh "$WORK/oss.gguf" > "$WORK/lc_oss.stdout" 2>&1
    {
      echo "## gpt-oss-20b (moestream gen --preset gpt-oss-20b --quant mxfp4_moe), $(date -u +%F)"
      echo "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1), $NCPU cores"
      echo "budgets: $OSS_BUDGETS (${OSS_FRACTIONS:-0.6,0.3} of the routed experts past the minimum at ctx 1024);" \
        "llama.cpp --n-cpu-moe $(cat "$WORK/lc_oss/lc_ncmoe.txt" 2> /dev/null)"
      echo "commands: tools/issue_rows_device.sh step oss -> tools/long_context_device.sh (PP=512 DEPTH=0 REPS=${REPS:-2}" \
        "BUDGETS=$OSS_BUDGETS OVERHEAD_GIB=1.0): moestream bench --backend cuda --vram full,BUDGETS;" \
        "llama-bench -ngl 99 -fa 1 -ncmoe 0|N"
      grep -h "moestream: " "$WORK"/lc_oss/lc_ms_*.err 2> /dev/null | sort -u | head -8 | sed 's/^/    /'
      grep -h "peak VRAM" "$WORK/lc_oss/lc_log.txt" 2> /dev/null | sed 's/^/    /'
      for f in "$WORK"/lc_oss/lc_ms_pp.md "$WORK"/lc_oss/lc_ms_tg.md "$WORK"/lc_oss/lc_llama_*.md; do
        [ -f "$f" ] && { echo; echo "$(basename "$f"):"; grep -E "^\|" "$f"; }
      done
    } > "$WORK/oss_rows.md"
    grep -q "^\[lc .*\] done" "$WORK/lc_oss/lc_log.txt" 2> /dev/null && { touch "$WORK/oss.done"; rm -f "$WORK/oss.gguf"; }
  fi
  say "oss rows: $(tail -1 "$WORK/lc_oss/lc_log.txt" 2> /dev/null)"
fi
say "call ends; done: $(cd "$WORK" && ls *.done 2> /dev/null | tr '\n' ' ')"
