// Row-group driver shared by the AVX2 kernel files: runs a kernel over the
// rows of a vec_dot_rows call in groups of Kernel::kRows, with software
// prefetch of the next group. Include only from *_avx2.cpp files (internal
// linkage on purpose, as simd_hsum.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "quant/simd_hsum.h"
#include "quant/simd_kernels.h"

namespace ms::simd {
namespace {

// Runs Kernel::run<R> over the rows in groups of Kernel::kRows, then the rest.
// Software prefetch of the next row group. The kernels read R rows side by
// side, which for long rows is R short streams (a few dozen lines each) that
// the hardware prefetcher does not pick up in time. Called once per block
// index i (block size bb), this walks line by line through the R*stride bytes
// kPrefetchGroups groups after the current one (rows back to back, as in a
// matrix) at the rate the group is consumed, so the next group is in cache
// (L2) when the kernel reaches it, and the walk itself is one sequential
// stream the hardware prefetcher follows.
// always_inline: left as a call of its own, GCC 12.2 (-O1 and up) found
// this function "pure" (it only reads globals; a prefetch counts as no
// effect) and deleted the calls: the AVX2 kernels had no prefetch at all.
// Inlined into a kernel, whose stores keep it, the prefetches stay.
template <int R>
[[gnu::always_inline]] inline void prefetch_next_group(const uint8_t* w, int64_t stride, int64_t i, int bb) {
  const char* p = reinterpret_cast<const char*>(w + kPrefetchGroups * R * stride + i * R * bb);
  for (int k = 0; k < R * bb; k += 64) _mm_prefetch(p + k, _MM_HINT_T1);
}

template <class Kernel>
void for_row_groups(int64_t n, const void* w, int64_t stride, int64_t rows, const void* a, float* out) {
  constexpr int G = Kernel::kRows;
  const uint8_t* wp = static_cast<const uint8_t*>(w);
  int64_t r = 0;
  for (; r + G <= rows; r += G) Kernel::template run<G>(n, wp + r * stride, stride, a, out + r);
  const int64_t rest = rows - r;
  if constexpr (G > 1) {
    if (rest >= 2) {
      Kernel::template run<2>(n, wp + r * stride, stride, a, out + r);
      r += 2;
    }
    if (rows - r == 1) Kernel::template run<1>(n, wp + r * stride, stride, a, out + r);
  }
  (void)rest;
}

// A row kernel from a per-block dot: Fmt names its Weight and Act block
// types and kBlock (elements a block), and Fmt::block(w, a) returns the
// block's dot as 8 float lanes to be summed. Rows go 4 at a time so each
// activation block is loaded once for 4 weight rows.
template <class Fmt>
struct BlockRows {
  static constexpr int kRows = 4;
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    using W = typename Fmt::Weight;
    const int64_t nb = n / Fmt::kBlock;
    const auto* a = static_cast<const typename Fmt::Act*>(act);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_next_group<R>(w, stride, i, static_cast<int>(sizeof(W)));
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_add_ps(acc[r], Fmt::block(reinterpret_cast<const W*>(w + r * stride)[i], a[i]));
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
};

}  // namespace
}  // namespace ms::simd
