// Horizontal sums of SSE/AVX registers, for the files compiled with AVX2 or
// AVX-512 flags (include it only from those). Internal linkage on purpose:
// each includer is built with its own instruction-set flags, and one shared
// inline definition could hand one file's instructions to another at link
// time.
#pragma once
#include <immintrin.h>

namespace ms::simd {
namespace {

inline float hsum(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hsum(__m256 v) { return hsum(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))); }

}  // namespace
}  // namespace ms::simd
