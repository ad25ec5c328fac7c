#!/usr/bin/env bash
# Decode attention at depth, old vs new (issue 29), without a CMake build of
# the engine: nvcc builds, from two source trees, the attention kernels
# (decode, its long-context kernel where the tree has it, prefill for the
# tests' symbols) into bench/cuda/decode_depth_bench.cu, and from the new tree
# the attention GPU tests (tests/cuda/attention*_test.cpp) with GoogleTest.
#
#   bench/cuda/decode_depth_gpu.sh build NEW_TREE OLD_TREE BIN_DIR   # here or on the GPU machine
#   bench/cuda/decode_depth_gpu.sh run BIN_DIR OUT_DIR              # on the GPU machine
#
# build needs nvcc, g++, GoogleTest and the new tree's ms_quant / ms_util
# libraries (LIBS_DIR, default NEW_TREE/build-attn: a CPU build of those two
# targets). run runs the tests, then the old and the new bench, and leaves
# logs and bench_old.md / bench_new.md under OUT_DIR.
set -uo pipefail
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCH=${CUDA_ARCH:-90}
NVFLAGS=(-O3 -std=c++17 -arch=sm_$ARCH --expt-relaxed-constexpr)

kernels() {  # TREE OBJDIR: the tree's attention kernel objects
  local tree=$1 dir=$2 f pids=()
  mkdir -p "$dir"
  for f in attention_decode attention_decode_long attention_prefill attention_flash; do
    [ -f "$tree/src/cuda/$f.cu" ] || continue
    "$NVCC" "${NVFLAGS[@]}" -I"$tree/src" -c "$tree/src/cuda/$f.cu" -o "$dir/$f.o" & pids+=($!)
  done
  "$NVCC" "${NVFLAGS[@]}" -I"$tree/src" -x cu -c "$tree/src/cuda/device.cpp" -o "$dir/device.o" & pids+=($!)
  for p in "${pids[@]}"; do wait "$p" || return 1; done
}

case "${1:-}" in
build)
  NEW=$2 OLD=$3 BIN=$4
  LIBS_DIR=${LIBS_DIR:-$NEW/build-attn}
  mkdir -p "$BIN"
  kernels "$NEW" "$BIN/obj-new" && kernels "$OLD" "$BIN/obj-old" || { echo "kernel build failed"; exit 1; }
  LIBS=("$LIBS_DIR/libms_quant.a" "$LIBS_DIR/libms_util.a")
  for t in new old; do
    tree=$NEW; [ $t = old ] && tree=$OLD
    "$NVCC" "${NVFLAGS[@]}" -I"$tree/src" -I"$NEW/bench/cuda" "$NEW/bench/cuda/decode_depth_bench.cu" \
      "$BIN/obj-$t"/*.o "${LIBS[@]}" -o "$BIN/decode_depth_bench_$t" || exit 1
  done
  # the tests' cache appends (kv_append) and the tables they register
  mkdir -p "$BIN/obj-test"
  "$NVCC" "${NVFLAGS[@]}" -I"$NEW/src" -c "$NEW/src/cuda/ops_embed_kv.cu" -o "$BIN/obj-test/ops_embed_kv.o" || exit 1
  "$NVCC" "${NVFLAGS[@]}" -I"$NEW/src" -x cu -c "$NEW/src/cuda/quant_tables.cpp" -o "$BIN/obj-test/quant_tables.o" || exit 1
  g++ -O2 -std=c++20 -I"$NEW/src" -I"$NEW/tests/cuda" -I/usr/local/cuda/include \
    "$NEW"/tests/cuda/attention_test.cpp "$NEW"/tests/cuda/attention_decode_long_test.cpp \
    "$BIN/obj-new"/*.o "$BIN/obj-test"/*.o "${LIBS[@]}" -L/usr/local/cuda/lib64 -lgtest_main -lgtest -lcudart_static -lpthread -ldl -lrt \
    -o "$BIN/attention_tests" || exit 1
  ;;
run)
  BIN=$2 OUT=$3
  mkdir -p "$OUT"
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
  timeout "${TEST_TIMEOUT:-150}" "$BIN/attention_tests" --gtest_filter="${TEST_FILTER:-CudaAttention*}" \
    > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests? ran|^\[       OK \]" "$OUT/tests.log" | sort -u | head -40
  grep -E "Failure|got .* want" "$OUT/tests.log" | head -20
  for t in old new; do
    timeout "${BENCH_TIMEOUT:-60}" "$BIN/decode_depth_bench_$t" > "$OUT/bench_$t.md" 2>&1
    echo "bench $t rc=$?"
  done
  paste -d' ' "$OUT/bench_old.md" "$OUT/bench_new.md"
  ;;
*)
  sed -n 2,15p "$0"
  exit 2
  ;;
esac
