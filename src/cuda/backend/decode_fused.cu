// Fused decode kernels (see decode_fused.h). Each mirrors the separate ops of
// ops.h element for element (same formulas, same rounding), so the fused and
// unfused steps agree to float reassociation.
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <string>

#include "cuda/backend/decode_fused.h"
#include "cuda/backend/head_prologue.cuh"
#include "cuda/common.cuh"
#include "cuda/last_block.cuh"
#include "cuda/pdl.cuh"
#include "cuda/warp_q8.cuh"
#include "cuda/device.h"
#include "cuda/router_topk.cuh"
#include "cuda/kv_elem.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

// One block per head: q heads, then k heads, then v heads. T: the cache's
// element type (__half or float).
template <class T>
__global__ void __launch_bounds__(kHeadPrologueThreads)
    qk_prologue_kernel(float* qkv, int n_head, int n_kv, int hd, const float* __restrict__ q_norm,
                       const float* __restrict__ k_norm, float eps, int n_rot, const int32_t* __restrict__ position,
                       double log2_base, RopeScaling scaling, bool neox, T* k_cache, T* v_cache, int64_t ctx) {
  // Launched with programmatic dependent launch (pdl.cuh), as the matvecs
  // around it: qkv is the previous kernel's output.
  dev::pdl_wait();
  dev::pdl_trigger();
  const int b = blockIdx.x;
  const int pos = __ldg(position);
  const bool pos_ok = pos >= 0 && pos < ctx;
  float* row = qkv + static_cast<int64_t>(b) * hd;
  if (b >= n_head + n_kv) {  // v head: cache only
    if (pos_ok) dev::head_store_v(row, hd, v_cache, b - n_head - n_kv, pos, ctx);
    return;
  }
  const bool is_q = b < n_head;
  dev::head_norm_rope(row, hd, is_q ? q_norm : k_norm, eps, n_rot, pos, log2_base, scaling, neox,
                      is_q || !pos_ok ? static_cast<T*>(nullptr) : k_cache, b - n_head, ctx);
}

constexpr int kRowThreads = 1024;

// Element i = c*1024 + tid: warp w of chunk c holds exactly Q8 block
// (c*1024 + w*32)/32, so the quantization is one warp reduction per block.
template <int PER>
__global__ void __launch_bounds__(kRowThreads) rmsnorm_row_q8_kernel(const float* x, const float* __restrict__ w,
                                                                     float* out, int n, float eps, int8_t* q,
                                                                     float2* ds) {
  __shared__ float scratch[32];
  dev::pdl_wait();  // x is the previous kernel's output (pdl.cuh)
  dev::pdl_trigger();
  float v[PER];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < PER; ++c) {
    const int i = c * kRowThreads + threadIdx.x;
    v[c] = i < n ? x[i] : 0.f;
    ss += v[c] * v[c];
  }
  ss = dev::block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < PER; ++c) {
    const int i = c * kRowThreads + threadIdx.x;
    if (i >= n) break;  // n % 32 == 0: whole warps leave together
    const float y = v[c] * inv * (w ? w[i] : 1.f);
    if (out) out[i] = y;
    dev::warp_q8(y, q + i, ds + i / 32, lane);
  }
}

// One warp (and block) per expert row: 128 blocks for Qwen3-MoE's router, so
// the 1 MB of f32 weights is read by as many SMs (8 rows per block left 16
// blocks and made the launch slower than matvec + top-k).
constexpr int kRouterWarps = 1;
constexpr int kMaxExperts = 1024;

__global__ void __launch_bounds__(kRouterWarps * 32) router_decode_kernel(
    const float* __restrict__ W, const float* __restrict__ x, int n_expert, int n, int k, bool softmax_first,
    bool renorm, float* logits, int32_t* __restrict__ ids, float* __restrict__ weights, unsigned int* counter) {
  __shared__ float v[kMaxExperts];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = blockIdx.x * kRouterWarps + warp;
  // Launched with programmatic dependent launch (pdl.cuh): the weight row is
  // no kernel's output, so it heads for L2 while the norm before still runs.
  if (r < n_expert) dev::prefetch_l2(W + static_cast<int64_t>(r) * n, static_cast<long long>(n) * 4, lane, 32);
  dev::pdl_wait();
  dev::pdl_trigger();
  if (r < n_expert) {
    const float4* wr = reinterpret_cast<const float4*>(W + static_cast<int64_t>(r) * n);
    const float4* xv = reinterpret_cast<const float4*>(x);
    float acc = 0.f;
#pragma unroll 4
    for (int i = lane; i < n / 4; i += 32) {
      const float4 a = __ldg(wr + i), b = xv[i];
      acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    acc = dev::warp_sum(acc);
    if (lane == 0) logits[r] = acc;
  }
  if (!dev::last_block_to_arrive(counter, gridDim.x) || warp != 0) return;

  // The same choice as router_topk's (cuda/router_topk.cuh).
  dev::warp_router_topk(v, [&](int e) { return __ldcg(logits + e); }, n_expert, k, softmax_first, renorm, lane,
                        ids, weights);
}

}  // namespace

bool router_decode_supported(DType w_type, int n_expert, int64_t n, int k) {
  return w_type == DType::F32 && n_expert > 0 && n_expert <= kMaxExperts && k > 0 && k <= 32 && k <= n_expert &&
         n > 0 && n % 4 == 0;
}

void router_decode_f32(const float* w, const float* x, int n_expert, int64_t n, int k, RouterMode mode, bool renorm,
                       float* logits, int32_t* ids, float* weights, uint32_t* counter, cudaStream_t stream) {
  if (!router_decode_supported(DType::F32, n_expert, n, k))
    throw Error("router_decode_f32: need 0 < k <= 32, k <= n_expert <= 1024 and n a multiple of 4");
  const unsigned grid = static_cast<unsigned>((n_expert + kRouterWarps - 1) / kRouterWarps);
  MS_CUDA_CHECK(launch_pdl(router_decode_kernel, dim3(grid), dim3(kRouterWarps * 32), 0, stream, w, x, n_expert,
                           static_cast<int>(n), k, mode == RouterMode::SoftmaxTopK, renorm, logits, ids, weights,
                           counter));
}

bool rmsnorm_row_supported(int64_t n) { return n > 0 && n % 32 == 0 && n <= 8 * kRowThreads; }

void rmsnorm_row_q8(const float* x, const float* w, float* out, int64_t n, float eps, const Q8Act& q8,
                    cudaStream_t stream) {
  if (!rmsnorm_row_supported(n))
    throw Error("rmsnorm_row_q8: n " + std::to_string(n) + " must be a multiple of 32, at most 8192");
  if (q8.n != n) throw Error("rmsnorm_row_q8: the Q8 activations are laid out for another width");
  auto* ds = reinterpret_cast<float2*>(q8.ds);
  const int nn = static_cast<int>(n);
  const int per = (nn + kRowThreads - 1) / kRowThreads;
  auto* kernel = per <= 1 ? rmsnorm_row_q8_kernel<1>
                 : per <= 2 ? rmsnorm_row_q8_kernel<2>
                 : per <= 4 ? rmsnorm_row_q8_kernel<4>
                            : rmsnorm_row_q8_kernel<8>;
  MS_CUDA_CHECK(launch_pdl(kernel, dim3(1), dim3(kRowThreads), 0, stream, x, w, out, nn, eps, q8.q, ds));
}

namespace {

template <class T>
void qk_prologue_impl(float* qkv, int n_head, int n_kv, int head_dim, const float* q_norm, const float* k_norm,
                      float eps, int n_rot, const int32_t* position, float theta_base, RopeScaling scaling, RopeMode mode,
                      T* k_cache, T* v_cache, int64_t ctx, cudaStream_t stream) {
  if (n_head <= 0 || n_kv <= 0) return;
  check_head_prologue_args("decode_qk_prologue", head_dim, n_rot);
  MS_CUDA_CHECK(launch_pdl(qk_prologue_kernel<T>, dim3(n_head + 2 * n_kv), dim3(kHeadPrologueThreads), 0, stream, qkv,
                           n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, position,
                           std::log2(static_cast<double>(theta_base)), scaling, mode == RopeMode::Neox, k_cache,
                           v_cache, ctx));
}

}  // namespace

void decode_qk_prologue(float* qkv, int n_head, int n_kv, int head_dim, const float* q_norm, const float* k_norm,
                        float eps, int n_rot, const int32_t* position, float theta_base, RopeScaling scaling,
                        RopeMode mode, uint16_t* k_cache, uint16_t* v_cache, int64_t ctx, cudaStream_t stream) {
  qk_prologue_impl(qkv, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, position, theta_base, scaling, mode,
                   reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache), ctx, stream);
}

void decode_qk_prologue(float* qkv, int n_head, int n_kv, int head_dim, const float* q_norm, const float* k_norm,
                        float eps, int n_rot, const int32_t* position, float theta_base, RopeScaling scaling,
                        RopeMode mode, float* k_cache, float* v_cache, int64_t ctx, cudaStream_t stream) {
  qk_prologue_impl(qkv, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, position, theta_base, scaling, mode,
                   k_cache, v_cache, ctx, stream);
}

}  // namespace ms::cuda
