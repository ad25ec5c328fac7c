// Multi-sequence decode attention (see attention_multi.h).
//
// attention_decode.cu's fast path (split-K over positions, block (split, KV
// head) of 4 warps for the G query heads of a KV head, online softmax in the
// exp2 domain, then a log-sum-exp merge of the splits) with a third grid
// dimension, the row: each row reads its slot and length from device memory.
// The kernels' bodies are attention_decode_fast.cuh's, the single-sequence
// kernels' too, so a row launched with the same split count gives the same
// bits (tests/cuda/attention_multi_test.cpp checks it). The merge is always a
// second kernel (the single-sequence path fuses it into its last block for up
// to 8 splits, with the same device function).
#include <algorithm>
#include <cfloat>
#include <string>
#include <type_traits>

#include "cuda/attention_decode_fast.cuh"
#include "cuda/attention_multi.h"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "cuda/pdl.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

using decode_fast::fast_splits;
using decode_fast::kFastWarps;
using decode_fast::kFuseMaxSplits;
using decode_fast::kLog2e;
using decode_fast::kMergeThreads;
using decode_fast::kSplitHeadsMaxLen;
using decode_fast::split_heads;

int visible_len(int max_kv_len, int window) { return window > 0 ? std::min(max_kv_len, window) : max_kv_len; }

// Block (split, kv head, row): attention_decode's fast kernel on the row's
// slot. A row with no valid slot covers no position (its partials say
// "empty", its output is 0).
template <class T, int G, int HD, bool SPLIT>
__global__ void __launch_bounds__(kFastWarps * 32) attn_multi_fast_kernel(
    const float* __restrict__ q, const T* __restrict__ k_base, const T* __restrict__ v_base, int64_t slot_stride,
    int n_slots, const int32_t* __restrict__ slots, int64_t ctx, int max_kv_len,
    const int32_t* __restrict__ kv_lens, float scale_log2, int window, int n_split, float* __restrict__ part_o,
    float2* __restrict__ part_ml) {
  const int row = blockIdx.z;
  const int64_t n_head = static_cast<int64_t>(gridDim.y) * G;
  // programmatic dependent launch: q, the rows' slots and lengths (and this
  // step's K, V rows) may come from the kernels before
  dev::pdl_wait();
  dev::pdl_trigger();
  const int slot = __ldg(slots + row);
  const bool ok = slot >= 0 && slot < n_slots;
  const int kv_len = ok ? max(0, min(__ldg(kv_lens + row), max_kv_len)) : 0;
  const int64_t off = static_cast<int64_t>(ok ? slot : 0) * slot_stride;
  decode_fast::split_partials<T, G, HD, SPLIT>(q + row * n_head * HD, k_base + off, v_base + off, ctx, kv_len,
                                               scale_log2, window, n_split, blockIdx.x, blockIdx.y,
                                               part_o + row * n_head * n_split * HD, part_ml + row * n_head * n_split);
}

// Up to kFuseMaxSplits splits: block per (KV head, row), the in-block merge
// attention_decode runs in its last block of a KV head.
template <int G, int HD>
__global__ void __launch_bounds__(kFastWarps * 32) attn_multi_merge_small_kernel(
    const float* part_o, const float2* part_ml, int n_split, const float* __restrict__ sinks,
    float* __restrict__ out) {
  const int64_t row = blockIdx.y, n_head = static_cast<int64_t>(gridDim.x) * G;
  dev::pdl_wait();  // the partials come from the kernel before
  dev::pdl_trigger();
  decode_fast::merge_splits_in_block<G, HD>(part_o + row * n_head * n_split * HD, part_ml + row * n_head * n_split,
                                            blockIdx.x * G, n_split, sinks, out + row * n_head * HD);
}

// More splits: block per (query head, row).
__global__ void __launch_bounds__(kMergeThreads) attn_multi_merge_kernel(const float* __restrict__ part_o,
                                                                          const float2* __restrict__ part_ml, int hd,
                                                                          int n_split, const float* __restrict__ sinks,
                                                                          float* __restrict__ out) {
  const int64_t row = blockIdx.y, n_head = gridDim.x;
  dev::pdl_wait();  // the partials come from the kernel before
  dev::pdl_trigger();
  decode_fast::merge_head(part_o + row * n_head * n_split * hd, part_ml + row * n_head * n_split, hd, n_split, sinks,
                          out + row * n_head * hd, blockIdx.x);
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

int multi_splits(int group, int hd, int n_kv, int n_rows, int len, int n_sm) {
  return fast_splits(group, hd, n_kv, len, n_sm, n_rows);
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
  return decode_fast::fast_ok(s);
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
