// A/B of the q8_0 flash prefill (issue 29), one process, one GPU: the kernel
// before the cp.async change (old_flash.cu: attention_flash.cu of commit
// 8767cb0 in namespace ms::cuda::old_flash; it dequantized q8_0 from global
// memory on the way into shared memory) against the current one (raw q8_0
// tiles by cp.async, dequantized from shared memory in half2), a variant of
// the current one dequantizing through f32 (var_flash.cu: the current file
// with kDequantHalf2 = false, in ms::cuda::var_flash), and the f16 cache,
// old and new. Outputs of old, new and variant compared bit for bit.
// Not built by CMake; made and run by hand (results: bench/results/long_context.md):
//   git show 8767cb0:src/cuda/attention_flash.cu | sed -e 's|^namespace ms::cuda {|namespace ms::cuda::old_flash {|' \
//       -e 's|^}  // namespace ms::cuda$|}  // namespace ms::cuda::old_flash|' > old_flash.cu
//   sed -e 's|^namespace ms::cuda {|namespace ms::cuda::var_flash {|' -e 's|^}  // namespace ms::cuda$|}  // namespace ms::cuda::var_flash|' \
//       -e 's|^constexpr bool kDequantHalf2 = true;|constexpr bool kDequantHalf2 = false;|' src/cuda/attention_flash.cu > var_flash.cu
//   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -Isrc -Ibench/cuda bench/cuda/attention_q8_ab.cu old_flash.cu \
//       var_flash.cu src/cuda/attention_{flash,prefill,decode}.cu src/cuda/device.cpp libms_quant.a libms_util.a -o q8_ab
//   ./q8_ab          (./q8_ab small: two tiny rows, for compute-sanitizer)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>
#include "cuda/attention.h"
#include "cuda/device.h"
#include "graph_timer.cuh"
#include "quant/blocks.h"
namespace ms::cuda::old_flash {
void attention_prefill(const AttentionShape& s, const float* q, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream);
void attention_prefill(const AttentionShape& s, const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream);
}
// var_flash.cu: the new kernel with the f32 dequantization (kDequantHalf2 = false)
namespace ms::cuda::var_flash {
void attention_prefill(const AttentionShape& s, const float* q, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream, const AttentionExtras& x);
}
#define CK(x) MS_CUDA_CHECK(x)
namespace {
double time_ms(cudaStream_t s, int reps, const std::function<void()>& launch) {
  launch();
  CK(cudaStreamSynchronize(s));
  return ms::cuda::graph_median_us(s, 1, reps, [&](int) { launch(); }) * 1e-3;
}
template <class T> T* dcopy(const std::vector<T>& v) {
  T* p = nullptr; CK(cudaMalloc(&p, v.size() * sizeof(T)));
  CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice)); return p;
}
uint16_t f16(float f) { const __half h = __float2half(f); return *reinterpret_cast<const uint16_t*>(&h); }
void row(const char* model, int n_head, int n_kv, int hd, int n, int ctx_pad, std::mt19937& rng, cudaStream_t s) {
  using namespace ms::cuda;
  const int64_t ctx = n + ctx_pad;  // ctx_pad odd: KV heads start off 16-byte alignment
  const size_t ne = size_t(n_kv) * ctx * hd;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> qi(-127, 127);
  std::vector<uint16_t> h(ne); for (auto& x : h) x = f16(u(rng));
  uint16_t* k16 = dcopy(h); for (auto& x : h) x = f16(u(rng)); uint16_t* v16 = dcopy(h);
  std::vector<ms::BlockQ8_0> b(ne / 32);
  for (auto& x : b) { x.d = f16(u(rng) * 0.02f); for (auto& q : x.qs) q = int8_t(qi(rng)); }
  ms::BlockQ8_0* k8 = dcopy(b); for (auto& x : b) { x.d = f16(u(rng) * 0.02f); } ms::BlockQ8_0* v8 = dcopy(b);
  std::vector<float> hq(size_t(n) * n_head * hd); for (auto& x : hq) x = u(rng);
  float* q = dcopy(hq);
  float *o1, *o2; CK(cudaMalloc(&o1, hq.size() * 4)); CK(cudaMalloc(&o2, hq.size() * 4));
  const AttentionShape as{n_head, n_kv, hd, ctx, 1.f / std::sqrt(float(hd))};
  const int reps = n >= 16384 ? 3 : 10;
  double t_old = 1e30, t_new = 1e30, t_var = 1e30, t_f16 = 1e30, t_f16_old = 1e30;
  for (int round = 0; round < 2; ++round) {  // alternate, keep the best median of each
    t_old = std::min(t_old, time_ms(s, reps, [&] { old_flash::attention_prefill(as, q, k8, v8, n, 0, o1, s); }));
    t_new = std::min(t_new, time_ms(s, reps, [&] { attention_prefill(as, q, k8, v8, n, 0, o2, s); }));
    t_var = std::min(t_var, time_ms(s, reps, [&] { var_flash::attention_prefill(as, q, k8, v8, n, 0, o2, s, {}); }));
    t_f16 = std::min(t_f16, time_ms(s, reps, [&] { attention_prefill(as, q, k16, v16, n, 0, o2, s); }));
    t_f16_old =
        std::min(t_f16_old, time_ms(s, reps, [&] { old_flash::attention_prefill(as, q, k16, v16, n, 0, o2, s); }));
  }
  std::vector<float> a(hq.size()), c(hq.size()), e(hq.size());
  old_flash::attention_prefill(as, q, k8, v8, n, 0, o1, s);
  attention_prefill(as, q, k8, v8, n, 0, o2, s);
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(a.data(), o1, a.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(c.data(), o2, c.size() * 4, cudaMemcpyDeviceToHost));
  var_flash::attention_prefill(as, q, k8, v8, n, 0, o2, s, {});
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(e.data(), o2, e.size() * 4, cudaMemcpyDeviceToHost));
  const bool same = std::memcmp(a.data(), c.data(), a.size() * 4) == 0;
  const bool same_var = std::memcmp(a.data(), e.data(), a.size() * 4) == 0;
  std::printf("| %s %d/%d x %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.2fx | %.2fx -> %.2fx | %s / %s |\n", model,
              n_head, n_kv, hd, n, t_old, t_new, t_var, t_f16_old, t_f16, t_old / t_new, t_old / t_f16_old,
              t_new / t_f16, same ? "yes" : "NO", same_var ? "yes" : "NO");
  std::fflush(stdout);
  for (void* p : {(void*)k16, (void*)v16, (void*)k8, (void*)v8, (void*)q, (void*)o1, (void*)o2}) CK(cudaFree(p));
}
}  // namespace
int main(int argc, char** argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "small") == 0;  // one tiny row (for compute-sanitizer)
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs)\n\n", prop.name, prop.multiProcessorCount);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::mt19937 rng(7);
  std::printf("| shape | prefill tokens | q8_0 old, ms | q8_0 new (cp.async, half2 dequant), ms | new with f32 dequant, ms | f16 old, ms | f16 new, ms | q8_0 old/new | q8_0/f16 before -> after | outputs = old (new / f32 variant) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  if (small) {
    row("tiny hd 32", 4, 2, 32, 300, 1, rng, s);
    row("tiny hd 96", 4, 1, 96, 200, 3, rng, s);
    return 0;
  }
  row("Qwen3-30B-A3B", 32, 4, 128, 2048, 0, rng, s);
  row("Qwen3-30B-A3B", 32, 4, 128, 8192, 0, rng, s);
  row("Qwen3-30B-A3B", 32, 4, 128, 8192, 3, rng, s);
  row("Qwen3-30B-A3B", 32, 4, 128, 32768, 0, rng, s);
  row("Qwen3.6-35B-A3B", 16, 2, 256, 512, 0, rng, s);
  row("Qwen3.6-35B-A3B", 16, 2, 256, 8192, 0, rng, s);
  row("gpt-oss-20b", 64, 8, 64, 8192, 1, rng, s);
  row("tiny hd 32", 8, 2, 32, 1000, 1, rng, s);
  CK(cudaStreamDestroy(s));
  return 0;
}
