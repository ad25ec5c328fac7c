#!/usr/bin/env bash
# Issue #12: where moestream's hidden state departs from the Hugging Face
# reference's on the qwen35moe parity model, layer by layer, with the reference
# taking moestream's expert choices (tools/hf_parity.py --layer-diff), on the
# CPU backend and then the CUDA backend. Run on the GPU machine from the
# repository root (python3 with torch + transformers 5.x there):
#
#   OUT=$OUT bash tools/layer_diff.sh [steps]     steps: build,cpu,cuda (default: all three)
#
# The build (tools/device_full.sh build: build-gpu/, every target, sm_90) can
# take most of one call's 10 minutes on a fresh machine: split it in two calls,
#   OUT=$OUT bash tools/layer_diff.sh build
#   OUT=$OUT bash tools/layer_diff.sh cpu,cuda
# (build-gpu/ stays between calls on a warm machine). MS_BIN=path uses another
# binary; HF_PARITY_THREADS sets the reference's torch threads (default: up to 16).
#
# The CPU run also passes --layer-diff-ablate (LD_ABLATE=0: not): at q8_0, the
# first MoE layer's router input with the reference's q8_0 emulation changed
# for one parameter role at a time (input not rounded / weight f32, out_proj
# in the file's column order), a table appended to layer_diff_cpu.md. For the
# ablation alone, `OUT=$OUT bash tools/layer_diff.sh cpu` (after the build).
#
# Only a few files go to $OUT: layer_diff_cpu.md, layer_diff_cuda.md (the
# tables, also printed) and layer_diff_cpu.log, layer_diff_cuda.log (the runs'
# output). The models, GGUFs and per-prompt files stay under /tmp/ld_<backend>;
# the build's logs under /tmp/ld_build (their tail is printed if it fails).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(pwd)/gpu_out}
mkdir -p "$OUT"
STEPS=${1:-build,cpu,cuda}
want() { [[ ",$STEPS," == *",$1,"* ]]; }
[ -f tools/device_env.sh ] && source tools/device_env.sh
MS=${MS_BIN:-build-gpu/moestream}
START=$(date +%s)
say() { echo "[layer_diff $(($(date +%s) - START))s] $*"; }

if want build; then
  say "build (tools/device_full.sh build, logs in /tmp/ld_build)"
  if ! OUT=/tmp/ld_build bash tools/device_full.sh build; then
    tail -20 /tmp/ld_build/configure.log 2>/dev/null
    grep -E "error" /tmp/ld_build/build.log 2>/dev/null | head -30
    exit 1
  fi
fi
[ -x "$MS" ] || { say "no binary at $MS (run the build step first)"; exit 1; }

rc_all=0
for be in cpu cuda; do
  want "$be" || continue
  work=/tmp/ld_$be
  extra=() limit=280
  if [ "$be" = cpu ] && [ "${LD_ABLATE:-1}" != 0 ]; then extra=(--layer-diff-ablate) limit=360; fi
  say "hf_parity --layer-diff${extra[*]:+ ${extra[*]}} --backend $be (qwen35moe, q8_0 and f32; work dir $work)"
  rm -f "$work/layer_diff.md"
  timeout "$limit" python3 tools/hf_parity.py --moestream "$MS" --out "$work" --backend "$be" \
    --models qwen35moe --types q8_0,f32 --layer-diff ${extra[@]+"${extra[@]}"} > "$OUT/layer_diff_$be.log" 2>&1
  rc=$?
  say "layer diff $be rc=$rc"
  [ "$rc" -eq 0 ] || rc_all=1
  if [ -f "$work/layer_diff.md" ]; then
    cp "$work/layer_diff.md" "$OUT/layer_diff_$be.md"
    cat "$OUT/layer_diff_$be.md"
  else
    tail -40 "$OUT/layer_diff_$be.log"
  fi
  grep -E "^error|FAILED|Traceback" "$OUT/layer_diff_$be.log" | head -10
done
say "done"
exit $rc_all
