// Multi-sequence decode attention (see attention_multi.h).
//
// The kernels are attention_decode.cu's fast path (split-K over positions,
// block (split, KV head) of 4 warps for the G query heads of a KV head, online
// softmax in the exp2 domain, then a log-sum-exp merge of the splits) with a
// third grid dimension, the row: each row reads its slot and length from
// device memory. The arithmetic of every step is the single-sequence
// kernel's, statement for statement, so a row launched with the same split
// count gives the same bits (tests/cuda/attention_multi_test.cpp checks it).
// The merge is always a second kernel (the single-sequence path fuses it into
// its last block for up to 8 splits, with the same arithmetic).
#include <algorithm>
#include <cfloat>
#include <string>
#include <type_traits>

#include "cuda/attention_multi.h"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "cuda/pdl.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

// The constants and geometry of attention_decode.cu's fast path (kept equal:
// the bit-equality test fails if they drift apart).
constexpr int kFastWarps = 4;
constexpr int kTile = 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegBig = -1e30f;
constexpr int kSplitHeadsMaxLen = 1024;
constexpr int kFuseMaxSplits = 8;

__host__ __device__ constexpr int heads_ways(int g, bool split) { return !split ? 1 : g >= kFastWarps ? kFastWarps : g; }
__host__ __device__ constexpr int pos_ways(int g, bool split) { return kFastWarps / heads_ways(g, split); }
bool split_heads(int group, int hd, int max_kv_len) { return max_kv_len <= kSplitHeadsMaxLen || group * hd > 2048; }

__device__ __forceinline__ int window_start(int kv_len, int window) {
  return window > 0 ? max(0, kv_len - window) : 0;
}
int visible_len(int max_kv_len, int window) { return window > 0 ? std::min(max_kv_len, window) : max_kv_len; }

__device__ __forceinline__ float dot8(const float* k, const float* q) {
  const float4 qa = *reinterpret_cast<const float4*>(q), qb = *reinterpret_cast<const float4*>(q + 4);
  return qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] + qb.y * k[5] + qb.z * k[6] +
         qb.w * k[7];
}

template <class T, int G, int HD, bool SPLIT>
__global__ void __launch_bounds__(kFastWarps * 32) attn_multi_fast_kernel(
    const float* __restrict__ q, const T* __restrict__ k_base, const T* __restrict__ v_base, int64_t slot_stride,
    int n_slots, const int32_t* __restrict__ slots, int64_t ctx, int max_kv_len,
    const int32_t* __restrict__ kv_lens, float scale_log2, int window, int n_split, float* __restrict__ part_o,
    float2* __restrict__ part_ml) {
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

  const int split = blockIdx.x, kvh = blockIdx.y, row = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hw = warp % WH, pw = warp / WH;
  // programmatic dependent launch: q, the rows' slots and lengths (and this
  // step's K, V rows) come from the kernels before
  dev::pdl_wait();
  dev::pdl_trigger();
  const int slot = __ldg(slots + row);
  // a row with no valid slot covers no position (its partials say "empty")
  const int kv_len = slot >= 0 && slot < n_slots ? max(0, min(__ldg(kv_lens + row), max_kv_len)) : 0;
  const T* kc = k_base + static_cast<int64_t>(slot >= 0 && slot < n_slots ? slot : 0) * slot_stride;
  const T* vc = v_base + static_cast<int64_t>(slot >= 0 && slot < n_slots ? slot : 0) * slot_stride;
  q += static_cast<int64_t>(row) * gridDim.y * G * HD;
  part_o += static_cast<int64_t>(row) * gridDim.y * G * n_split * HD;
  part_ml += static_cast<int64_t>(row) * gridDim.y * G * n_split;
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



// Up to kFuseMaxSplits splits: block per (KV head, row), the arithmetic of
// attention_decode's in-block merge (its last block of a KV head). A warp per
// head for the split weights (lane = split), then each thread 4 dims at a
// time over all splits.
template <int G, int HD>
__global__ void __launch_bounds__(kFastWarps * 32) attn_multi_merge_small_kernel(
    const float* part_o, const float2* part_ml, int n_split, const float* __restrict__ sinks,
    float* __restrict__ out) {
  const int h0 = blockIdx.x * G, row = blockIdx.y;
  const int64_t n_head = static_cast<int64_t>(gridDim.x) * G;
  part_o += row * n_head * n_split * HD;
  part_ml += row * n_head * n_split;
  out += row * n_head * HD;
  dev::pdl_wait();  // the partials come from the kernel before
  dev::pdl_trigger();
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

// Block (query head, row), 256 threads: 256/hd segments of threads each sum a
// strided share of the splits for every dim; split weights 2^(m_s - M) are
// computed once into shared memory.
constexpr int kMergeThreads = 256;
__global__ void __launch_bounds__(kMergeThreads) attn_multi_merge_kernel(const float* __restrict__ part_o,
                                                                          const float2* __restrict__ part_ml, int hd,
                                                                          int n_split, const float* __restrict__ sinks,
                                                                          float* __restrict__ out) {
  extern __shared__ float wsh[];  // [n_split] weights, then [segments][hd] partial sums
  __shared__ float red[32];
  const int h = blockIdx.x, row = blockIdx.y;
  dev::pdl_wait();  // the partials come from the kernel before
  dev::pdl_trigger();
  part_o += static_cast<int64_t>(row) * gridDim.x * n_split * hd;
  part_ml += static_cast<int64_t>(row) * gridDim.x * n_split;
  out += static_cast<int64_t>(row) * gridDim.x * hd;
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

int sm_count() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      v = 132;
    return v > 0 ? v : 132;
  }();
  return n;
}

// attention_decode's fast_splits with the device's blocks shared by the rows.
int multi_splits(int group, int hd, int n_kv, int n_rows, int len, int n_sm) {
  const bool split = split_heads(group, hd, len);
  const int per_block = pos_ways(group, split) * kTile;
  const int by_len = (len + per_block - 1) / per_block;
  const int64_t units = static_cast<int64_t>(n_kv) * std::max(n_rows, 1);
  const int by_sm = static_cast<int>(((split ? 8 : 2) * static_cast<int64_t>(n_sm) + units - 1) / units);
  return std::max(1, std::min(by_len, by_sm));
}

size_t align256(size_t v) { return (v + 255) & ~size_t{255}; }
size_t part_o_bytes(const AttentionShape& s, int64_t rows_splits) {
  return align256(sizeof(float) * s.n_head * static_cast<size_t>(rows_splits) * s.head_dim);
}

template <class T, int G, int HD>
void launch_multi(const AttentionShape& s, const float* q, const T* kb, const T* vb, int64_t slot_stride,
                  int n_slots, int n_rows, const int32_t* slots, const int32_t* kv_len, int max_span, int len,
                  int ns, float* part_o, float2* part_ml, float* out, const AttentionExtras& x,
                  cudaStream_t stream) {
  const dim3 grid(ns, s.n_kv, n_rows);
  const float sl = s.scale * kLog2e;
  if constexpr (G * HD <= 4096) {
    if (split_heads(G, HD, len)) {
      MS_CUDA_CHECK(launch_pdl(attn_multi_fast_kernel<T, G, HD, true>, grid, dim3(kFastWarps * 32), 0, stream, q, kb,
                               vb, slot_stride, n_slots, slots, s.ctx, max_span, kv_len, sl, x.window, ns, part_o,
                               part_ml));
    } else if constexpr (G * HD <= 2048) {
      MS_CUDA_CHECK(launch_pdl(attn_multi_fast_kernel<T, G, HD, false>, grid, dim3(kFastWarps * 32), 0, stream, q,
                               kb, vb, slot_stride, n_slots, slots, s.ctx, max_span, kv_len, sl, x.window, ns,
                               part_o, part_ml));
    }
    if (ns <= kFuseMaxSplits) {
      MS_CUDA_CHECK(launch_pdl(attn_multi_merge_small_kernel<G, HD>, dim3(s.n_kv, n_rows), dim3(kFastWarps * 32), 0,
                               stream, static_cast<const float*>(part_o), static_cast<const float2*>(part_ml), ns,
                               x.sinks, out));
    } else {
      MS_CUDA_CHECK(launch_pdl(attn_multi_merge_kernel, dim3(s.n_head, n_rows), dim3(kMergeThreads),
                               sizeof(float) * (ns + kMergeThreads), stream, static_cast<const float*>(part_o),
                               static_cast<const float2*>(part_ml), HD, ns, x.sinks, out));
    }
  }
}

template <class T, int G>
void launch_multi_g(int hd, const AttentionShape& s, const float* q, const T* kb, const T* vb, int64_t slot_stride,
                    int n_slots, int n_rows, const int32_t* slots, const int32_t* kv_len, int max_span, int len,
                    int ns, float* part_o, float2* part_ml, float* out, const AttentionExtras& x,
                    cudaStream_t stream) {
  switch (hd) {
#define MS_MULTI_HD(HD)                                                                                            \
  case HD:                                                                                                         \
    launch_multi<T, G, HD>(s, q, kb, vb, slot_stride, n_slots, n_rows, slots, kv_len, max_span, len, ns, part_o,  \
                           part_ml, out, x, stream);                                                               \
    break;
    MS_MULTI_HD(64) MS_MULTI_HD(128) MS_MULTI_HD(256)
#undef MS_MULTI_HD
    default: break;
  }
}

template <class T>
void multi_impl(const AttentionShape& s, const float* q, const T* kb, const T* vb, int64_t slot_stride, int n_slots,
                int n_rows, const int32_t* slots, const int32_t* kv_len, int max_span, float* out, void* scratch,
                cudaStream_t stream, const AttentionExtras& x) {
  if (!attention_decode_multi_supported(s))
    throw Error("attention_decode_multi: shape n_head " + std::to_string(s.n_head) + " n_kv " +
                std::to_string(s.n_kv) + " head_dim " + std::to_string(s.head_dim) +
                " not served (head_dim 64/128/256, n_head/n_kv in 1,2,4,8,16; attention_decode serves it)");
  if (n_rows <= 0) return;
  if (n_rows > 65535) throw Error("attention_decode_multi: " + std::to_string(n_rows) + " rows (at most 65535)");
  if (max_span <= 0 || max_span > s.ctx)
    throw Error("attention_decode_multi: max_span " + std::to_string(max_span) + " outside 1.." +
                std::to_string(s.ctx));
  if (x.window < 0) throw Error("attention_decode_multi: sliding window " + std::to_string(x.window) + " must be >= 0");
  if (n_slots <= 0 || slot_stride < 0)
    throw Error("attention_decode_multi: " + std::to_string(n_slots) + " slots of stride " +
                std::to_string(slot_stride));
  if (slots == nullptr || kv_len == nullptr) throw Error("attention_decode_multi: slots and kv_len are required");
  const int len = visible_len(max_span, x.window);
  const int ns = multi_splits(s.n_head / s.n_kv, s.head_dim, s.n_kv, n_rows, len, sm_count());
  char* b = static_cast<char*>(scratch);
  auto* part_o = reinterpret_cast<float*>(b);
  auto* part_ml = reinterpret_cast<float2*>(b + part_o_bytes(s, static_cast<int64_t>(n_rows) * ns));
  switch (s.n_head / s.n_kv) {
#define MS_MULTI_G(G)                                                                                          \
  case G:                                                                                                      \
    launch_multi_g<T, G>(s.head_dim, s, q, kb, vb, slot_stride, n_slots, n_rows, slots, kv_len, max_span, len, \
                         ns, part_o, part_ml, out, x, stream);                                                 \
    break;
    MS_MULTI_G(1) MS_MULTI_G(2) MS_MULTI_G(4) MS_MULTI_G(8) MS_MULTI_G(16)
#undef MS_MULTI_G
    default: break;
  }
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_decode_multi_supported(const AttentionShape& s) {
  if (s.n_head <= 0 || s.n_kv <= 0 || s.n_head % s.n_kv != 0) return false;
  const int g = s.n_head / s.n_kv;
  return (g == 1 || g == 2 || g == 4 || g == 8 || g == 16) &&
         (s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256) && g * s.head_dim <= 4096;
}

int attention_decode_multi_splits(const AttentionShape& s, int n_rows, int span) {
  if (!attention_decode_multi_supported(s)) return 1;
  return multi_splits(s.n_head / s.n_kv, s.head_dim, s.n_kv, n_rows, std::max(span, 1), sm_count());
}

size_t attention_decode_multi_scratch_bytes(const AttentionShape& s, int max_rows, int max_span) {
  if (!attention_decode_multi_supported(s)) return 256;
  // The most (rows x splits) of any call within the sizing: the count is
  // monotone in the length within each geometry, so the two geometries' ends.
  int64_t most = 1;
  const int span = std::max(max_span, 1);
  for (int r = 1; r <= std::max(max_rows, 1); ++r) {
    const int a = attention_decode_multi_splits(s, r, std::min(span, kSplitHeadsMaxLen));
    const int c = attention_decode_multi_splits(s, r, span);
    most = std::max(most, static_cast<int64_t>(r) * std::max(a, c));
  }
  return part_o_bytes(s, most) + sizeof(float2) * s.n_head * static_cast<size_t>(most);
}

void attention_decode_multi(const AttentionShape& s, const float* q, const uint16_t* k_base, const uint16_t* v_base,
                            int64_t slot_stride, int n_slots, int n_rows, const int32_t* slots, const int32_t* kv_len,
                            int max_span, float* out, void* scratch, cudaStream_t stream, const AttentionExtras& x) {
  multi_impl(s, q, reinterpret_cast<const __half*>(k_base), reinterpret_cast<const __half*>(v_base), slot_stride,
             n_slots, n_rows, slots, kv_len, max_span, out, scratch, stream, x);
}

void attention_decode_multi(const AttentionShape& s, const float* q, const float* k_base, const float* v_base,
                            int64_t slot_stride, int n_slots, int n_rows, const int32_t* slots, const int32_t* kv_len,
                            int max_span, float* out, void* scratch, cudaStream_t stream, const AttentionExtras& x) {
  multi_impl(s, q, k_base, v_base, slot_stride, n_slots, n_rows, slots, kv_len, max_span, out, scratch, stream, x);
}

void attention_decode_multi(const AttentionShape& s, const float* q, const BlockQ8_0* k_base,
                            const BlockQ8_0* v_base, int64_t slot_stride, int n_slots, int n_rows,
                            const int32_t* slots, const int32_t* kv_len, int max_span, float* out, void* scratch,
                            cudaStream_t stream, const AttentionExtras& x) {
  check_q8_0_head_dim("attention_decode_multi", s.head_dim);
  multi_impl(s, q, k_base, v_base, slot_stride, n_slots, n_rows, slots, kv_len, max_span, out, scratch, stream, x);
}

}  // namespace ms::cuda
