// Attention kernel times at long contexts (issue 29), for Qwen3-30B-A3B's
// attention shape (32 query heads, 4 KV heads, head_dim 128) and the
// full-attention layers of Qwen3.6-35B-A3B (16 / 2 heads of 256):
//  - causal prefill of n tokens from position 0 (n = 512 .. 32768): the f32
//    tiled kernel (attention_prefill_tiled, the old one) against the
//    tensor-core flash kernel over f16 and q8_0 caches; TFLOP/s counts the
//    causal work, 4 * n(n+1)/2 * head_dim * n_head;
//  - decode of one token at depth 0 (kv 1), 8k and 32k over f16 and q8_0;
//  - gpt-oss-20b's attention (64 query heads, 8 KV heads of 64): prefill and
//    decode with the sliding window of 128 (and sinks) against full causal
//    attention, f16 and q8_0 caches (the point of the window: O(n * 128)).
// Prints a markdown table (stdout). Timing: graph_timer.cuh, as the other
// kernel benches. Build as tools/gpu_check.sh builds kernel_bench (see
// bench/cuda/attention_gpu.sh); nothing is checked here: the tests
// (tests/cuda/attention_test.cpp) check the results.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "cuda/attention.h"
#include "cuda/device.h"
#include "graph_timer.cuh"
#include "quant/blocks.h"

#define CK(x) MS_CUDA_CHECK(x)

namespace {

// Median of `reps` timed calls of `launch` in ms (graph_timer.cuh: one call
// per graph). A first call outside the capture does the launchers' one-time
// setup (the flash kernel's shared-memory opt-in).
double time_ms(cudaStream_t s, int reps, const std::function<void()>& launch) {
  launch();
  CK(cudaStreamSynchronize(s));
  return ms::cuda::graph_median_us(s, 1, reps, [&](int) { launch(); }) * 1e-3;
}

template <class T>
T* device_copy(const std::vector<T>& v) {
  T* p = nullptr;
  CK(cudaMalloc(&p, v.size() * sizeof(T)));
  CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

uint16_t to_f16(float f) {  // finite inputs of moderate size only
  const __half h = __float2half(f);
  return *reinterpret_cast<const uint16_t*>(&h);
}

struct Caches {
  uint16_t *k16, *v16;
  ms::BlockQ8_0 *k8, *v8;
};

Caches make_caches(int n_kv, int64_t ctx, int hd, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t n = static_cast<size_t>(n_kv) * ctx * hd;
  std::vector<uint16_t> h(n);
  Caches c{};
  for (auto& x : h) x = to_f16(u(rng));
  c.k16 = device_copy(h);
  for (auto& x : h) x = to_f16(u(rng));
  c.v16 = device_copy(h);
  std::vector<ms::BlockQ8_0> b(n / 32);
  std::uniform_int_distribution<int> qi(-127, 127);
  for (auto& x : b) {
    x.d = to_f16(1.f / 127.f);
    for (auto& q : x.qs) q = static_cast<int8_t>(qi(rng));
  }
  c.k8 = device_copy(b);
  c.v8 = device_copy(b);
  return c;
}

void free_caches(Caches& c) {
  CK(cudaFree(c.k16));
  CK(cudaFree(c.v16));
  CK(cudaFree(c.k8));
  CK(cudaFree(c.v8));
}

void prefill_rows(const char* model, int n_head, int n_kv, int hd, const std::vector<int>& lengths, cudaStream_t s,
                  std::mt19937& rng) {
  using namespace ms::cuda;
  const int max_n = *std::max_element(lengths.begin(), lengths.end());
  Caches c = make_caches(n_kv, max_n, hd, rng);
  std::vector<float> hq(static_cast<size_t>(max_n) * n_head * hd);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : hq) x = u(rng);
  float* q = device_copy(hq);
  float* out = nullptr;
  CK(cudaMalloc(&out, hq.size() * sizeof(float)));
  for (int n : lengths) {
    const AttentionShape as{n_head, n_kv, hd, max_n, 1.f / std::sqrt(static_cast<float>(hd))};
    const double flop = 4.0 * n * (n + 1.0) / 2.0 * hd * n_head;
    const int reps = n >= 16384 ? 3 : 10;
    const double t_old = time_ms(s, n >= 32768 ? 1 : reps, [&] {
      attention_prefill_tiled(as, q, c.k16, c.v16, n, 0, out, s);
    });
    const double t_f16 = time_ms(s, reps, [&] { attention_prefill(as, q, c.k16, c.v16, n, 0, out, s); });
    const double t_q8 = time_ms(s, reps, [&] { attention_prefill(as, q, c.k8, c.v8, n, 0, out, s); });
    std::printf("| %s %d/%d x %d | prefill %d | %.3f | %.3f (%.0f TFLOP/s) | %.3f (%.0f TFLOP/s) | %.1fx |\n", model,
                n_head, n_kv, hd, n, t_old, t_f16, flop / t_f16 * 1e-9, t_q8, flop / t_q8 * 1e-9, t_old / t_f16);
    std::fflush(stdout);
  }
  CK(cudaFree(q));
  CK(cudaFree(out));
  free_caches(c);
}

void decode_rows(const char* model, int n_head, int n_kv, int hd, cudaStream_t s, std::mt19937& rng) {
  using namespace ms::cuda;
  const int ctx = 32768;
  Caches c = make_caches(n_kv, ctx, hd, rng);
  std::vector<float> hq(static_cast<size_t>(n_head) * hd, 0.5f);
  float* q = device_copy(hq);
  float* out = nullptr;
  CK(cudaMalloc(&out, hq.size() * sizeof(float)));
  const AttentionShape as{n_head, n_kv, hd, ctx, 1.f / std::sqrt(static_cast<float>(hd))};
  for (int len : {1, 8192, 32768}) {
    void* scratch = nullptr;
    const size_t sb = attention_decode_scratch_bytes(as, len);
    CK(cudaMalloc(&scratch, sb));
    CK(cudaMemset(scratch, 0, sb));  // attention.h: zero before the first use
    CK(cudaDeviceSynchronize());
    const double t16 = time_ms(s, 50, [&] {
      attention_decode(as, q, c.k16, c.v16, len, nullptr, out, scratch, s);
    });
    const double t8 = time_ms(s, 50, [&] { attention_decode(as, q, c.k8, c.v8, len, nullptr, out, scratch, s); });
    // K and V bytes read per call: the cache rows up to len
    const double gb16 = 2.0 * n_kv * len * hd * 2 * 1e-9, gb8 = 2.0 * n_kv * len * (hd / 32) * 34 * 1e-9;
    std::printf("| %s %d/%d x %d | decode, depth %d | %.1f us (%.0f GB/s) | %.1f us (%.0f GB/s) |\n", model, n_head,
                n_kv, hd, len == 1 ? 0 : len, t16 * 1e3, gb16 / (t16 * 1e-3), t8 * 1e3, gb8 / (t8 * 1e-3));
    std::fflush(stdout);
    CK(cudaFree(scratch));
  }
  CK(cudaFree(q));
  CK(cudaFree(out));
  free_caches(c);
}

// Prefill from position 0 and decode at depth n: full causal, window 128,
// window 128 with sinks; f16 and q8_0 caches.
void window_rows(const char* model, int n_head, int n_kv, int hd, const std::vector<int>& lengths, cudaStream_t s,
                 std::mt19937& rng) {
  using namespace ms::cuda;
  const int max_n = *std::max_element(lengths.begin(), lengths.end());
  Caches c = make_caches(n_kv, max_n, hd, rng);
  std::vector<float> hq(static_cast<size_t>(max_n) * n_head * hd);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : hq) x = u(rng);
  float* q = device_copy(hq);
  const std::vector<float> hs(static_cast<size_t>(n_head), 0.5f);
  float* sinks = device_copy(hs);
  float* out = nullptr;
  CK(cudaMalloc(&out, hq.size() * sizeof(float)));
  AttentionExtras full, win, win_sinks;
  win.window = win_sinks.window = 128;
  win_sinks.sinks = sinks;
  for (int n : lengths) {
    const AttentionShape as{n_head, n_kv, hd, max_n, 1.f / std::sqrt(static_cast<float>(hd))};
    const int reps = n >= 16384 ? 3 : 10;
    for (bool q8 : {false, true}) {
      auto run = [&](const AttentionExtras& x) {
        return time_ms(s, reps, [&] {
          if (q8) attention_prefill(as, q, c.k8, c.v8, n, 0, out, s, x);
          else attention_prefill(as, q, c.k16, c.v16, n, 0, out, s, x);
        });
      };
      const double tf = run(full), tw = run(win), tws = run(win_sinks);
      std::printf("| %s %d/%d x %d | prefill %d, %s | %.3f ms | %.3f ms | %.3f ms | %.1fx |\n", model, n_head, n_kv, hd,
                  n, q8 ? "q8_0" : "f16", tf, tw, tws, tf / tw);
      std::fflush(stdout);
    }
    void* scratch = nullptr;
    const size_t sb = attention_decode_scratch_bytes(as, n);
    CK(cudaMalloc(&scratch, sb));
    CK(cudaMemset(scratch, 0, sb));
    CK(cudaDeviceSynchronize());
    for (bool q8 : {false, true}) {
      auto run = [&](const AttentionExtras& x) {
        return time_ms(s, 50, [&] {
          if (q8) attention_decode(as, q, c.k8, c.v8, n, nullptr, out, scratch, s, x);
          else attention_decode(as, q, c.k16, c.v16, n, nullptr, out, scratch, s, x);
        });
      };
      const double tf = run(full), tw = run(win), tws = run(win_sinks);
      std::printf("| %s %d/%d x %d | decode, depth %d, %s | %.1f us | %.1f us | %.1f us | %.1fx |\n", model, n_head,
                  n_kv, hd, n, q8 ? "q8_0" : "f16", tf * 1e3, tw * 1e3, tws * 1e3, tf / tw);
      std::fflush(stdout);
    }
    CK(cudaFree(scratch));
  }
  CK(cudaFree(q));
  CK(cudaFree(sinks));
  CK(cudaFree(out));
  free_caches(c);
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs)\n\n", prop.name, prop.multiProcessorCount);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::mt19937 rng(5);
  std::printf("| shape | prefill tokens | tiled f32 kernel (old), ms | flash f16 cache, ms | flash q8_0 cache, ms | "
              "flash f16 speed-up |\n|---|---|---:|---:|---:|---:|\n");
  prefill_rows("Qwen3-30B-A3B", 32, 4, 128, {512, 2048, 8192, 32768}, s, rng);
  prefill_rows("Qwen3.6-35B-A3B", 16, 2, 256, {512, 8192}, s, rng);
  std::printf("\n| shape | decode | f16 cache | q8_0 cache |\n|---|---|---:|---:|\n");
  decode_rows("Qwen3-30B-A3B", 32, 4, 128, s, rng);
  decode_rows("Qwen3.6-35B-A3B", 16, 2, 256, s, rng);
  std::printf("\n| shape | call | full causal | window 128 | window 128 + sinks | full / window |\n"
              "|---|---|---:|---:|---:|---:|\n");
  window_rows("gpt-oss-20b", 64, 8, 64, {8192, 32768}, s, rng);
  CK(cudaStreamDestroy(s));
  return 0;
}
