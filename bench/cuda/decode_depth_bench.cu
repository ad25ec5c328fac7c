// Decode attention at depth (issue 29): microseconds per call (one layer,
// one token) of attention_decode at depths 1k .. 128k for the attention of
// Qwen3-30B-A3B (32 query heads, 4 KV heads of 128) and of Qwen3.6-35B-A3B's
// full-attention layers (16 / 2 of 256), over f16 and q8_0 caches, and the
// bandwidth that makes of the K and V bytes the call must read. Only the
// public API (cuda/attention.h), so the same file builds against an older
// tree for an old-vs-new table (bench/cuda/decode_depth_gpu.sh).
//
// As the backend calls it: the launch sized for the graph's span (depth
// rounded up past the next 256), the length from device memory. Each timed
// graph rotates over enough copies of the cache (>= 192 MiB together) that
// K and V come from HBM, not from the 50 MB L2. Prints one line per case:
//   | shape | cache | depth | us | GB/s |
// Timing: graph_timer.cuh (median of replays). Nothing is checked here: the
// tests (tests/cuda/attention_decode_long_test.cpp) check the results.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/attention.h"
#include "cuda/device.h"
#include "graph_timer.cuh"
#include "quant/blocks.h"

namespace {

__device__ uint32_t hash32(uint64_t i) {
  uint32_t x = static_cast<uint32_t>(i * 0x9E3779B97F4A7C15ull >> 32);
  x ^= x >> 15;
  x *= 0x2c1b3c6du;
  x ^= x >> 12;
  return x;
}

// f16 values in [-1, 1)
__global__ void fill_f16(__half* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2half((hash32(i + seed * 0x1000003ull) & 0xffff) / 32768.f - 1.f);
}

// q8_0 blocks: scale 1/64, quants any int8
__global__ void fill_q8(ms::BlockQ8_0* p, int64_t n_blocks, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_blocks;
       i += int64_t(gridDim.x) * blockDim.x) {
    const __half d = __float2half(1.f / 64);
    p[i].d = *reinterpret_cast<const uint16_t*>(&d);
    for (int j = 0; j < ms::QK; ++j) p[i].qs[j] = static_cast<int8_t>(hash32(i * 32 + j + seed) & 0xff);
  }
}

struct Shape {
  const char* name;
  int n_head, n_kv, hd;
};

void run_case(const Shape& sh, bool q8, int depth, cudaStream_t s) {
  const int span = (depth + 256) / 256 * 256;  // decode_kv_span: past the next 256
  const int64_t ctx = span;
  const int64_t elems = int64_t(sh.n_kv) * ctx * sh.hd;
  const size_t bytes = q8 ? size_t(elems / ms::QK) * sizeof(ms::BlockQ8_0) : size_t(elems) * 2;
  const double kv_bytes = 2.0 * sh.n_kv * double(depth) * sh.hd * (q8 ? 34.0 / 32 : 2.0);  // K and V read
  const int copies = std::max(1, static_cast<int>((192.0 * (1 << 20)) / (2.0 * bytes)) + 1);
  std::vector<void*> k(copies), v(copies);
  for (int c = 0; c < copies; ++c) {
    MS_CUDA_CHECK(cudaMalloc(&k[c], bytes));
    MS_CUDA_CHECK(cudaMalloc(&v[c], bytes));
    if (q8) {
      fill_q8<<<1024, 256, 0, s>>>(static_cast<ms::BlockQ8_0*>(k[c]), elems / ms::QK, 2 * c);
      fill_q8<<<1024, 256, 0, s>>>(static_cast<ms::BlockQ8_0*>(v[c]), elems / ms::QK, 2 * c + 1);
    } else {
      fill_f16<<<1024, 256, 0, s>>>(static_cast<__half*>(k[c]), elems, 2 * c);
      fill_f16<<<1024, 256, 0, s>>>(static_cast<__half*>(v[c]), elems, 2 * c + 1);
    }
  }
  ms::cuda::AttentionShape as;
  as.n_head = sh.n_head;
  as.n_kv = sh.n_kv;
  as.head_dim = sh.hd;
  as.ctx = ctx;
  as.scale = 1.f / std::sqrt(float(sh.hd));
  const size_t sb = ms::cuda::attention_decode_scratch_bytes(as, span);
  float *q, *out;
  int32_t* len;
  void* scratch;
  MS_CUDA_CHECK(cudaMalloc(&q, sizeof(float) * sh.n_head * sh.hd));
  MS_CUDA_CHECK(cudaMalloc(&out, sizeof(float) * sh.n_head * sh.hd));
  MS_CUDA_CHECK(cudaMalloc(&len, sizeof(int32_t)));
  MS_CUDA_CHECK(cudaMalloc(&scratch, sb));
  MS_CUDA_CHECK(cudaMemset(scratch, 0, sb));
  MS_CUDA_CHECK(cudaMemset(q, 0, sizeof(float) * sh.n_head * sh.hd));
  MS_CUDA_CHECK(cudaMemcpy(len, &depth, sizeof(int32_t), cudaMemcpyHostToDevice));
  auto call = [&](int i) {
    const int c = i % copies;
    if (q8)
      ms::cuda::attention_decode(as, q, static_cast<const ms::BlockQ8_0*>(k[c]), static_cast<const ms::BlockQ8_0*>(v[c]),
                                 span, len, out, scratch, s);
    else
      ms::cuda::attention_decode(as, q, static_cast<const uint16_t*>(k[c]), static_cast<const uint16_t*>(v[c]), span,
                                 len, out, scratch, s);
  };
  call(0);  // one-time setup outside the capture
  MS_CUDA_CHECK(cudaStreamSynchronize(s));
  const double us = ms::cuda::graph_median_us(s, std::max(copies, 4), 15, call);
  std::printf("| %s %d/%d x %d | %s | %d | %.1f | %.0f |\n", sh.name, sh.n_head, sh.n_kv, sh.hd, q8 ? "q8_0" : "f16",
              depth, us, kv_bytes / (us * 1e-6) / 1e9);
  std::fflush(stdout);
  for (int c = 0; c < copies; ++c) {
    MS_CUDA_CHECK(cudaFree(k[c]));
    MS_CUDA_CHECK(cudaFree(v[c]));
  }
  MS_CUDA_CHECK(cudaFree(q));
  MS_CUDA_CHECK(cudaFree(out));
  MS_CUDA_CHECK(cudaFree(len));
  MS_CUDA_CHECK(cudaFree(scratch));
}

}  // namespace

int main() {
  ms::cuda::Stream s;
  cudaDeviceProp p{};
  MS_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("device: %s\n| shape | cache | depth | us | GB/s |\n|---|---|---:|---:|---:|\n", p.name);
  const Shape shapes[] = {{"Qwen3-30B-A3B", 32, 4, 128}, {"Qwen3.6-35B-A3B", 16, 2, 256}};
  for (const Shape& sh : shapes)
    for (bool q8 : {false, true})
      for (int depth : {1024, 4096, 8192, 32768, 131072}) run_case(sh, q8, depth, s);
  return 0;
}
