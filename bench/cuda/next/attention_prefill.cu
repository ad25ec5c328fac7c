// Causal prefill attention (simple tiled version, no tensor cores yet).
//
// A block = 8 warps = 8 consecutive query tokens of one head. K and V tiles of
// 32 positions are staged in shared memory (f16, rows padded by one half2 so
// that lanes reading different rows hit different banks) and shared by the 8
// queries. Per tile, lane j scores key j against the warp's query, then an
// online softmax update, then lanes accumulate their head dims of P*V.
// head_dim a multiple of 8: K rows padded by 8 halves (16-byte aligned, the
// 8 rows of a phase on distinct banks) and scored 8 dims per shared load.
#include <cfloat>
#include <string>

#include "cuda/attention.h"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kTile = 32;
constexpr int kMaxDimsPerLane = 8;  // head_dim <= 256: 4 half2 per lane

__host__ __device__ inline int row_stride(int hd) { return hd % 8 == 0 ? hd + 8 : hd + 2; }  // halves

// 8 f16 (16 bytes) dotted with q[0..7] (16-byte aligned).
__device__ __forceinline__ float dot8(const uint4 k, const float* q) {
  const float4 qa = *reinterpret_cast<const float4*>(q), qb = *reinterpret_cast<const float4*>(q + 4);
  const float2 k0 = __half22float2(*reinterpret_cast<const __half2*>(&k.x));
  const float2 k1 = __half22float2(*reinterpret_cast<const __half2*>(&k.y));
  const float2 k2 = __half22float2(*reinterpret_cast<const __half2*>(&k.z));
  const float2 k3 = __half22float2(*reinterpret_cast<const __half2*>(&k.w));
  return qa.x * k0.x + qa.y * k0.y + qa.z * k1.x + qa.w * k1.y + qb.x * k2.x + qb.y * k2.y + qb.z * k3.x +
         qb.w * k3.y;
}

__global__ void __launch_bounds__(kWarps * 32) attn_prefill_kernel(
    const float* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc, int n_tokens,
    int n_head, int group, int hd, int64_t ctx, int pos0, float scale, float* __restrict__ out) {
  extern __shared__ __align__(16) float sh[];
  const int h = blockIdx.y, kvh = h / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tok0 = blockIdx.x * kWarps;
  const int tok = tok0 + warp;
  const int stride = row_stride(hd);  // padded row, in halves
  float* q_s = sh;                                           // [kWarps][hd]
  __half* k_s = reinterpret_cast<__half*>(q_s + kWarps * hd);  // [kTile][stride]
  __half* v_s = k_s + kTile * stride;                        // [kTile][stride]

  const bool active = tok < n_tokens;
  for (int d = lane; d < hd; d += 32)
    q_s[warp * hd + d] = active ? q[(static_cast<int64_t>(tok) * n_head + h) * hd + d] * scale : 0.f;

  const int last_tok = min(tok0 + kWarps, n_tokens) - 1;
  const int kmax = pos0 + last_tok;     // last key any query of the block sees
  const int my_last = pos0 + tok;       // last key this warp's query sees

  float m = -FLT_MAX, l = 0.f;
  float o[kMaxDimsPerLane];
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) o[i] = 0.f;

  const __half* kh = kc + static_cast<int64_t>(kvh) * ctx * hd;
  const __half* vh = vc + static_cast<int64_t>(kvh) * ctx * hd;
  for (int t0 = 0; t0 <= kmax; t0 += kTile) {
    __syncthreads();  // previous tile fully used (and q_s written on the first pass)
    const int pairs = hd / 2;
    for (int i = threadIdx.x; i < kTile * pairs; i += kWarps * 32) {
      const int r = i / pairs, c = 2 * (i % pairs);
      __half2 kk = __float2half2_rn(0.f), vv = __float2half2_rn(0.f);
      if (t0 + r <= kmax) {
        kk = *reinterpret_cast<const __half2*>(kh + static_cast<int64_t>(t0 + r) * hd + c);
        vv = *reinterpret_cast<const __half2*>(vh + static_cast<int64_t>(t0 + r) * hd + c);
      }
      *reinterpret_cast<__half2*>(k_s + r * stride + c) = kk;
      *reinterpret_cast<__half2*>(v_s + r * stride + c) = vv;
    }
    __syncthreads();
    if (!active || t0 > my_last) continue;

    // score of key t0 + lane
    float s = 0.f;
    const __half* kr = k_s + lane * stride;
    if (hd % 8 == 0) {
      float s2 = 0.f;  // two chains
      int d = 0;
      for (; d + 16 <= hd; d += 16) {
        s += dot8(*reinterpret_cast<const uint4*>(kr + d), q_s + warp * hd + d);
        s2 += dot8(*reinterpret_cast<const uint4*>(kr + d + 8), q_s + warp * hd + d + 8);
      }
      if (d < hd) s += dot8(*reinterpret_cast<const uint4*>(kr + d), q_s + warp * hd + d);
      s += s2;
    } else {
      for (int d = 0; d < hd; d += 2) {
        const float2 kv = __half22float2(*reinterpret_cast<const __half2*>(kr + d));
        s += q_s[warp * hd + d] * kv.x + q_s[warp * hd + d + 1] * kv.y;
      }
    }
    if (t0 + lane > my_last) s = -FLT_MAX;
    const float m_new = fmaxf(m, dev::warp_max(s));
    const float corr = __expf(m - m_new);
    const float p = t0 + lane > my_last ? 0.f : __expf(s - m_new);
    l = l * corr + dev::warp_sum(p);
    m = m_new;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) o[i] *= corr;
    const int jmax = min(kTile, my_last - t0 + 1);
    for (int j = 0; j < jmax; ++j) {
      const float pj = __shfl_sync(dev::kFullMask, p, j);
      const __half* vr = v_s + j * stride;
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane / 2; ++i) {
        const int d = 2 * lane + 64 * i;
        if (d < hd) {
          const float2 vv = __half22float2(*reinterpret_cast<const __half2*>(vr + d));
          o[2 * i] += pj * vv.x;
          o[2 * i + 1] += pj * vv.y;
        }
      }
    }
  }
  if (!active) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  float* orow = out + (static_cast<int64_t>(tok) * n_head + h) * hd;
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane / 2; ++i) {
    const int d = 2 * lane + 64 * i;
    if (d < hd) {
      orow[d] = o[2 * i] * inv;
      orow[d + 1] = o[2 * i + 1] * inv;
    }
  }
}

}  // namespace

void attention_prefill(const AttentionShape& s, const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  if (s.n_head <= 0 || s.n_kv <= 0 || s.n_head % s.n_kv != 0)
    throw Error("attention_prefill: n_head " + std::to_string(s.n_head) + " is not a multiple of n_kv " +
                std::to_string(s.n_kv));
  if (s.head_dim <= 0 || s.head_dim % 2 != 0 || s.head_dim > 2 * kMaxDimsPerLane * 16)
    throw Error("attention_prefill: head_dim " + std::to_string(s.head_dim) + " must be even and at most 256");
  if (pos0 < 0 || pos0 + n_tokens > s.ctx)
    throw Error("attention_prefill: positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + n_tokens - 1) +
                " do not fit the cache of " + std::to_string(s.ctx));
  const size_t smem = sizeof(float) * kWarps * s.head_dim + 2 * sizeof(__half) * kTile * row_stride(s.head_dim);
  const dim3 grid(static_cast<unsigned>((n_tokens + kWarps - 1) / kWarps), static_cast<unsigned>(s.n_head));
  attn_prefill_kernel<<<grid, kWarps * 32, smem, stream>>>(
      q, reinterpret_cast<const __half*>(k_cache), reinterpret_cast<const __half*>(v_cache), n_tokens, s.n_head,
      s.n_head / s.n_kv, s.head_dim, s.ctx, pos0, s.scale, out);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
