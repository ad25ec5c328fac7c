#!/usr/bin/env bash
# The multi-sequence check on the GPU machine (issue #31): builds test_cuda + moestream from a source tar (SRC_TAR,
# default .src-multiseq.tar: `git archive -o .src-multiseq.tar HEAD`, carried with .deps), runs the *MultiSeq* tests
# and the hybrid/decode suites, then, while BUDGET seconds (default 560) allow, bench --seqs 1,4,8,16 on the
# synthetic Qwen3-30B-A3B Q4_K at --vram full and 8G. Logs and bench tables under $OUT.
#   run: BUDGET=360 bash tools/multi_seq_device.sh      (carry [".deps", ".src-multiseq.tar"])
set -o pipefail
R=$PWD; START=$(date +%s); left() { echo $(( ${BUDGET:-560} - ($(date +%s) - START) )); }
say() { echo "[multiseq $(($(date +%s) - START))s] $*" | tee -a $OUT/summary.txt; }
source tools/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a $OUT/summary.txt
mkdir -p /tmp/s && tar xf ${SRC_TAR:-.src-multiseq.tar} -C /tmp/s && source /tmp/s/tools/device_env.sh 2>/dev/null
export CMAKE_PREFIX_PATH="$R/.deps/root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export LD_LIBRARY_PATH="$R/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake -S /tmp/s -B $R/build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DMOESTREAM_BENCH=OFF > $OUT/cfg.log 2>&1 || { say cfg failed; tail -20 $OUT/cfg.log; exit 1; }
cmake --build $R/build-dev --target test_cuda moestream -j16 > $OUT/build.log 2>&1 || { say build failed; grep -m20 -B2 -A6 "error" $OUT/build.log; exit 1; }
say built
T=$R/build-dev/test_cuda
timeout 150 $T --gtest_filter='*MultiSeq*' > $OUT/multiseq_tests.log 2>&1; say "MultiSeq rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/multiseq_tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" -A4 $OUT/multiseq_tests.log | head -40
timeout $(( $(left) - 150 > 60 ? 150 : 60 )) $T --gtest_filter='*Hybrid*:*Qwen35Cuda*:*GptOss*:*CudaBackend*:*DecodeFusion*:*LongPrompt*' > $OUT/suites.log 2>&1; say "suites rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/suites.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $OUT/suites.log | head -20
MS=$R/build-dev/moestream
if [ "$(left)" -gt 150 ]; then
  timeout 100 $MS gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k -t 16 -q -o /tmp/q30.gguf > $OUT/gen.log 2>&1; say "gen rc=$?"
  for V in full 8G; do
    [ "$(left)" -gt 40 ] || break
    timeout $(( $(left) - 20 )) $MS bench -m /tmp/q30.gguf --backend cuda --vram $V -p 0 -n 64 -r 2 --seqs 1,4,8,16 > $OUT/bench_$V.md 2> $OUT/bench_$V.err; say "bench $V rc=$?"
    cat $OUT/bench_$V.md
  done
fi
cd $OUT && tar czf logs.tgz *.log *.err 2>/dev/null; say done
