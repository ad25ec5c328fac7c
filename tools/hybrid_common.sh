# Sourced by the tiered-expert scripts run on the GPU machine (hybrid_device.sh,
# hybrid_profile.sh, prefetch_ab.sh) from the repository root: $OUT, the
# carried dependencies, the binary ($MS) and the synthetic Qwen3-30B-A3B Q4_K
# model ($M, BENCH_MODEL to place it elsewhere); hybrid_build builds for sm_90
# unless SKIP_BUILD is set, hybrid_model generates the model if it is absent.
OUT=${OUT:-$(pwd)/gpu_out}
mkdir -p "$OUT"
source tools/device_env.sh
MS=${MS_BIN:-build-gpu/moestream}
M=${BENCH_MODEL:-/tmp/q.gguf}
hybrid_build() { [ -n "${SKIP_BUILD:-}" ] || OUT=$OUT bash tools/device_full.sh build || exit 1; }
hybrid_model() {
  [ -f "$M" ] || timeout 300 $MS gen --arch qwen3moe --preset qwen3-30b-a3b --quant q4_k -o "$M" > /dev/null 2>&1
}
