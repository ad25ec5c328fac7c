// Decode attention, split-K over the KV sequence (flash-decoding).
//
// Fast path (head_dim 64, 128 or 256, G = n_head/n_kv in {1,2,4,8,16}):
// block (split, kv head) of 4 warps covers one chunk of the sequence for all
// G query heads of its KV head (K and V come from HBM once per group). A
// lane owns one position for the scores (its K row loaded whole, q from
// shared memory) and head_dim/32 dims for P*V (coalesced V rows, a batch of
// rows loaded before use), with an online softmax per warp (exp2 domain).
// Two geometries: up to 1024 positions the warps split the G heads (up to 4
// ways, so a lane's serial work per position is G/4 heads) and one block step
// of positions per split; beyond, every warp serves all G heads on its own
// tiles and splits are capped at ~2 blocks per SM (fewer instructions per
// byte, fewer partials). Warps sharing heads merge in shared memory; the
// block writes an unnormalised partial output with its max m and sum l. The
// chunk length comes from the device kv_len, so a captured graph stays
// balanced as the sequence grows. The splits are merged
//   out = sum_s o_s 2^(m_s-M) / sum_s l_s 2^(m_s-M)
// by the last block of each KV head to finish (up to 8 splits: one launch)
// or by a second kernel (block per query head).
//
// Long contexts over f16 and q8_0 caches (more than decode_long::kMinLen
// visible positions, shapes decode_long::usable takes): the tensor-core
// flash-decoding kernel of attention_decode_long.cu writes the partials and
// its merge kernel combines them; the fast path's long geometry then
// serves f32 caches and the shapes it does not take.
//
// Generic path (any even head_dim, any group up to 16): fixed chunks of
// kSplit positions, a warp per position for the scores, natural-exp domain.
//
// Sliding window (gpt-oss): the splits cover the window's positions
// kv_len - window .. kv_len - 1 only (fewer splits; the start follows the
// device kv_len). Sinks: one more logit per head in the merge's max and
// denominator (a split's partials do not carry it).
//
// The fast path's kernels and the long kernel's are programmatic dependent
// launches (pdl.cuh): they wait for the kernel before them (q, this step's K
// and V row) and let the one after them launch early.
//
// Every kernel is templated on the cache's element type T (__half, float or
// Q8_0 blocks, kv_elem.cuh: rows addressed in units of T, elements read by
// index); scores, softmax and sums are f32 either way.
#include <algorithm>
#include <cfloat>
#include <string>
#include <type_traits>

#include "cuda/attention.h"
#include "cuda/attention_decode_long.h"
#include "cuda/attention_decode_fast.cuh"
#include "cuda/common.cuh"
#include "cuda/last_block.cuh"
#include "cuda/pdl.cuh"
#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kSplit = 128;
constexpr int kThreads = 128;
constexpr int kMaxGroup = 16;
constexpr int kMaxHeadDim = 256;

__host__ __device__ inline int n_splits(int kv_len) { return (kv_len + kSplit - 1) / kSplit; }
// The first position the query (at kv_len - 1) sees.
__device__ __forceinline__ int window_start(int kv_len, int window) {
  return window > 0 ? max(0, kv_len - window) : 0;
}
// Positions the splits have to cover, for sizing launches from max_kv_len.
int visible_len(int max_kv_len, int window) { return window > 0 ? std::min(max_kv_len, window) : max_kv_len; }

template <class T>
__global__ void __launch_bounds__(kThreads) attn_decode_split_kernel(
    const float* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, int n_kv, int group,
    int hd, int64_t ctx, int max_kv_len, const int32_t* __restrict__ kv_len_dev, float scale, int window,
    int n_split_max, float* __restrict__ part_o, float2* __restrict__ part_ml) {
  extern __shared__ float sh[];
  const int split = blockIdx.x, kvh = blockIdx.y;
  const int kv_len = kv_len_dev ? min(__ldg(kv_len_dev), max_kv_len) : max_kv_len;
  const int t0 = window_start(kv_len, window) + split * kSplit;
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
  using E = dev::KvElem<T>;
  const int units = dev::kv_row_units<T>(hd);  // of T per row
  const T* kbase = kc + (static_cast<int64_t>(kvh) * ctx + t0) * units;
  for (int p = warp; p < len; p += kThreads / 32) {
    const T* kr = kbase + static_cast<int64_t>(p) * units;
    float acc[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) acc[g] = 0.f;
    for (int d = 2 * lane; d < hd; d += 64) {
      float kv[2];
      E::template ldg_at<2>(kr, d, kv);
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < group) acc[g] += q_s[g * hd + d] * kv[0] + q_s[g * hd + d + 1] * kv[1];
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
      const float e = expf(sc[g * kSplit + p] - m);
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
    const T* vbase = vc + (static_cast<int64_t>(kvh) * ctx + t0) * units;
    for (int p = grp; p < len; p += ngrp) {
      float v[2];
      E::template ldg_at<2>(vbase + static_cast<int64_t>(p) * units, 2 * pr, v);
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g < group) {
          const float w = sc[g * kSplit + p];
          ax[g] += w * v[0];
          ay[g] += w * v[1];
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
    const int32_t* __restrict__ kv_len_dev, const float* __restrict__ sinks, int window, int n_split_max,
    float* __restrict__ out) {
  const int h = blockIdx.x;
  const int kv_len = kv_len_dev ? min(__ldg(kv_len_dev), max_kv_len) : max_kv_len;
  const int ns = n_splits(kv_len - window_start(kv_len, window));
  const float2* mlh = part_ml + static_cast<int64_t>(h) * n_split_max;
  float M = -FLT_MAX;
  for (int s = 0; s < ns; ++s) M = fmaxf(M, mlh[s].x);
  if (sinks) M = fmaxf(M, __ldg(sinks + h));
  float L = 0.f;
  for (int s = 0; s < ns; ++s) L += mlh[s].y * expf(mlh[s].x - M);
  if (sinks) L += expf(__ldg(sinks + h) - M);
  const float invL = L > 0.f ? 1.f / L : 0.f;
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float acc = 0.f;
    for (int s = 0; s < ns; ++s) acc += part_o[(static_cast<int64_t>(h) * n_split_max + s) * hd + d] * expf(mlh[s].x - M);
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


// ------------------------------------------------------------------ fast path
// The kernels' bodies are attention_decode_fast.cuh's device functions
// (shared with attention_multi.cu).
using decode_fast::fast_ok;
using decode_fast::fast_splits;
using decode_fast::kFastWarps;
using decode_fast::kFuseMaxSplits;
using decode_fast::kLog2e;
using decode_fast::kMergeThreads;
using decode_fast::kSplitHeadsMaxLen;
using decode_fast::split_heads;

// Block (split, kv head): the partials of its chunk. counters (n_split <=
// kFuseMaxSplits): one per KV head, zero on entry and on exit; the block that
// counts last merges (out). Null: partials only.
template <class T, int G, int HD, bool SPLIT>
__global__ void __launch_bounds__(kFastWarps * 32) attn_decode_fast_kernel(
    const float* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, int64_t ctx,
    int max_kv_len, const int32_t* __restrict__ kv_len_dev, float scale_log2, const float* __restrict__ sinks,
    int window, int n_split, float* __restrict__ part_o, float2* __restrict__ part_ml, unsigned int* counters,
    float* __restrict__ out) {
  const int kv_len = kv_len_dev ? max(0, min(__ldg(kv_len_dev), max_kv_len)) : max_kv_len;
  // programmatic dependent launch: q (and this step's K, V row) come from the kernel before
  dev::pdl_wait();
  dev::pdl_trigger();
  decode_fast::split_partials<T, G, HD, SPLIT>(q, kc, vc, ctx, kv_len, scale_log2, window, n_split, blockIdx.x,
                                               blockIdx.y, part_o, part_ml);
  if (counters == nullptr) return;
  // The last of this KV head's blocks merges the splits.
  if (!dev::last_block_to_arrive(counters + blockIdx.y, gridDim.x)) return;
  decode_fast::merge_splits_in_block<G, HD>(part_o, part_ml, blockIdx.y * G, n_split, sinks, out);
}

// Block per query head.
__global__ void __launch_bounds__(kMergeThreads) attn_decode_fast_merge_kernel(const float* __restrict__ part_o,
                                                                                const float2* __restrict__ part_ml,
                                                                                int hd, int n_split,
                                                                                const float* __restrict__ sinks,
                                                                                float* __restrict__ out) {
  dev::pdl_wait();  // the partials come from the kernel before
  dev::pdl_trigger();
  decode_fast::merge_head(part_o, part_ml, hd, n_split, sinks, out, blockIdx.x);
}

struct FastOut {
  float* part_o;
  float2* part_ml;
  unsigned int* counters;  // null: merge kernel
  float* out;
};

template <class T, int G, int HD>
void launch_fast(const AttentionShape& s, const float* q, const T* kc, const T* vc, int max_kv_len,
                 const int32_t* kv_len, int n_split, const FastOut& o, const AttentionExtras& x, cudaStream_t stream) {
  const dim3 grid(n_split, s.n_kv);
  const float sl = s.scale * kLog2e;
  if constexpr (G * HD <= 4096) {
    if (split_heads(G, HD, visible_len(max_kv_len, x.window))) {
      MS_CUDA_CHECK(launch_pdl(attn_decode_fast_kernel<T, G, HD, true>, grid, dim3(kFastWarps * 32), 0, stream, q, kc,
                               vc, s.ctx, max_kv_len, kv_len, sl, x.sinks, x.window, n_split, o.part_o, o.part_ml,
                               o.counters, o.out));
    } else if constexpr (G * HD <= 2048) {
      MS_CUDA_CHECK(launch_pdl(attn_decode_fast_kernel<T, G, HD, false>, grid, dim3(kFastWarps * 32), 0, stream, q,
                               kc, vc, s.ctx, max_kv_len, kv_len, sl, x.sinks, x.window, n_split, o.part_o,
                               o.part_ml, o.counters, o.out));
    }
  }
}

template <class T, int G>
void launch_fast_g(const AttentionShape& s, const float* q, const T* kc, const T* vc, int max_kv_len,
                   const int32_t* kv_len, int n_split, const FastOut& o, const AttentionExtras& x,
                   cudaStream_t stream) {
  switch (s.head_dim) {
    case 64: launch_fast<T, G, 64>(s, q, kc, vc, max_kv_len, kv_len, n_split, o, x, stream); break;
    case 128: launch_fast<T, G, 128>(s, q, kc, vc, max_kv_len, kv_len, n_split, o, x, stream); break;
    case 256: launch_fast<T, G, 256>(s, q, kc, vc, max_kv_len, kv_len, n_split, o, x, stream); break;
    default: break;
  }
}

// P*V gives each lane head_dim/32 dims (2, 4 or 8), read with one or two vector loads.
bool fast_dims_ok(int hd) { return hd == 64 || hd == 128 || hd == 256; }

int sm_count() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      v = 132;
    return v > 0 ? v : 132;
  }();
  return n;
}

}  // namespace

namespace {

size_t align256(size_t v) { return (v + 255) & ~size_t{255}; }

// Scratch: the fused merge's counters first (a fixed place, whatever the
// split count, so they stay zero between calls of different lengths), then
// the partial outputs [n_head][n_split][head_dim] and their {m, l}.
struct Scratch {
  unsigned int* counters;
  float* part_o;
  float2* part_ml;
};
size_t counters_bytes(const AttentionShape& s) { return align256(sizeof(unsigned int) * std::max(s.n_kv, 1)); }
size_t partials_bytes(const AttentionShape& s, int ns) {
  return align256(sizeof(float) * s.n_head * static_cast<size_t>(ns) * s.head_dim) +
         sizeof(float2) * s.n_head * static_cast<size_t>(ns);
}
Scratch scratch_layout(const AttentionShape& s, int ns, void* base) {
  char* b = static_cast<char*>(base);
  Scratch r;
  r.counters = reinterpret_cast<unsigned int*>(b);
  r.part_o = reinterpret_cast<float*>(b + counters_bytes(s));
  r.part_ml = reinterpret_cast<float2*>(b + counters_bytes(s) +
                                        align256(sizeof(float) * s.n_head * static_cast<size_t>(ns) * s.head_dim));
  return r;
}

}  // namespace

size_t attention_decode_scratch_bytes(const AttentionShape& s, int max_kv_len) {
  const int len = max_kv_len > 0 ? max_kv_len : 1;
  const int group = s.n_kv > 0 && s.n_head % s.n_kv == 0 ? s.n_head / s.n_kv : 1;
  const int n_kv = s.n_kv > 0 ? s.n_kv : 1;
  // Each geometry's split count grows with the length; a shorter call may take the other geometry.
  const int generic = n_splits(len), fast_long = fast_splits(group, s.head_dim, n_kv, len, sm_count()),
            fast_short = fast_splits(group, s.head_dim, n_kv, std::min(len, kSplitHeadsMaxLen), sm_count());
  const int long_ctx = decode_long::max_splits(s, len);
  return counters_bytes(s) + std::max({partials_bytes(s, generic), partials_bytes(s, fast_long),
                                       partials_bytes(s, fast_short), partials_bytes(s, long_ctx)});
}

namespace {

template <class T>
void decode_impl(const AttentionShape& s, const float* q, const T* kc, const T* vc, int max_kv_len,
                 const int32_t* kv_len, float* out, void* scratch, cudaStream_t stream, const AttentionExtras& x) {
  check_shape(s);
  if (max_kv_len <= 0 || max_kv_len > s.ctx)
    throw Error("attention_decode: max_kv_len " + std::to_string(max_kv_len) + " outside 1.." + std::to_string(s.ctx));
  if (x.window < 0) throw Error("attention_decode: sliding window " + std::to_string(x.window) + " must be >= 0");
  const int group = s.n_head / s.n_kv;
  // With a window the splits cover at most `window` positions (within the
  // scratch sized for max_kv_len: fewer splits of either geometry).
  const int len = visible_len(max_kv_len, x.window);
  if constexpr (!std::is_same_v<T, float>) {
    // Long contexts over f16 and q8_0 caches: the tensor-core kernel
    // (attention_decode_long.cu), then the merge kernel over its splits.
    using Ext = std::conditional_t<std::is_same_v<T, __half>, uint16_t, T>;  // its launcher's element type
    const auto* ke = reinterpret_cast<const Ext*>(kc);
    const auto* ve = reinterpret_cast<const Ext*>(vc);
    if (len > decode_long::kMinLen && decode_long::usable(s, ke, ve)) {
      const int ns = decode_long::splits(s, len, std::is_same_v<T, BlockQ8_0>);
      const Scratch sc = scratch_layout(s, ns, scratch);
      decode_long::launch(s, q, ke, ve, max_kv_len, kv_len, x.window, ns, sc.part_o, sc.part_ml, stream);
      decode_long::merge(s, sc.part_o, sc.part_ml, ns, x.sinks, out, stream);
      return;
    }
  }
  if (fast_ok(s) && fast_dims_ok(s.head_dim)) {
    const int ns = fast_splits(group, s.head_dim, s.n_kv, len, sm_count());
    const Scratch sc = scratch_layout(s, ns, scratch);
    const bool fused = ns <= kFuseMaxSplits;
    const FastOut o{sc.part_o, sc.part_ml, fused ? sc.counters : nullptr, out};
    switch (group) {
      case 1: launch_fast_g<T, 1>(s, q, kc, vc, max_kv_len, kv_len, ns, o, x, stream); break;
      case 2: launch_fast_g<T, 2>(s, q, kc, vc, max_kv_len, kv_len, ns, o, x, stream); break;
      case 4: launch_fast_g<T, 4>(s, q, kc, vc, max_kv_len, kv_len, ns, o, x, stream); break;
      case 8: launch_fast_g<T, 8>(s, q, kc, vc, max_kv_len, kv_len, ns, o, x, stream); break;
      case 16: launch_fast_g<T, 16>(s, q, kc, vc, max_kv_len, kv_len, ns, o, x, stream); break;
      default: break;
    }
    MS_CUDA_CHECK_LAUNCH();
    if (fused) return;
    MS_CUDA_CHECK(launch_pdl(attn_decode_fast_merge_kernel, dim3(s.n_head), dim3(kMergeThreads),
                             sizeof(float) * (ns + kMergeThreads), stream, sc.part_o, sc.part_ml, s.head_dim, ns,
                             x.sinks, out));
    return;
  }
  const int ns = n_splits(len);
  const Scratch sc = scratch_layout(s, ns, scratch);
  const size_t smem = split_smem_bytes(group, s.head_dim);
  attn_decode_split_kernel<T><<<dim3(ns, s.n_kv), kThreads, smem, stream>>>(q, kc, vc, s.n_kv, group, s.head_dim,
                                                                           s.ctx, max_kv_len, kv_len, s.scale,
                                                                           x.window, ns, sc.part_o, sc.part_ml);
  MS_CUDA_CHECK_LAUNCH();
  attn_decode_merge_kernel<<<s.n_head, kThreads, 0, stream>>>(sc.part_o, sc.part_ml, s.head_dim, max_kv_len, kv_len,
                                                              x.sinks, x.window, ns, out);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_decode(const AttentionShape& s, const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                      int max_kv_len, const int32_t* kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x) {
  decode_impl(s, q, reinterpret_cast<const __half*>(k_cache), reinterpret_cast<const __half*>(v_cache), max_kv_len,
              kv_len, out, scratch, stream, x);
}

void attention_decode(const AttentionShape& s, const float* q, const float* k_cache, const float* v_cache,
                      int max_kv_len, const int32_t* kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x) {
  decode_impl(s, q, k_cache, v_cache, max_kv_len, kv_len, out, scratch, stream, x);
}

void attention_decode(const AttentionShape& s, const float* q, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache,
                      int max_kv_len, const int32_t* kv_len, float* out, void* scratch, cudaStream_t stream,
                      const AttentionExtras& x) {
  check_q8_0_head_dim("attention_decode", s.head_dim);
  decode_impl(s, q, k_cache, v_cache, max_kv_len, kv_len, out, scratch, stream, x);
}

}  // namespace ms::cuda
