// Causal prefill attention, the simple tiled version (no tensor cores, f32
// arithmetic): f32 caches, and f16 caches that the flash kernel
// (attention_flash.cu) does not take (head_dim not a multiple of 8, unaligned
// pointers); also the baseline of the attention bench.
//
// A block = 8 warps = 8 consecutive query tokens of one head. K and V tiles of
// 32 positions are staged in shared memory (in the cache's element type T,
// __half or float) and shared by the 8 queries. Per tile, lane j scores key j
// against the warp's query, then an online softmax update, then lanes
// accumulate their head dims of P*V. All arithmetic is f32.
// A sliding window starts the walk at the tile holding the block's first
// visible key, and a warp skips tiles wholly before its query's window; a
// sink joins the denominator at the end (max and sum rescaled once).
//
// Rows of head_dim a multiple of 8 (and 16-byte aligned caches) are copied in
// 16-byte pieces, padded by 16 bytes (the 8 rows a quarter-warp reads at once
// fall on distinct banks) and scored 8 dims per shared-memory load; other
// even head_dims go element pair by pair, rows padded by one pair.
#include <cfloat>
#include <string>

#include "cuda/attention.h"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kTile = 32;
constexpr int kMaxDimsPerLane = 8;  // head_dim <= 256: 4 pairs per lane

// Padded shared-memory row, in elements.
template <class T>
__host__ __device__ inline int row_stride(int hd, bool vec) {
  return vec ? hd + 16 / static_cast<int>(sizeof(T)) : hd + 2;
}

template <class T>
size_t smem_bytes(int hd, bool vec) {
  return sizeof(float) * kWarps * hd + 2 * sizeof(T) * kTile * row_stride<T>(hd, vec);
}

// Copies one piece of a row: 16 bytes when vec, else two elements.
template <class T>
__device__ __forceinline__ void copy_piece(T* dst, const T* src, bool vec) {
  if (vec) {
    *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
  } else if constexpr (sizeof(T) == 2) {
    *reinterpret_cast<uint32_t*>(dst) = __ldg(reinterpret_cast<const unsigned int*>(src));
  } else {
    *reinterpret_cast<float2*>(dst) = __ldg(reinterpret_cast<const float2*>(src));
  }
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) attn_prefill_kernel(
    const float* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, int n_tokens, int n_head,
    int group, int hd, int64_t ctx, int pos0, float scale, bool vec, const float* __restrict__ sinks, int window,
    float* __restrict__ out) {
  using E = dev::KvElem<T>;
  extern __shared__ __align__(16) float sh[];
  const int h = blockIdx.y, kvh = h / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tok0 = blockIdx.x * kWarps;
  const int tok = tok0 + warp;
  const int stride = row_stride<T>(hd, vec);
  float* q_s = sh;                                      // [kWarps][hd]
  T* k_s = reinterpret_cast<T*>(q_s + kWarps * hd);     // [kTile][stride]
  T* v_s = k_s + kTile * stride;                        // [kTile][stride]

  const bool active = tok < n_tokens;
  for (int d = lane; d < hd; d += 32)
    q_s[warp * hd + d] = active ? q[(static_cast<int64_t>(tok) * n_head + h) * hd + d] * scale : 0.f;

  const int last_tok = min(tok0 + kWarps, n_tokens) - 1;
  const int kmax = pos0 + last_tok;  // last key any query of the block sees
  const int my_last = pos0 + tok;    // last key this warp's query sees
  // first keys of the block's first query and of this warp's (0 without a window)
  const int kmin = window > 0 ? max(0, pos0 + tok0 - window + 1) : 0;
  const int my_first = window > 0 ? max(0, my_last - window + 1) : 0;

  float m = -FLT_MAX, l = 0.f;
  float o[kMaxDimsPerLane];
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) o[i] = 0.f;

  const T* kh = kc + static_cast<int64_t>(kvh) * ctx * hd;
  const T* vh = vc + static_cast<int64_t>(kvh) * ctx * hd;
  const int piece = vec ? 16 / static_cast<int>(sizeof(T)) : 2;  // elements per copy
  const int pieces = hd / piece;
  for (int t0 = kmin / kTile * kTile; t0 <= kmax; t0 += kTile) {
    __syncthreads();  // previous tile fully used (and q_s written on the first pass)
    for (int i = threadIdx.x; i < kTile * pieces; i += kWarps * 32) {
      const int r = i / pieces, c = piece * (i % pieces);
      if (t0 + r <= kmax) {
        copy_piece(k_s + r * stride + c, kh + static_cast<int64_t>(t0 + r) * hd + c, vec);
        copy_piece(v_s + r * stride + c, vh + static_cast<int64_t>(t0 + r) * hd + c, vec);
      } else {  // past the block's last key: zeros (never weighted, but keep NaN out)
        for (int e = 0; e < piece; ++e) {
          k_s[r * stride + c + e] = E::from_float(0.f);
          v_s[r * stride + c + e] = E::from_float(0.f);
        }
      }
    }
    __syncthreads();
    if (!active || t0 > my_last || t0 + kTile <= my_first) continue;

    // score of key t0 + lane
    float s = 0.f;
    const T* kr = k_s + lane * stride;
    const float* qw = q_s + warp * hd;
    if (vec) {
      float s2 = 0.f;  // two chains
      int d = 0;
      float k8[8];
      for (; d + 16 <= hd; d += 16) {
        E::template load<8>(kr + d, k8);
        const float4 qa = *reinterpret_cast<const float4*>(qw + d), qb = *reinterpret_cast<const float4*>(qw + d + 4);
        s += qa.x * k8[0] + qa.y * k8[1] + qa.z * k8[2] + qa.w * k8[3] + qb.x * k8[4] + qb.y * k8[5] + qb.z * k8[6] +
             qb.w * k8[7];
        E::template load<8>(kr + d + 8, k8);
        const float4 qc = *reinterpret_cast<const float4*>(qw + d + 8), qd = *reinterpret_cast<const float4*>(qw + d + 12);
        s2 += qc.x * k8[0] + qc.y * k8[1] + qc.z * k8[2] + qc.w * k8[3] + qd.x * k8[4] + qd.y * k8[5] + qd.z * k8[6] +
              qd.w * k8[7];
      }
      if (d < hd) {
        E::template load<8>(kr + d, k8);
        for (int e = 0; e < 8; ++e) s += qw[d + e] * k8[e];
      }
      s += s2;
    } else {
      for (int d = 0; d < hd; d += 2) {
        float k2[2];
        E::template load<2>(kr + d, k2);
        s += qw[d] * k2[0] + qw[d + 1] * k2[1];
      }
    }
    const bool masked = t0 + lane > my_last || t0 + lane < my_first;
    if (masked) s = -FLT_MAX;
    const float m_new = fmaxf(m, dev::warp_max(s));
    const float corr = expf(m - m_new);
    const float p = masked ? 0.f : expf(s - m_new);
    l = l * corr + dev::warp_sum(p);
    m = m_new;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) o[i] *= corr;
    const int jmax = min(kTile, my_last - t0 + 1);
    for (int j = max(0, my_first - t0); j < jmax; ++j) {
      const float pj = __shfl_sync(dev::kFullMask, p, j);
      const T* vr = v_s + j * stride;
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane / 2; ++i) {
        const int d = 2 * lane + 64 * i;
        if (d < hd) {
          float v2[2];
          E::template load<2>(vr + d, v2);
          o[2 * i] += pj * v2[0];
          o[2 * i + 1] += pj * v2[1];
        }
      }
    }
  }
  if (!active) return;
  float inv = l > 0.f ? 1.f / l : 0.f;
  if (sinks) {  // denominator l e^(m - M) + e^(sink - M), M = max(m, sink); o carries e^m
    const float sink = __ldg(sinks + h), M = fmaxf(m, sink), c = expf(m - M);
    inv = c / (l * c + expf(sink - M));
  }
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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <class T>
void prefill_impl(const AttentionShape& s, const float* q, const T* kc, const T* vc, int n_tokens, int pos0,
                  float* out, cudaStream_t stream, const AttentionExtras& x) {
  if (n_tokens <= 0) return;
  if (s.n_head <= 0 || s.n_kv <= 0 || s.n_head % s.n_kv != 0)
    throw Error("attention_prefill: n_head " + std::to_string(s.n_head) + " is not a multiple of n_kv " +
                std::to_string(s.n_kv));
  if (s.head_dim <= 0 || s.head_dim % 2 != 0 || s.head_dim > 2 * kMaxDimsPerLane * 16)
    throw Error("attention_prefill: head_dim " + std::to_string(s.head_dim) + " must be even and at most 256");
  if (pos0 < 0 || pos0 + n_tokens > s.ctx)
    throw Error("attention_prefill: positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + n_tokens - 1) +
                " do not fit the cache of " + std::to_string(s.ctx));
  if (x.window < 0) throw Error("attention_prefill: sliding window " + std::to_string(x.window) + " must be >= 0");
  const bool vec = s.head_dim % 8 == 0 && aligned16(kc) && aligned16(vc);
  const size_t smem = smem_bytes<T>(s.head_dim, vec);
  // f32 tiles of head_dim 256 need 74 KB: opt in beyond the default 48 KB once.
  static const bool opted_in = [] {
    MS_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem_bytes<T>(256, true))));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>((n_tokens + kWarps - 1) / kWarps), static_cast<unsigned>(s.n_head));
  attn_prefill_kernel<T><<<grid, kWarps * 32, smem, stream>>>(q, kc, vc, n_tokens, s.n_head, s.n_head / s.n_kv,
                                                              s.head_dim, s.ctx, pos0, s.scale, vec, x.sinks, x.window, out);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_prefill_tiled(const AttentionShape& s, const float* q, const uint16_t* k_cache,
                             const uint16_t* v_cache, int n_tokens, int pos0, float* out, cudaStream_t stream,
                             const AttentionExtras& x) {
  prefill_impl(s, q, reinterpret_cast<const __half*>(k_cache), reinterpret_cast<const __half*>(v_cache), n_tokens,
               pos0, out, stream, x);
}

void attention_prefill(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream, const AttentionExtras& x) {
  prefill_impl(s, q, k_cache, v_cache, n_tokens, pos0, out, stream, x);
}

}  // namespace ms::cuda
