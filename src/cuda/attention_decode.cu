// Decode attention, split-K over the KV sequence.
//
// Phase 1: block (split, kv head) takes kSplit positions and all query heads
// of that KV head (GQA: K and V are read once for the group). Scores: a warp
// per position, lanes over head dims. Softmax within the split. P*V: threads
// over (position subset, dim pair). Writes the unnormalised partial output
// with its max m and sum l.
// Phase 2: block per query head merges the splits: out = sum_s o_s e^(m_s-M) /
// sum_s l_s e^(m_s-M).
#include <cfloat>
#include <string>

#include "cuda/attention.h"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kSplit = 128;
constexpr int kThreads = 128;
constexpr int kMaxGroup = 16;
constexpr int kMaxHeadDim = 256;

__host__ __device__ inline int n_splits(int kv_len) { return (kv_len + kSplit - 1) / kSplit; }

__global__ void __launch_bounds__(kThreads) attn_decode_split_kernel(
    const float* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc, int n_kv, int group,
    int hd, int64_t ctx, int max_kv_len, const int32_t* __restrict__ kv_len_dev, float scale, int n_split_max,
    float* __restrict__ part_o, float2* __restrict__ part_ml) {
  extern __shared__ float sh[];
  const int split = blockIdx.x, kvh = blockIdx.y;
  const int kv_len = kv_len_dev ? min(__ldg(kv_len_dev), max_kv_len) : max_kv_len;
  const int t0 = split * kSplit;
  if (t0 >= kv_len) return;
  const int len = min(kSplit, kv_len - t0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pairs = hd / 2;
  const int ngrp = kThreads / pairs > 0 ? kThreads / pairs : 1;

  float* q_s = sh;                        // [group][hd], pre-scaled
  float* sc = q_s + group * hd;           // [group][kSplit]
  float* red = sc + group * kSplit;       // [ngrp][group][hd]
  float* ml = red + ngrp * group * hd;    // [group][2]

  const int h0 = kvh * group;
  for (int i = threadIdx.x; i < group * hd; i += kThreads) q_s[i] = q[static_cast<int64_t>(h0) * hd + i] * scale;
  __syncthreads();

  // scores
  const __half* kbase = kc + (static_cast<int64_t>(kvh) * ctx + t0) * hd;
  for (int p = warp; p < len; p += kThreads / 32) {
    const __half* kr = kbase + static_cast<int64_t>(p) * hd;
    float acc[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) acc[g] = 0.f;
    for (int d = 2 * lane; d < hd; d += 64) {
      const float2 kv = __half22float2(*reinterpret_cast<const __half2*>(kr + d));
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < group) acc[g] += q_s[g * hd + d] * kv.x + q_s[g * hd + d + 1] * kv.y;
    }
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g < group) {
        const float s = dev::warp_sum(acc[g]);
        if (lane == 0) sc[g * kSplit + p] = s;
      }
    }
  }
  __syncthreads();

  // softmax within the split
  for (int g = warp; g < group; g += kThreads / 32) {
    float m = -FLT_MAX;
    for (int p = lane; p < len; p += 32) m = fmaxf(m, sc[g * kSplit + p]);
    m = dev::warp_max(m);
    float l = 0.f;
    for (int p = lane; p < len; p += 32) {
      const float e = __expf(sc[g * kSplit + p] - m);
      sc[g * kSplit + p] = e;
      l += e;
    }
    l = dev::warp_sum(l);
    if (lane == 0) { ml[2 * g] = m; ml[2 * g + 1] = l; }
  }
  __syncthreads();

  // P * V
  const int tid = threadIdx.x;
  if (tid < ngrp * pairs) {
    const int grp = tid / pairs, pr = tid % pairs;
    float ax[kMaxGroup], ay[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) ax[g] = ay[g] = 0.f;
    const __half* vbase = vc + (static_cast<int64_t>(kvh) * ctx + t0) * hd + 2 * pr;
    for (int p = grp; p < len; p += ngrp) {
      const float2 v = __half22float2(*reinterpret_cast<const __half2*>(vbase + static_cast<int64_t>(p) * hd));
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g < group) {
          const float w = sc[g * kSplit + p];
          ax[g] += w * v.x;
          ay[g] += w * v.y;
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g < group) {
        red[(grp * group + g) * hd + 2 * pr] = ax[g];
        red[(grp * group + g) * hd + 2 * pr + 1] = ay[g];
      }
    }
  }
  __syncthreads();
  for (int i = tid; i < group * hd; i += kThreads) {
    float s = 0.f;
    for (int r = 0; r < ngrp; ++r) s += red[r * group * hd + i];
    const int g = i / hd, d = i % hd;
    part_o[(static_cast<int64_t>(h0 + g) * n_split_max + split) * hd + d] = s;
  }
  if (tid < group) part_ml[static_cast<int64_t>(h0 + tid) * n_split_max + split] = make_float2(ml[2 * tid], ml[2 * tid + 1]);
}

__global__ void __launch_bounds__(kThreads) attn_decode_merge_kernel(
    const float* __restrict__ part_o, const float2* __restrict__ part_ml, int hd, int max_kv_len,
    const int32_t* __restrict__ kv_len_dev, int n_split_max, float* __restrict__ out) {
  const int h = blockIdx.x;
  const int kv_len = kv_len_dev ? min(__ldg(kv_len_dev), max_kv_len) : max_kv_len;
  const int ns = n_splits(kv_len);
  const float2* mlh = part_ml + static_cast<int64_t>(h) * n_split_max;
  float M = -FLT_MAX;
  for (int s = 0; s < ns; ++s) M = fmaxf(M, mlh[s].x);
  float L = 0.f;
  for (int s = 0; s < ns; ++s) L += mlh[s].y * __expf(mlh[s].x - M);
  const float invL = L > 0.f ? 1.f / L : 0.f;
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float acc = 0.f;
    for (int s = 0; s < ns; ++s) acc += part_o[(static_cast<int64_t>(h) * n_split_max + s) * hd + d] * __expf(mlh[s].x - M);
    out[static_cast<int64_t>(h) * hd + d] = acc * invL;
  }
}

size_t split_smem_bytes(int group, int hd) {
  const int pairs = hd / 2;
  const int ngrp = kThreads / pairs > 0 ? kThreads / pairs : 1;
  return sizeof(float) * (static_cast<size_t>(group) * hd + static_cast<size_t>(group) * kSplit +
                          static_cast<size_t>(ngrp) * group * hd + 2 * group);
}

void check_shape(const AttentionShape& s) {
  if (s.n_head <= 0 || s.n_kv <= 0 || s.n_head % s.n_kv != 0 || s.n_head / s.n_kv > kMaxGroup)
    throw Error("attention: n_head " + std::to_string(s.n_head) + " must be a multiple of n_kv " +
                std::to_string(s.n_kv) + " with at most " + std::to_string(kMaxGroup) + " query heads per KV head");
  if (s.head_dim <= 0 || s.head_dim % 2 != 0 || s.head_dim > kMaxHeadDim)
    throw Error("attention: head_dim " + std::to_string(s.head_dim) + " must be even and at most " +
                std::to_string(kMaxHeadDim));
}

}  // namespace

size_t attention_decode_scratch_bytes(const AttentionShape& s, int max_kv_len) {
  const size_t ns = static_cast<size_t>(n_splits(max_kv_len > 0 ? max_kv_len : 1));
  const size_t o = sizeof(float) * s.n_head * ns * s.head_dim;
  return ((o + 255) & ~size_t{255}) + sizeof(float2) * s.n_head * ns;
}

void attention_decode(const AttentionShape& s, const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                      int max_kv_len, const int32_t* kv_len, float* out, void* scratch, cudaStream_t stream) {
  check_shape(s);
  if (max_kv_len <= 0 || max_kv_len > s.ctx)
    throw Error("attention_decode: max_kv_len " + std::to_string(max_kv_len) + " outside 1.." + std::to_string(s.ctx));
  const int group = s.n_head / s.n_kv;
  const int ns = n_splits(max_kv_len);
  auto* part_o = static_cast<float*>(scratch);
  const size_t o_bytes = sizeof(float) * s.n_head * static_cast<size_t>(ns) * s.head_dim;
  auto* part_ml = reinterpret_cast<float2*>(static_cast<char*>(scratch) + ((o_bytes + 255) & ~size_t{255}));
  const size_t smem = split_smem_bytes(group, s.head_dim);
  attn_decode_split_kernel<<<dim3(ns, s.n_kv), kThreads, smem, stream>>>(
      q, reinterpret_cast<const __half*>(k_cache), reinterpret_cast<const __half*>(v_cache), s.n_kv, group,
      s.head_dim, s.ctx, max_kv_len, kv_len, s.scale, ns, part_o, part_ml);
  MS_CUDA_CHECK_LAUNCH();
  attn_decode_merge_kernel<<<s.n_head, kThreads, 0, stream>>>(part_o, part_ml, s.head_dim, max_kv_len, kv_len, ns, out);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
