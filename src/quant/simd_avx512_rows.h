// Row-group driver and small helpers shared by the AVX-512 kernel files
// (simd_avx512.cpp, simd_legacy_avx512.cpp, simd_iquants_avx512.cpp): runs a
// kernel over the rows of a vec_dot_rows call in groups of Kernel::kRows with
// software prefetch of the next group.
//
// The prefetch: the kernels read R rows side by side, which for long rows is
// R short streams (a few dozen lines each) that the hardware prefetcher does
// not pick up in time. Called once per block index i (block size bb),
// prefetch_next_group walks line by line through the R*stride bytes
// t_prefetch_ahead groups after the current one (rows back to back, as in a
// matrix) at the rate the group is consumed, so the next group is in cache
// when the kernel reaches it, and the walk itself is one sequential stream
// the hardware prefetcher follows. g_prefetch_mode: 0 off, 1 into L1, 2 into
// L2. The walk stays inside the rows of the current call (for_row_groups sets
// t_prefetch_ahead to fewer groups, none for the last, near the end): rows
// past the call belong to another thread's chunk of the matrix, and fetching
// them here cost DRAM bandwidth twice.
//
// Include only from files built with the AVX-512 flags (*_avx512.cpp).
// Internal linkage on purpose, as in simd_hsum.h: each includer is built with
// its own instruction-set flags, and one shared inline definition could hand
// one file's instructions to another at link time.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/simd_avx2_util.h"
#include "quant/simd_hsum.h"
#include "quant/simd_kernels.h"

namespace ms::simd {
namespace {

inline float hsum(__m512 v) {
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
// 32 bytes into both halves of a zmm.
inline __m512i bcast256(const void* p) { return _mm512_broadcast_i64x4(load256(p)); }
// 32 bytes at p (low half) and at q (high half).
inline __m512i join256(const void* p, const void* q) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(p)), load256(q), 1);
}
inline uint64_t load_u64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// vpermd indices: lane group g (4 lanes) takes element 4t+g.
inline __m512i idx_quad4(int t) {
  return _mm512_setr_epi32(4 * t, 4 * t, 4 * t, 4 * t, 4 * t + 1, 4 * t + 1, 4 * t + 1, 4 * t + 1, 4 * t + 2,
                           4 * t + 2, 4 * t + 2, 4 * t + 2, 4 * t + 3, 4 * t + 3, 4 * t + 3, 4 * t + 3);
}
// vpermd indices: lanes 0-7 take element 2t, lanes 8-15 element 2t+1.
inline __m512i idx_half8(int t) {
  return _mm512_setr_epi32(2 * t, 2 * t, 2 * t, 2 * t, 2 * t, 2 * t, 2 * t, 2 * t, 2 * t + 1, 2 * t + 1, 2 * t + 1,
                           2 * t + 1, 2 * t + 1, 2 * t + 1, 2 * t + 1, 2 * t + 1);
}

// Whole groups of the current call that may still be prefetched (set by
// for_row_groups; the prefetch never runs past the call's last row).
thread_local int t_prefetch_ahead = 0;

template <int R>
inline void prefetch_next_group(const uint8_t* w, int64_t stride, int64_t i, int bb) {
  const int mode = g_prefetch_mode;
  const int ahead = t_prefetch_ahead;
  if (mode == 0 || ahead <= 0) return;
  const char* p = reinterpret_cast<const char*>(w + ahead * R * stride + i * R * bb);
  if (mode == 1) {
    for (int k = 0; k < R * bb; k += 64) _mm_prefetch(p + k, _MM_HINT_T0);
  } else {
    for (int k = 0; k < R * bb; k += 64) _mm_prefetch(p + k, _MM_HINT_T1);
  }
}

template <class Kernel>
void for_row_groups(int64_t n, const void* w, int64_t stride, int64_t rows, const void* a, float* out) {
  constexpr int G = Kernel::kRows;
  const uint8_t* wp = static_cast<const uint8_t*>(w);
  int64_t r = 0;
  for (; r + G <= rows; r += G) {
    const int64_t later = (rows - r) / G - 1;  // whole groups after this one
    t_prefetch_ahead = static_cast<int>(later < g_prefetch_groups ? later : g_prefetch_groups);
    Kernel::template run<G>(n, wp + r * stride, stride, a, out + r);
  }
  t_prefetch_ahead = 0;
  if constexpr (G > 1) {
    if (rows - r >= 2) {
      Kernel::template run<2>(n, wp + r * stride, stride, a, out + r);
      r += 2;
    }
    if (rows - r == 1) Kernel::template run<1>(n, wp + r * stride, stride, a, out + r);
  }
}

// A row kernel for the formats whose dot with a Q8_K super-block is one
// exact integer (offsets included) times one float: F::Block is the weight
// block, F::Prep(a) the activation-side work shared by the rows of a group
// (rearranged or widened activations, sums), F::dot(w, prep) the integer
// dot spread over 16 int32 lanes, F::scale(w) the weight's float factor.
template <class F>
struct SuperRows {
  static constexpr int kRows = 4;
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    using Block = typename F::Block;
    const int64_t nb = n / QK_K;
    const auto* a = static_cast<const BlockQ8_K*>(act);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_next_group<R>(w, stride, i, static_cast<int>(sizeof(Block)));
      const typename F::Prep prep(a[i]);
      for (int r = 0; r < R; ++r) {
        const Block& W = reinterpret_cast<const Block*>(w + r * stride)[i];
        const __m512i s = F::dot(W, prep);
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(F::scale(W) * a[i].d), _mm512_cvtepi32_ps(s), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
};

}  // namespace
}  // namespace ms::simd
