#!/usr/bin/env bash
# A session's closing check on the GPU machine, over several calls on one warm
# machine (each call does the next steps until DEADLINE seconds, then exits;
# call it again within the idle window to go on). Markers under WORK.
#
#   SRC_TAR=new.tar OLD_TAR=old.tar OUT=dir tools/final_check_device.sh
#       (carry .deps, the two tars, .llama and .llamaconv for step files)
#
# Steps (STEPS=comma list picks):
#   build   NEW (SRC_TAR, `git archive` of the commit checked) for sm_90:
#           moestream, test_cuda, test_backend_ops; OLD_TAR's moestream after
#           it (the baseline of the speed step), on the cores the tests leave
#   tests   the whole test_cuda and test_backend_ops
#   parity  tools/hf_parity.py on the CUDA and the CPU backend, every model
#   speed   old vs new moestream, alternating, same files: Qwen3-30B-A3B
#           pp512/tg128 at full,10.5G,8G,1.5G and Qwen3.6-35B-A3B at full,12G,8G
#   files   tools/llamacpp_files.sh run with QUANT=1 (every type, CPU + CUDA)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu_out}
WORK=${WORK:-/tmp/final}
STEPS=${STEPS:-build,tests,parity,speed,files}
DEADLINE=${DEADLINE:-560}
mkdir -p "$OUT" "$WORK"
START=$(date +%s)
NCPU=$(nproc)
NEW=$ROOT/build-final
OLD=$ROOT/build-old
[ -f tools/device_env.sh ] && source tools/device_env.sh
GEN=(); command -v ninja > /dev/null && GEN=(-G Ninja)
pack() { cp "$WORK/log.txt" "$OUT/" 2> /dev/null; tar czf "$OUT/final.tgz" -C "$WORK" --exclude='*.gguf' --exclude='*.part' \
  --exclude='./hf*' --exclude='*.safetensors' --exclude='./src-*' . 2> /dev/null; }
say() { echo "[final $(($(date +%s) - START))s] $*" | tee -a "$WORK/log.txt"; pack; }
left() { echo $((DEADLINE - ($(date +%s) - START))); }
want() { [[ ",$STEPS," == *",$1,"* ]] && [ ! -f "$WORK/$1.done" ]; }
unpack() {  # tar dir
  [ -f "$2/CMakeLists.txt" ] || { mkdir -p "$2" && tar xf "$1" -C "$2"; }
}
say "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1); $NCPU cores"

if want build; then
  unpack "$SRC_TAR" "$WORK/src-new"
  [ -f "$NEW/CMakeCache.txt" ] || cmake -S "$WORK/src-new" -B "$NEW" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMOESTREAM_BENCH=OFF > "$WORK/new_cfg.log" 2>&1
  timeout "$(left)" cmake --build "$NEW" --target moestream test_cuda test_backend_ops -j"$NCPU" > "$WORK/new_build.log" 2>&1
  rc=$?
  say "new build rc=$rc ($("$NEW/moestream" version 2> /dev/null | head -1))"
  [ $rc -eq 0 ] || grep -E "error" "$WORK/new_build.log" | head -10 | tee -a "$WORK/log.txt"
  if [ -n "${OLD_TAR:-}" ] && [ ! -f "$WORK/old_build.started" ]; then
    touch "$WORK/old_build.started"
    unpack "$OLD_TAR" "$WORK/src-old"
    setsid nohup bash -c "cmake -S '$WORK/src-old' -B '$OLD' ${GEN[*]} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DMOESTREAM_BENCH=OFF > '$WORK/old_cfg.log' 2>&1 && cmake --build '$OLD' --target moestream -j$((NCPU / 2)) \
      > '$WORK/old_build.log' 2>&1; echo \$? > '$WORK/old_build.rc'" > /dev/null 2>&1 < /dev/null &
  fi
  [ $rc -eq 0 ] && touch "$WORK/build.done"
fi

if want tests && [ -f "$WORK/build.done" ] && [ "$(left)" -gt 60 ]; then
  if [ ! -f "$WORK/test_cuda.done" ]; then
    timeout "$(($(left) - 30))" "$NEW/test_cuda" --gtest_brief=1 > "$WORK/test_cuda.log" 2>&1
    rc=$?
    say "test_cuda rc=$rc: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests? ran' "$WORK/test_cuda.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \]" "$WORK/test_cuda.log" | head -20 | tee -a "$WORK/log.txt"
    [ $rc -ne 124 ] && touch "$WORK/test_cuda.done"
  fi
  if [ "$(left)" -gt 40 ]; then
    timeout "$(($(left) - 20))" "$NEW/test_backend_ops" --gtest_brief=1 > "$WORK/test_backend_ops.log" 2>&1
    rc=$?
    say "test_backend_ops rc=$rc: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests? ran|SKIPPED' "$WORK/test_backend_ops.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \]" "$WORK/test_backend_ops.log" | head -20 | tee -a "$WORK/log.txt"
    [ $rc -ne 124 ] && touch "$WORK/tests.done"
  fi
fi

if want parity && [ -f "$WORK/build.done" ] && [ "$(left)" -gt 120 ]; then
  for be in cuda cpu; do
    [ -f "$WORK/parity_$be.md" ] && continue
    [ "$(left)" -gt 90 ] || break
    models=()  # PARITY_CPU_MODELS: the CPU backend's run only for these (comma list)
    [ $be = cpu ] && [ -n "${PARITY_CPU_MODELS:-}" ] && models=(--models "$PARITY_CPU_MODELS")
    timeout "$(($(left) - 10))" python3 "$WORK/src-new/tools/hf_parity.py" --moestream "$NEW/moestream" \
      --out "$WORK/hf_$be" --backend "$be" "${models[@]}" > "$WORK/parity_$be.stdout" 2>&1
    cp "$WORK/hf_$be/parity.md" "$WORK/parity_$be.md" 2> /dev/null
    say "parity $be: $(tail -1 "$WORK/parity_$be.stdout")"
  done
  [ -f "$WORK/parity_cuda.md" ] && [ -f "$WORK/parity_cpu.md" ] && touch "$WORK/parity.done"
fi

# Old and new moestream, alternating per budget, the same file: tg128 / pp512.
bench_pair() {  # tag model budgets
  local tag=$1 model=$2 budgets=$3 b
  for b in ${budgets//,/ }; do
    for which in old new; do
      local md=$WORK/speed_${tag}_${b}_$which.md bin=$OLD/moestream
      [ $which = new ] && bin=$NEW/moestream
      grep -q "^| .*± " "$md" 2> /dev/null && continue
      [ "$(left)" -gt 45 ] || return 1
      local pp=512; [ "$b" = full ] && pp=512,8192  # (8192: the resident pass size)
      timeout "$(($(left) - 5))" "$bin" bench -m "$model" -p "$pp" -n 128 -r 3 -t 16 --backend cuda --vram "$b" \
        -o "$md" > /dev/null 2> "$WORK/speed_${tag}_${b}_$which.err" || say "bench $tag $b $which failed: $(tail -1 "$WORK/speed_${tag}_${b}_$which.err")"
    done
  done
}
if want speed && [ -f "$WORK/build.done" ] && [ "$(left)" -gt 90 ]; then
  while [ ! -f "$WORK/old_build.rc" ] && [ "$(left)" -gt 60 ]; do sleep 5; done
  if [ "$(cat "$WORK/old_build.rc" 2> /dev/null)" = 0 ]; then
    [ -f "$WORK/q30.gguf" ] || "$NEW/moestream" gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k -t "$NCPU" -q -o "$WORK/q30.gguf"
    bench_pair q30 "$WORK/q30.gguf" full,10.5G,8G,1.5G && {
      [ -f "$WORK/q36.gguf" ] || "$NEW/moestream" gen --arch qwen35moe --preset qwen3.6-35b-a3b --quant q4_k -t "$NCPU" -q \
        -o "$WORK/q36.gguf"
      bench_pair q36 "$WORK/q36.gguf" full,12G,8G && touch "$WORK/speed.done"; }
    python3 - "$WORK" > "$WORK/speed_table.md" << 'PY'
import glob, os, re, sys
w = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(w, "speed_*_*_*.md"))):
    tag, b, which = os.path.basename(f)[6:-3].rsplit("_", 2)
    for line in open(f):
        m = re.match(r"\| \S+ \| [^|]+ \| cuda \| (\S+) \| ([0-9.]+) ± ([0-9.]+)", line)
        if m:
            rows.setdefault((tag, b, m.group(1)), {})[which] = float(m.group(2))
print("| model | budget | test | old t/s | new t/s | new/old |\n|---|---|---|---:|---:|---:|")
for (tag, b, t), v in rows.items():
    o, n = v.get("old"), v.get("new")
    r = f"{n / o:.3f}" if o and n else ""
    print(f"| {tag} | {b} | {t} | {o or ''} | {n or ''} | {r} |")
PY
    say "speed: $(grep -c '^| q' "$WORK/speed_table.md") rows"
  else
    say "old build not ready: $(tail -3 "$WORK/old_build.log" 2> /dev/null | tr '\n' ' ')"
  fi
fi

if want files && [ -f "$WORK/build.done" ] && [ "$(left)" -gt 200 ]; then
  (cd "$WORK/src-new" && cp -r "$ROOT/.llamaconv" "$ROOT/.llama" . 2> /dev/null
   QUANT=1 MS_BIN=$NEW/moestream OUT=$WORK/files WORK=/tmp/lf PY_TIMEOUT=$(($(left) - 30)) \
     QTYPES=${QTYPES:-q4_0,q4_1,q5_0,q5_1,q2_k,q2_k_s,q3_k_s,q3_k_m,q3_k_l,q4_k_s,q4_k_m,q5_k_s,q5_k_m,q6_k,iq4_xs,iq4_nl,iq3_s,iq3_m,iq3_xxs,iq3_xs,iq2_s,iq2_m,iq2_xs,iq2_xxs,iq1_s,iq1_m,tq1_0,tq2_0} \
     timeout "$(left)" bash tools/llamacpp_files.sh run > "$WORK/files.stdout" 2>&1) && touch "$WORK/files.done"
  say "files: $(tail -2 "$WORK/files/steps.txt" 2> /dev/null | tr '\n' ' ')"
fi
say "call ends; done: $(cd "$WORK" && ls *.done 2> /dev/null | tr '\n' ' ')"
