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
#   QUANT=1: also builds llama-quantize and llama-imatrix (CPU only) from
#       .llama/llama-src.tar.xz (tools/make_llama_src.sh) and requantizes each
#       f32 file to q4_0,q4_K,q5_K,q6_K,q8_0 (QTYPES=...; QTYPES=all: every
#       type, the list QTYPES_ALL below); the checkpoints are then widened
#       (hidden 256) and conditioned (llamacpp_files.py's condition()), and
#       OUT/conditioning.md measures that.
#   MS=1: also builds moestream (CUDA, sm_90) and compares its logits on the
#       CPU and CUDA backends with the reference (BACKENDS=cpu,cuda);
#       MS_BIN=path: that binary instead of a build. LLAMA_BIN=folder: its
#       llama-quantize / llama-imatrix instead of a CPU-only build.
#   tools/llamacpp_files.sh check MOESTREAM [cpu,cuda]
#       the committed fixtures on each backend against their Hugging Face
#       logits, and NaN weights stopping with the non-finite-logits error.
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

if [ "$cmd" = check ]; then
  # tools/llamacpp_files.sh check MOESTREAM [backends]: the committed fixtures
  # (tests/fixtures/llamacpp) on each backend against their Hugging Face logits
  # (last position; f16: 1e-4, q8_0: the top token), and a copy of one with
  # NaN weights, which must stop with the non-finite-logits error.
  MSB=${2:?usage: tools/llamacpp_files.sh check MOESTREAM [cpu,cuda]}
  BACKENDS=${3:-cpu,cuda}
  OUT=${OUT:-$ROOT/llamacpp_out}
  mkdir -p "$OUT"
  FIX=tests/fixtures/llamacpp
  TOK=$(python3 -c "import json; print(','.join(map(str, json.load(open('$FIX/qwen3moe-hf_logits.json'))['tokens'])))")
  fails=0
  for f in "$FIX"/*.gguf; do
    n=$(basename "$f" .gguf); m=${n%%-*}
    for be in ${BACKENDS//,/ }; do
      "$MSB" logits -m "$f" --tokens "$TOK" -o "/tmp/$n.$be.f32" --backend "$be" --kv-type f32 > "/tmp/$n.$be.log" 2>&1 ||
        { echo "$n $be: FAIL rc=$? $(tail -1 /tmp/$n.$be.log)"; fails=$((fails + 1)); continue; }
      python3 - "$FIX/$m-hf_logits.f32" "/tmp/$n.$be.f32" "$n" "$be" <<'PY' || fails=$((fails + 1))
import array, sys
ref, got = array.array("f"), array.array("f")
ref.frombytes(open(sys.argv[1], "rb").read()); got.frombytes(open(sys.argv[2], "rb").read())
ref = ref[-len(got):]
err = max(abs(a - b) for a, b in zip(got, ref)) / max(abs(b) for b in ref)
top = max(range(len(got)), key=got.__getitem__) == max(range(len(ref)), key=ref.__getitem__)
ok = err <= 1e-4 if "q8_0" not in sys.argv[3] else top
print(f"{sys.argv[3]} {sys.argv[4]}: {'ok' if ok else 'FAIL'} rel err {err:.2e}, top-1 {'agrees' if top else 'differs'}")
sys.exit(0 if ok else 1)
PY
    done
  done
  python3 - "$FIX/qwen35moe-f16.gguf" /tmp/nan.gguf <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read()); pos = 24
def rd(fmt):
    global pos
    v = struct.unpack_from(fmt, b, pos); pos += struct.calcsize(fmt); return v[0]
def skip(t):
    global pos
    if t == 8:
        n = rd("<Q"); pos += n
    elif t == 9:
        et, n = rd("<I"), rd("<Q")
        for _ in range(n): skip(et)
    else: pos += {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t]
n_t, n_kv = struct.unpack_from("<QQ", b, 8)
for _ in range(n_kv): skip(8); skip(rd("<I"))
infos = []
for _ in range(n_t):
    l = rd("<Q"); name = b[pos:pos + l].decode(); pos += l
    dims = [rd("<Q") for _ in range(rd("<I"))]; t = rd("<I"); off = rd("<Q"); infos.append((name, dims, off))
data = (pos + 31) // 32 * 32
for name, dims, off in infos:
    if name == "output_norm.weight": b[data + off:data + off + 4 * dims[0]] = b"\xff" * (4 * dims[0])
open(sys.argv[2], "wb").write(b)
PY
  for be in ${BACKENDS//,/ }; do
    msg=$("$MSB" run -m /tmp/nan.gguf -p hello -n 4 --backend "$be" 2>&1); rc=$?
    if [ $rc -ne 0 ] && grep -q "non-finite logits" <<<"$msg"; then echo "NaN weights $be: ok (rc $rc, $(grep -o 'prompt: the forward pass produced non-finite logits ([A-Za-z]* for token id [0-9]*)' <<<"$msg"))"
    else echo "NaN weights $be: FAIL rc=$rc: $(tail -1 <<<"$msg")"; fails=$((fails + 1)); fi
  done
  echo "failures: $fails"
  exit $((fails > 0))
fi

[ "$cmd" = run ] || { echo "usage: tools/llamacpp_files.sh pack LLAMA_DIR | run [models] | check MOESTREAM [backends]"; exit 2; }
MODELS=${2:-qwen3moe,qwen35moe,mixtral,gpt-oss}  # every entry of llamacpp_files.py's MODELS
OUT=${OUT:-$ROOT/llamacpp_out}
WORK=${WORK:-/tmp/llamacpp_files}
mkdir -p "$OUT" "$WORK"
START=$(date +%s)
say() { echo "[llamacpp_files $(($(date +%s) - START))s] $*" | tee -a "$OUT/steps.txt"; }
[ -d .llamaconv/conversion ] || { say "no .llamaconv (run 'tools/llamacpp_files.sh pack LLAMA_DIR' here and carry it)"; exit 1; }
[ -f tools/device_env.sh ] && source tools/device_env.sh
EXTRA=()
# Every type llama-quantize makes that moestream reads (QTYPES=all).
QTYPES_ALL=q4_0,q4_1,q5_0,q5_1,q2_k,q2_k_s,q3_k_s,q3_k_m,q3_k_l,q4_k_s,q4_k_m,q5_k_s,q5_k_m,q6_k,iq4_xs,iq4_nl,iq3_s,iq3_m,iq3_xxs,iq3_xs,iq2_s,iq2_m,iq2_xs,iq2_xxs,iq1_s,iq1_m,tq1_0,tq2_0

LLAMA_PID=
if [ "${QUANT:-0}" = 1 ]; then
  # LLAMA_BIN: a folder holding llama-quantize (and llama-imatrix) already
  # built (e.g. tools/llb_unpack.sh's, from .llb: it has no llama-quantize
  # today, so name a folder that does); else a CPU-only
  # build of them here, in the background beside moestream's build.
  LB=${LLAMA_BIN:-/tmp/llama-build-cpu/bin}
  if [ ! -x "$LB/llama-quantize" ] && [ -f .llama/llama-src.tar.xz ]; then
    say "build llama-quantize, llama-imatrix (CPU only, in the background)"
    (mkdir -p /tmp/llama-src && tar xJf .llama/llama-src.tar.xz -C /tmp/llama-src &&
      cmake -S /tmp/llama-src -B /tmp/llama-build-cpu -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF > "$OUT/llama_configure.log" 2>&1 &&
      timeout 300 cmake --build /tmp/llama-build-cpu -j"${LLAMA_JOBS:-8}" --target llama-quantize llama-imatrix \
        > "$OUT/llama_build.log" 2>&1 || echo "FAIL llama-quantize build (logs in OUT)" >> "$OUT/steps.txt") &
    LLAMA_PID=$!
    LB=/tmp/llama-build-cpu/bin
  fi
fi

if [ -n "${MS_BIN:-}" ]; then
  EXTRA+=(--moestream "$MS_BIN" --backends "${BACKENDS:-cpu,cuda}")
elif [ "${MS:-0}" = 1 ]; then
  say "build moestream (CUDA sm_90)"
  GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S "${MS_SRC:-.}" -B "$ROOT/build-gpu" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DMOESTREAM_CUDA=ON -DMOESTREAM_BENCH=OFF > "$OUT/ms_configure.log" 2>&1 &&
    timeout 420 cmake --build "$ROOT/build-gpu" -j"${MS_JOBS:-16}" --target moestream > "$OUT/ms_build.log" 2>&1 &&
    EXTRA+=(--moestream "$ROOT/build-gpu/moestream" --backends "${BACKENDS:-cpu,cuda}") ||
    say "FAIL moestream build (logs in OUT)"
  say "moestream build done"
fi

if [ "${QUANT:-0}" = 1 ]; then
  [ -n "$LLAMA_PID" ] && { wait "$LLAMA_PID"; say "llama-quantize build done"; }
  if [ -x "$LB/llama-quantize" ]; then
    qtypes=${QTYPES:-q4_0,q4_K,q5_K,q6_K,q8_0}
    [ "$qtypes" = all ] && qtypes=$QTYPES_ALL
    EXTRA+=(--quantize "$LB/llama-quantize" --quant-types "$qtypes")
    [ -x "$LB/llama-imatrix" ] && EXTRA+=(--imatrix "$LB/llama-imatrix")
  else
    say "QUANT=1 but no llama-quantize (LLAMA_BIN, or .llama/llama-src.tar.xz from tools/make_llama_src.sh); skipping requantization"
  fi
fi

# PAR=0 (the default): one process, the models in turn (2026-11-26, H200, 16
# cores, 4 models x 28 types: ~310 s, plus ~130 s for the two builds side by
# side). PAR=1: one process per model at once, summaries joined afterwards;
# SLOWER as it stands (conversions 11 -> 15-45 s, the quantize/compare loop
# ~4x): every llama-quantize, moestream and converter run takes all cores,
# so four at once oversubscribe them. Give each its share of threads first.
say "checkpoints, conversion, reference ($MODELS)"
if [ "${PAR:-0}" = 1 ] && [ "${MODELS//,/}" != "$MODELS" ]; then
  n=$(tr ',' '\n' <<<"$MODELS" | wc -l)
  pids=()
  for m in ${MODELS//,/ }; do
    PYTHONUNBUFFERED=1 timeout "${PY_TIMEOUT:-420}" python3 tools/llamacpp_files.py --llama .llamaconv --out "$WORK/$m.run" \
      --models "$m" --threads $(( $(nproc) / n > 1 ? $(nproc) / n : 1 )) "${EXTRA[@]}" > "$OUT/llamacpp_files_$m.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  { printf '| model | file | backend | result | detail |\n|---|---|---|---|---|\n'
    for m in ${MODELS//,/ }; do tail -n +3 "$WORK/$m.run/summary.md" 2>/dev/null || echo "| $m | (no summary) | - | FAIL | see llamacpp_files_$m.log |"; done
  } > "$WORK/summary.md"
  first=1
  for m in ${MODELS//,/ }; do
    f="$WORK/$m.run/conditioning.md"
    [ -f "$f" ] || continue
    if [ $first = 1 ]; then cat "$f"; first=0; else tail -n +3 "$f"; fi
  done > "$WORK/conditioning.md"
  cat "$OUT"/llamacpp_files_*.log > "$OUT/llamacpp_files.log"
else
  PYTHONUNBUFFERED=1 timeout "${PY_TIMEOUT:-420}" python3 tools/llamacpp_files.py --llama .llamaconv --out "$WORK" --models "$MODELS" \
    "${EXTRA[@]}" 2>&1 | tee "$OUT/llamacpp_files.log"
  rc=${PIPESTATUS[0]}
fi
say "llamacpp_files.py rc=$rc"
cp "$WORK/summary.md" "$OUT/" 2>/dev/null
cp "$WORK/conditioning.md" "$OUT/" 2>/dev/null
# Everything (checkpoints, GGUFs, logits, dumps, logs) in one archive: the
# GPU machine returns at most 8 files.
tar czf "$OUT/llamacpp_files.tar.gz" -C "$WORK" --exclude='*.cpu.f32' --exclude='*.cuda.f32' \
  $([ "${QUANT:-0}" = 1 ] && echo "--exclude=*.gguf --exclude=*.safetensors") .
say "archive $(du -h "$OUT/llamacpp_files.tar.gz" | cut -f1)"
exit "$rc"
