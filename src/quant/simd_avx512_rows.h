// Row-group driver and small helpers shared by the AVX-512 kernel files
// (simd_avx512.cpp, simd_legacy_avx512.cpp, simd_iquants_avx512.cpp): runs a
// kernel over the rows of a vec_dot_rows call in groups of Kernel::kRows.
//
// No software prefetch of the next row group here, unlike the AVX2 kernels
// (simd_row_groups.h): the same walk was written here once, but GCC compiled
// every call of it away (a helper it judged "pure", bench/results/
// cpu_kernels.md), so every AVX-512 figure measured so far is without it.
// Adding it back (always_inline, as in simd_row_groups.h, and staying inside
// the call's rows) is a change to measure on an AVX-512 host.
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

template <class Kernel>
void for_row_groups(int64_t n, const void* w, int64_t stride, int64_t rows, const void* a, float* out) {
  constexpr int G = Kernel::kRows;
  const uint8_t* wp = static_cast<const uint8_t*>(w);
  int64_t r = 0;
  for (; r + G <= rows; r += G) Kernel::template run<G>(n, wp + r * stride, stride, a, out + r);
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
