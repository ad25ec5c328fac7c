#!/usr/bin/env bash
# GGUFs made by llama.cpp's own converter (and quantizer) from tiny random
# Hugging Face checkpoints, checked against Hugging Face's float64 forward
# (tools/llamacpp_files.py says what and how).
#
# Here (where llama.cpp's source is, e.g. /work/ref/llama.cpp):
#   tools/llamacpp_files.sh pack LLAMA_DIR
#       copies convert_hf_to_gguf.py, conversion/ and gguf-py/gguf/ into
#       .llamaconv/ (git-ignored through .git/info/exclude), to carry.
# On the GPU machine (carry .llamaconv; .llama and .deps for the optional steps):
#   OUT=dir tools/llamacpp_files.sh run [models]
#       makes the checkpoints, converts them (f32, f16, q8_0; qwen35moe with
#       and without its MTP block) and writes Hugging Face's logits.
#   QUANT=1: also builds llama-quantize from .llama/llama-src.tar.xz
#       (tools/make_llama_src.sh) and requantizes each f32 file to
#       q4_0,q4_K,q5_K,q6_K,q8_0 (QTYPES=...).
#   MS=1: also builds moestream (CUDA, sm_90) and compares its logits on the
#       CPU and CUDA backends with the reference (BACKENDS=cpu,cuda).
# Each step has its own time limit; a failing one does not stop the next.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
cmd=${1:-run}

if [ "$cmd" = pack ]; then
  src=${2:?usage: tools/llamacpp_files.sh pack LLAMA_DIR}
  rm -rf .llamaconv && mkdir -p .llamaconv/gguf-py
  cp "$src/convert_hf_to_gguf.py" .llamaconv/
  cp -r "$src/conversion" .llamaconv/
  cp -r "$src/gguf-py/gguf" .llamaconv/gguf-py/
  find .llamaconv -name __pycache__ -prune -exec rm -rf {} +
  grep -qx '/.llamaconv/' .git/info/exclude 2>/dev/null || echo '/.llamaconv/' >> .git/info/exclude
  (cd "$src" && git rev-parse --short HEAD 2>/dev/null || echo unknown) > .llamaconv/VERSION
  echo "packed $(du -sh .llamaconv | cut -f1) into .llamaconv (llama.cpp $(cat .llamaconv/VERSION))"
  exit 0
fi

[ "$cmd" = run ] || { echo "usage: tools/llamacpp_files.sh pack LLAMA_DIR | run [models]"; exit 2; }
MODELS=${2:-qwen3moe,qwen35moe,mixtral}
OUT=${OUT:-$ROOT/llamacpp_out}
WORK=${WORK:-/tmp/llamacpp_files}
mkdir -p "$OUT" "$WORK"
START=$(date +%s)
say() { echo "[llamacpp_files $(($(date +%s) - START))s] $*" | tee -a "$OUT/steps.txt"; }
[ -d .llamaconv/conversion ] || { say "no .llamaconv (run 'tools/llamacpp_files.sh pack LLAMA_DIR' here and carry it)"; exit 1; }
[ -f tools/device_env.sh ] && source tools/device_env.sh
EXTRA=()

if [ "${QUANT:-0}" = 1 ]; then
  if [ -f .llama/llama-src.tar.xz ]; then
    say "build llama-quantize"
    mkdir -p /tmp/llama-src && tar xJf .llama/llama-src.tar.xz -C /tmp/llama-src
    cmake -S /tmp/llama-src -B /tmp/llama-build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF > "$OUT/llama_configure.log" 2>&1 &&
      timeout 300 cmake --build /tmp/llama-build -j16 --target llama-quantize > "$OUT/llama_build.log" 2>&1 &&
      EXTRA+=(--quantize /tmp/llama-build/bin/llama-quantize --quant-types "${QTYPES:-q4_0,q4_K,q5_K,q6_K,q8_0}") ||
      say "FAIL llama-quantize build (logs in OUT)"
  else
    say "QUANT=1 but no .llama/llama-src.tar.xz (tools/make_llama_src.sh); skipping requantization"
  fi
fi

if [ "${MS:-0}" = 1 ]; then
  say "build moestream (CUDA sm_90)"
  GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S . -B build-gpu "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DMOESTREAM_CUDA=ON \
    -DMOESTREAM_BENCH=OFF > "$OUT/ms_configure.log" 2>&1 &&
    timeout 420 cmake --build build-gpu -j16 --target moestream > "$OUT/ms_build.log" 2>&1 &&
    EXTRA+=(--moestream build-gpu/moestream --backends "${BACKENDS:-cpu,cuda}") || say "FAIL moestream build (logs in OUT)"
fi

say "checkpoints, conversion, reference ($MODELS)"
PYTHONUNBUFFERED=1 timeout 420 python3 tools/llamacpp_files.py --llama .llamaconv --out "$WORK" --models "$MODELS" \
  "${EXTRA[@]}" 2>&1 | tee "$OUT/llamacpp_files.log"
rc=${PIPESTATUS[0]}
say "llamacpp_files.py rc=$rc"
cp "$WORK/summary.md" "$OUT/" 2>/dev/null
# Everything (checkpoints, GGUFs, logits, dumps, logs) in one archive: the
# GPU machine returns at most 8 files.
tar czf "$OUT/llamacpp_files.tar.gz" -C "$WORK" --exclude='*.cpu.f32' --exclude='*.cuda.f32' .
say "archive $(du -h "$OUT/llamacpp_files.tar.gz" | cut -f1)"
exit "$rc"
