// Multi-sequence KV appends and attention prologue (see kv_multi.h). The
// element conversions and the q8_0 block quantization are those of
// ops_embed_kv.cu's kv_append; the per-head norm + RoPE is head_prologue.cuh's.
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "cuda/backend/head_prologue.cuh"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "cuda/kv_multi.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kThreads = 256;

// The cache row of (slot, kv head h, pos) in units of T, or -1 when the row
// writes nothing.
__device__ __forceinline__ int64_t slot_row(const int32_t* slots, const int32_t* positions, int t, int h,
                                            int64_t slot_stride, int n_slots, int64_t ctx, int units) {
  const int32_t slot = __ldg(slots + t), pos = __ldg(positions + t);
  if (slot < 0 || slot >= n_slots || pos < 0 || pos >= ctx) return -1;
  return static_cast<int64_t>(slot) * slot_stride + (static_cast<int64_t>(h) * ctx + pos) * units;
}

// Thread per element (block column x, row y), as kv_append_kernel.
template <class T>
__global__ void kv_append_multi_kernel(const float* __restrict__ k, const float* __restrict__ v, int n_kv,
                                       int head_dim, const int32_t* __restrict__ slots,
                                       const int32_t* __restrict__ positions, T* k_base, T* v_base,
                                       int64_t slot_stride, int n_slots, int64_t ctx) {
  const int t = blockIdx.y;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n_kv * head_dim) return;
  const int h = idx / head_dim, d = idx % head_dim;
  const int64_t row = slot_row(slots, positions, t, h, slot_stride, n_slots, ctx, head_dim);
  if (row < 0) return;
  const int64_t src = static_cast<int64_t>(t) * n_kv * head_dim + idx;
  k_base[row + d] = dev::KvElem<T>::from_float(k[src]);
  v_base[row + d] = dev::KvElem<T>::from_float(v[src]);
}

// q8_0: a warp per block of 32 elements, as kv_append_q8_0_kernel (d =
// amax/127 stored as f16, q = rint(x * (1/d)) clamped to +-127).
__global__ void kv_append_multi_q8_0_kernel(const float* __restrict__ k, const float* __restrict__ v, int n_kv,
                                            int head_dim, const int32_t* __restrict__ slots,
                                            const int32_t* __restrict__ positions, BlockQ8_0* k_base,
                                            BlockQ8_0* v_base, int64_t slot_stride, int n_slots, int64_t ctx) {
  const int t = blockIdx.y;
  const int per_head = head_dim / QK;
  const int blk = blockIdx.x * (kThreads / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (blk >= n_kv * per_head) return;
  const int h = blk / per_head, b = blk % per_head;
  const int64_t row = slot_row(slots, positions, t, h, slot_stride, n_slots, ctx, per_head);
  if (row < 0) return;
  const int64_t src = static_cast<int64_t>(t) * n_kv * head_dim + static_cast<int64_t>(blk) * QK + lane;
  for (int which = 0; which < 2; ++which) {
    const float x = (which == 0 ? k : v)[src];
    BlockQ8_0& out = (which == 0 ? k_base : v_base)[row + b];
    const float d = dev::warp_max(fabsf(x)) / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    const float r = x * id;
    out.qs[lane] = static_cast<int8_t>(max(-127, min(127, static_cast<int>(rintf(isfinite(r) ? r : 0.f)))));
    if (lane == 0) out.d = __half_as_ushort(__float2half_rn(d));
  }
}

void check_append(const char* who, int n, int n_slots, int64_t slot_stride) {
  if (n > 65535) throw Error(std::string(who) + ": at most 65535 rows per call, not " + std::to_string(n));
  if (n_slots <= 0 || slot_stride < 0)
    throw Error(std::string(who) + ": " + std::to_string(n_slots) + " slots of stride " + std::to_string(slot_stride));
}

template <class T>
void append_impl(const float* k, const float* v, int n, int n_kv, int head_dim, const int32_t* slots,
                 const int32_t* positions, T* k_base, T* v_base, int64_t slot_stride, int n_slots, int64_t ctx,
                 cudaStream_t stream) {
  if (n <= 0 || n_kv <= 0) return;
  check_append("kv_append_multi", n, n_slots, slot_stride);
  const int per_token = n_kv * head_dim;
  const dim3 grid(static_cast<unsigned>((per_token + kThreads - 1) / kThreads), static_cast<unsigned>(n));
  kv_append_multi_kernel<T><<<grid, kThreads, 0, stream>>>(k, v, n_kv, head_dim, slots, positions, k_base, v_base,
                                                           slot_stride, n_slots, ctx);
  MS_CUDA_CHECK_LAUNCH();
}

// Block (head b, row t): q heads, then k heads, then v heads, as
// batch_qk_prologue_kernel; the cache rows of the row's slot. T void: no
// cache writes (q8_0 appends separately).
template <class T>
__global__ void __launch_bounds__(kHeadPrologueThreads) prologue_multi_kernel(
    float* q, float* k, const float* v, int n_head, int n_kv, int hd, const float* __restrict__ q_norm,
    const float* __restrict__ k_norm, float eps, int n_rot, const int32_t* __restrict__ slots,
    const int32_t* __restrict__ positions, double log2_base, RopeScaling scaling, bool neox, T* k_base, T* v_base,
    int64_t slot_stride, int n_slots, int64_t ctx) {
  const int b = blockIdx.x, t = blockIdx.y;
  const int pos = __ldg(positions + t), slot = __ldg(slots + t);
  const bool write = k_base != nullptr && pos >= 0 && pos < ctx && slot >= 0 && slot < n_slots;
  const int64_t off = write ? static_cast<int64_t>(slot) * slot_stride : 0;
  if (b >= n_head + n_kv) {  // v head: cache only
    const int j = b - n_head - n_kv;
    if (write) dev::head_store_v(v + (static_cast<int64_t>(t) * n_kv + j) * hd, hd, v_base + off, j, pos, ctx);
    return;
  }
  const bool is_q = b < n_head;
  const int j = is_q ? b : b - n_head;
  float* row = is_q ? q + (static_cast<int64_t>(t) * n_head + j) * hd : k + (static_cast<int64_t>(t) * n_kv + j) * hd;
  dev::head_norm_rope(row, hd, is_q ? q_norm : k_norm, eps, n_rot, pos, log2_base, scaling, neox,
                      is_q || !write ? static_cast<T*>(nullptr) : k_base + off, j, ctx);
}

template <class T>
void prologue_impl(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim, const float* q_norm,
                   const float* k_norm, float eps, int n_rot, const int32_t* slots, const int32_t* positions,
                   float theta_base, RopeScaling scaling, RopeMode mode, T* k_base, T* v_base, int64_t slot_stride,
                   int n_slots, int64_t ctx, cudaStream_t stream) {
  if (n <= 0 || n_head <= 0 || n_kv <= 0) return;
  check_append("batch_qk_prologue_multi", n, n_slots, slot_stride);
  check_head_prologue_args("batch_qk_prologue_multi", head_dim, n_rot);
  // v heads only when the cache is written here
  const int heads = n_head + n_kv + (k_base != nullptr ? n_kv : 0);
  const dim3 grid(static_cast<unsigned>(heads), static_cast<unsigned>(n));
  prologue_multi_kernel<T><<<grid, kHeadPrologueThreads, 0, stream>>>(
      q, k, v, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, slots, positions,
      std::log2(static_cast<double>(theta_base)), scaling, mode == RopeMode::Neox, k_base, v_base, slot_stride,
      n_slots, ctx);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void kv_append_multi(const float* k, const float* v, int n, int n_kv, int head_dim, const int32_t* slots,
                     const int32_t* positions, uint16_t* k_base, uint16_t* v_base, int64_t slot_stride, int n_slots,
                     int64_t ctx, cudaStream_t stream) {
  append_impl(k, v, n, n_kv, head_dim, slots, positions, reinterpret_cast<__half*>(k_base),
              reinterpret_cast<__half*>(v_base), slot_stride, n_slots, ctx, stream);
}

void kv_append_multi(const float* k, const float* v, int n, int n_kv, int head_dim, const int32_t* slots,
                     const int32_t* positions, float* k_base, float* v_base, int64_t slot_stride, int n_slots,
                     int64_t ctx, cudaStream_t stream) {
  append_impl(k, v, n, n_kv, head_dim, slots, positions, k_base, v_base, slot_stride, n_slots, ctx, stream);
}

void kv_append_multi(const float* k, const float* v, int n, int n_kv, int head_dim, const int32_t* slots,
                     const int32_t* positions, BlockQ8_0* k_base, BlockQ8_0* v_base, int64_t slot_stride,
                     int n_slots, int64_t ctx, cudaStream_t stream) {
  if (n <= 0 || n_kv <= 0) return;
  if (head_dim <= 0 || head_dim % QK != 0)
    throw Error("kv_append_multi: a q8_0 KV cache needs head_dim a multiple of 32, not " + std::to_string(head_dim));
  check_append("kv_append_multi", n, n_slots, slot_stride);
  const int blocks = n_kv * (head_dim / QK), per_tb = kThreads / 32;
  const dim3 grid(static_cast<unsigned>((blocks + per_tb - 1) / per_tb), static_cast<unsigned>(n));
  kv_append_multi_q8_0_kernel<<<grid, kThreads, 0, stream>>>(k, v, n_kv, head_dim, slots, positions, k_base, v_base,
                                                             slot_stride, n_slots, ctx);
  MS_CUDA_CHECK_LAUNCH();
}

void batch_qk_prologue_multi(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                             const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* slots,
                             const int32_t* positions, float theta_base, RopeScaling scaling, RopeMode mode,
                             uint16_t* k_base, uint16_t* v_base, int64_t slot_stride, int n_slots, int64_t ctx,
                             cudaStream_t stream) {
  prologue_impl(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, slots, positions, theta_base, scaling,
                mode, reinterpret_cast<__half*>(k_base), reinterpret_cast<__half*>(v_base), slot_stride, n_slots, ctx,
                stream);
}

void batch_qk_prologue_multi(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                             const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* slots,
                             const int32_t* positions, float theta_base, RopeScaling scaling, RopeMode mode,
                             float* k_base, float* v_base, int64_t slot_stride, int n_slots, int64_t ctx,
                             cudaStream_t stream) {
  prologue_impl(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, slots, positions, theta_base, scaling,
                mode, k_base, v_base, slot_stride, n_slots, ctx, stream);
}

void batch_qk_prologue_multi(float* q, float* k, const float* v, int n, int n_head, int n_kv, int head_dim,
                             const float* q_norm, const float* k_norm, float eps, int n_rot, const int32_t* slots,
                             const int32_t* positions, float theta_base, RopeScaling scaling, RopeMode mode,
                             BlockQ8_0* k_base, BlockQ8_0* v_base, int64_t slot_stride, int n_slots, int64_t ctx,
                             cudaStream_t stream) {
  if (n <= 0) return;
  if (head_dim % QK != 0)
    throw Error("batch_qk_prologue_multi: a q8_0 KV cache needs head_dim a multiple of 32, not " +
                std::to_string(head_dim));
  // norm + RoPE in place (no cache), then the q8_0 append of the roped k and v
  prologue_impl<float>(q, k, v, n, n_head, n_kv, head_dim, q_norm, k_norm, eps, n_rot, slots, positions, theta_base,
                       scaling, mode, nullptr, nullptr, slot_stride, n_slots, ctx, stream);
  kv_append_multi(k, v, n, n_kv, head_dim, slots, positions, k_base, v_base, slot_stride, n_slots, ctx, stream);
}

}  // namespace ms::cuda
