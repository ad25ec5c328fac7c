// The fast path of decode attention (split-K over positions, flash-decoding)
// as device functions, shared by the single-sequence kernels
// (attention_decode.cu) and the multi-sequence ones (attention_multi.cu), so
// both run the same arithmetic: a row of a multi-sequence launch gives the
// bits of attention_decode when both use the same split count.
//
// Block (split, KV head) of 4 warps covers one chunk of the positions for all
// G query heads of its KV head; partial outputs with their {max, sum} (log2
// units) per split, merged by the last block (up to kFuseMaxSplits) or by a
// block per query head. Internal to the CUDA kernels.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "cuda/attention.h"
#include "cuda/common.cuh"
#include "cuda/kv_elem.cuh"

namespace ms::cuda::decode_fast {

// The first position the query (at kv_len - 1) sees.
__device__ __forceinline__ int window_start(int kv_len, int window) {
  return window > 0 ? max(0, kv_len - window) : 0;
}

constexpr int kFastWarps = 4;
constexpr int kTile = 32;  // positions per warp step (one per lane)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegBig = -1e30f;  // "no score yet": finite, so 2^(kNegBig - m) is 0, never NaN

// Warps of a block split the G query heads WH ways and the positions WP ways
// (WH * WP = 4). SPLIT (short contexts): WH = min(G, 4), so a lane's serial
// work per position is G/4 heads; the latency of one tile is what counts.
// Long contexts (!SPLIT): WH = 1, every warp serves all G heads on its own
// tiles, so K and V are read once per block (fewer instructions per byte).
__host__ __device__ constexpr int heads_ways(int g, bool split) { return !split ? 1 : g >= kFastWarps ? kFastWarps : g; }
__host__ __device__ constexpr int pos_ways(int g, bool split) { return kFastWarps / heads_ways(g, split); }

// Up to this many positions the split-heads geometry runs: it won at short
// contexts and lost at long ones (32/4 heads of 128; figures in
// bench/results/cuda_kernels.md, "What changed against the previous table").
constexpr int kSplitHeadsMaxLen = 1024;
// Whole-G-per-warp keeps G*HD/32 output floats per lane in registers.
inline bool split_heads(int group, int hd, int max_kv_len) { return max_kv_len <= kSplitHeadsMaxLen || group * hd > 2048; }

// Splits per KV head: one block step of positions each (split heads: up to
// ~8 blocks per SM) or up to ~2 blocks per SM (long contexts: fewer partial
// outputs to write and merge). n_rows (attention_decode_multi's rows, each
// its own blocks) share the device's blocks.
inline int fast_splits(int group, int hd, int n_kv, int max_kv_len, int n_sm, int n_rows = 1) {
  const bool split = split_heads(group, hd, max_kv_len);
  const int per_block = pos_ways(group, split) * kTile;  // positions a block covers in one step
  const int by_len = (max_kv_len + per_block - 1) / per_block;
  const int64_t units = static_cast<int64_t>(n_kv) * (n_rows > 1 ? n_rows : 1);
  const int by_sm = static_cast<int>(((split ? 8 : 2) * static_cast<int64_t>(n_sm) + units - 1) / units);
  return std::max(1, std::min(by_len, by_sm));
}

// Up to this many splits, the last block of each KV head merges them in the
// same launch (saving the merge kernel's launch); beyond it, the merge kernel
// below spreads the work over one block per query head (fusing 16-32 splits
// measured slower). Figures: bench/results/cuda_kernels.md, "Figures moved
// from code comments".
constexpr int kFuseMaxSplits = 8;

inline bool fast_ok(const AttentionShape& s) {
  const int g = s.n_head / s.n_kv;
  return (g == 1 || g == 2 || g == 4 || g == 8 || g == 16) && (s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256) &&
         g * s.head_dim <= 4096;
}

// 8 key elements (as floats) dotted with q[0..7] (shared memory, 16-byte aligned).
__device__ __forceinline__ float dot8(const float* k, const float* q) {
  const float4 qa = *reinterpret_cast<const float4*>(q), qb = *reinterpret_cast<const float4*>(q + 4);
  return qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] + qb.y * k[5] + qb.z * k[6] +
         qb.w * k[7];
}

// The last block of a KV head: out for its G heads from the n_split (<= 8)
// partial outputs, read through L2 (other blocks wrote them). A warp per head
// for the split weights (lane = split), then each thread 4 dims at a time
// over all splits, the loads unrolled so that they go out together.
template <int G, int HD>
__device__ __forceinline__ void merge_splits_in_block(const float* part_o, const float2* part_ml, int h0, int n_split,
                                      const float* __restrict__ sinks, float* __restrict__ out) {
  __shared__ float w_s[G][kFuseMaxSplits];
  __shared__ float inv_l[G];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int g = warp; g < G; g += kFastWarps) {
    const float2 v = lane < n_split ? __ldcg(part_ml + static_cast<int64_t>(h0 + g) * n_split + lane)
                                    : make_float2(kNegBig, 0.f);
    const float sk = sinks ? __ldg(sinks + h0 + g) * kLog2e : kNegBig;
    const float M = fmaxf(dev::warp_max(v.x), sk);
    const float w = lane < n_split ? exp2f(v.x - M) : 0.f;
    float L = dev::warp_sum(v.y * w);
    if (sinks) L += exp2f(sk - M);
    if (lane < kFuseMaxSplits) w_s[g][lane] = w;
    if (lane == 0) inv_l[g] = L > 0.f ? 1.f / L : 0.f;
  }
  __syncthreads();
  constexpr int kQuads = G * HD / 4;  // float4 outputs of the block
  for (int i = threadIdx.x; i < kQuads; i += kFastWarps * 32) {
    const int g = i / (HD / 4), d = 4 * (i % (HD / 4));
    const float* po = part_o + static_cast<int64_t>(h0 + g) * n_split * HD + d;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s = 0; s < kFuseMaxSplits; ++s) {
      if (s < n_split) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(po + static_cast<int64_t>(s) * HD));
        const float w = w_s[g][s];
        acc.x += v.x * w; acc.y += v.y * w; acc.z += v.z * w; acc.w += v.w * w;
      }
    }
    const float il = inv_l[g];
    *reinterpret_cast<float4*>(out + static_cast<int64_t>(h0 + g) * HD + d) =
        make_float4(acc.x * il, acc.y * il, acc.z * il, acc.w * il);
  }
}

// Block (split, kv head) of a kernel (the caller waited for the kernel before:
// q and the cache rows are ready). kv_len: the positions the query sees,
// clamped. Writes the block's partials. Warp w takes heads hw*GW .. +GW (hw = w % WH) of the
// block's G, and the 32-position tiles pw, pw+WP, ... (pw = w / WH) of the
// chunk: lane = position for the scores, lane = HD/32 dims for P*V.
template <class T, int G, int HD, bool SPLIT>
__device__ __forceinline__ void split_partials(const float* __restrict__ q, const T* __restrict__ kc,
                                               const T* __restrict__ vc, int64_t ctx, int kv_len, float scale_log2,
                                               int window, int n_split, int split, int kvh,
                                               float* __restrict__ part_o, float2* __restrict__ part_ml) {
  constexpr int WH = heads_ways(G, SPLIT), WP = pos_ways(G, SPLIT), GW = G / WH;
  constexpr int D = HD / 32;  // dims per lane in P*V
  // V rows loaded at once in P*V: 64 floats of registers per lane
  constexpr int kVRows = 64 / D < kTile ? 64 / D : kTile;
  // q_s and p_s during the sweep; o_s (the warps' partial outputs) reuses them after it
  constexpr int kSweep = G * HD + kFastWarps * kTile * GW, kMerge = kFastWarps * GW * HD;
  __shared__ __align__(16) float buf[kSweep > kMerge ? kSweep : kMerge];
  __shared__ float m_s[kFastWarps][GW], l_s[kFastWarps][GW];
  float* q_s = buf;                                                                  // [G][HD], pre-scaled
  float (*p_s)[kTile][GW] = reinterpret_cast<float (*)[kTile][GW]>(buf + G * HD);  // [warp][pos][GW]
  float (*o_s)[GW * HD] = reinterpret_cast<float (*)[GW * HD]>(buf);                // [warp][GW*HD]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hw = warp % WH, pw = warp / WH;
  const int start = window_start(kv_len, window);
  const int chunk = ((kv_len - start + n_split - 1) / n_split + kTile - 1) / kTile * kTile;
  const int t0 = start + split * chunk, t1 = min(kv_len, t0 + chunk);
  const int h0 = kvh * G;

  for (int i = threadIdx.x; i < G * HD; i += kFastWarps * 32) q_s[i] = q[static_cast<int64_t>(h0) * HD + i] * scale_log2;
  __syncthreads();
  const float* qw = q_s + hw * GW * HD;

  float m[GW], l[GW], o[GW][D];
#pragma unroll
  for (int g = 0; g < GW; ++g) {
    m[g] = kNegBig;
    l[g] = 0.f;
#pragma unroll
    for (int d = 0; d < D; ++d) o[g][d] = 0.f;
  }

  using E = dev::KvElem<T>;
  constexpr int U = dev::kv_row_units<T>(HD);  // units of T per row
  const T* kbase = kc + static_cast<int64_t>(kvh) * ctx * U;
  const T* vbase = vc + static_cast<int64_t>(kvh) * ctx * U;
  for (int tt = t0 + pw * kTile; tt < t1; tt += WP * kTile) {
    const int pos = tt + lane;
    const bool valid = pos < t1;
    const T* kr = kbase + static_cast<int64_t>(valid ? pos : tt) * U;
    float s[GW];
#pragma unroll
    for (int g = 0; g < GW; ++g) s[g] = 0.f;
#pragma unroll  // all K loads of the row in flight at once (unroll 4 spilled at G=8, HD=128)
    for (int c = 0; c < HD / 8; ++c) {
      float kv[8];
      E::template ldg_at<8>(kr, c * 8, kv);
#pragma unroll
      for (int g = 0; g < GW; ++g) s[g] += dot8(kv, qw + g * HD + c * 8);
    }
    // online softmax, per head, over the warp's 32 positions
#pragma unroll
    for (int g = 0; g < GW; ++g) {
      const float sg = valid ? s[g] : -INFINITY;
      const float mn = fmaxf(m[g], dev::warp_max(sg));
      const float corr = exp2f(m[g] - mn);
      const float pg = exp2f(sg - mn);
      l[g] = l[g] * corr + dev::warp_sum(pg);
      m[g] = mn;
#pragma unroll
      for (int d = 0; d < D; ++d) o[g][d] *= corr;
      p_s[warp][lane][g] = pg;  // 0 for positions past the end
    }
    __syncwarp();
    // P*V: kVRows rows of V per batch, all loaded before they are used (the
    // load latency, not the arithmetic, is the time at short contexts). Rows
    // past the end re-read the last valid one; their weight is 0.
    const int last = min(kTile, t1 - tt) - 1;
    const T* vr = vbase + static_cast<int64_t>(tt) * U;
#pragma unroll
    for (int j0 = 0; j0 < kTile; j0 += kVRows) {
      if (j0 > last) break;
      float v[kVRows][D];
#pragma unroll
      for (int j = 0; j < kVRows; ++j)
        E::template ldg_at<D>(vr + static_cast<int64_t>(min(j0 + j, last)) * U, lane * D, v[j]);
#pragma unroll
      for (int j = 0; j < kVRows; ++j) {
#pragma unroll
        for (int g = 0; g < GW; ++g) {
          const float pg = p_s[warp][j0 + j][g];
#pragma unroll
          for (int d = 0; d < D; ++d) o[g][d] += pg * v[j][d];
        }
      }
    }
    __syncwarp();
  }

  // merge the WP warps that share heads
  __syncthreads();  // every warp is done with q_s / p_s
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GW; ++g) { m_s[warp][g] = m[g]; l_s[warp][g] = l[g]; }
  }
#pragma unroll
  for (int g = 0; g < GW; ++g)
#pragma unroll
    for (int d = 0; d < D; ++d) o_s[warp][g * HD + lane * D + d] = o[g][d];
  __syncthreads();
  for (int i = threadIdx.x; i < G * HD; i += kFastWarps * 32) {
    const int g = i / HD, ghw = g / GW, gl = g % GW, d = i % HD;
    float M = kNegBig;
#pragma unroll
    for (int p = 0; p < WP; ++p) M = fmaxf(M, m_s[p * WH + ghw][gl]);
    float acc = 0.f;
#pragma unroll
    for (int p = 0; p < WP; ++p) acc += o_s[p * WH + ghw][gl * HD + d] * exp2f(m_s[p * WH + ghw][gl] - M);
    part_o[(static_cast<int64_t>(h0 + g) * n_split + split) * HD + d] = acc;
  }
  if (threadIdx.x < G) {
    const int g = threadIdx.x, ghw = g / GW, gl = g % GW;
    float M = kNegBig, L = 0.f;
    for (int p = 0; p < WP; ++p) M = fmaxf(M, m_s[p * WH + ghw][gl]);
    for (int p = 0; p < WP; ++p) L += l_s[p * WH + ghw][gl] * exp2f(m_s[p * WH + ghw][gl] - M);
    part_ml[static_cast<int64_t>(h0 + g) * n_split + split] = make_float2(M, L);
  }
}

// Query head h's output from n_split partials, by a block of kMergeThreads
// (the caller waited for the partials): 256/hd segments of threads each sum
// a strided share of the splits for every dim; split weights 2^(m_s - M) are
// computed once into dynamic shared memory (n_split + kMergeThreads floats).
constexpr int kMergeThreads = 256;
__device__ __forceinline__ void merge_head(const float* __restrict__ part_o, const float2* __restrict__ part_ml,
                                           int hd, int n_split, const float* __restrict__ sinks,
                                           float* __restrict__ out, int h) {
  extern __shared__ float wsh[];  // [n_split] weights, then [segments][hd] partial sums
  __shared__ float red[32];
  const float2* mlh = part_ml + static_cast<int64_t>(h) * n_split;
  float M = kNegBig;
  for (int s = threadIdx.x; s < n_split; s += kMergeThreads) M = fmaxf(M, mlh[s].x);
  M = dev::warp_max(M);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = M;
  __syncthreads();
  M = sinks ? __ldg(sinks + h) * kLog2e : kNegBig;
  for (int w = 0; w < kMergeThreads / 32; ++w) M = fmaxf(M, red[w]);
  float L = 0.f;
  for (int s = threadIdx.x; s < n_split; s += kMergeThreads) {
    const float2 ml = mlh[s];
    const float w = exp2f(ml.x - M);
    wsh[s] = w;
    L += ml.y * w;
  }
  L = dev::block_sum(L, red);  // syncs, so wsh is complete
  if (sinks) L += exp2f(__ldg(sinks + h) * kLog2e - M);
  const float invL = L > 0.f ? 1.f / L : 0.f;
  const int nseg = kMergeThreads / hd;  // hd <= 256
  float* seg_sum = wsh + n_split;
  const int d = threadIdx.x % hd, seg = threadIdx.x / hd;
  if (seg < nseg) {
    float acc = 0.f;
    const float* po = part_o + static_cast<int64_t>(h) * n_split * hd + d;
    for (int s = seg; s < n_split; s += nseg) acc += po[static_cast<int64_t>(s) * hd] * wsh[s];
    seg_sum[seg * hd + d] = acc;
  }
  __syncthreads();
  if (seg == 0) {
    float acc = 0.f;
    for (int k = 0; k < nseg; ++k) acc += seg_sum[k * hd + d];
    out[static_cast<int64_t>(h) * hd + d] = acc * invL;
  }
}

}  // namespace ms::cuda::decode_fast
