// Small AVX2 (+F16C) helpers shared by the row-dot kernel files: loads, F16
// conversion, nibble unpacking, scale helpers, the Q4_K/Q5_K scale unpacking
// and the MXFP4 E8M0 scale table. Include it only from the files compiled with
// the AVX2 or AVX-512 flags (*_avx2.cpp, *_avx512.cpp; see the note in
// simd_kernels.h). Internal linkage on purpose, as in simd_hsum.h: each
// includer is built with its own instruction-set flags, and one shared inline
// definition could hand one file's instructions to another at link time.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace ms::simd {
namespace {

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 16 packed nibbles -> 32 bytes: low nibbles are elements 0..15, high 16..31
// (the order of Q4_0, Q4_1, Q5_x, IQ4_NL and MXFP4).
inline __m256i unpack_nibbles_32(const uint8_t* qs) {
  const __m128i x = load128(qs);
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// int16 scale s0 for the low 16 elements of a 32, s1 for the high 16.
inline __m256i scale_pair(int s0, int s1) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)), _mm_set1_epi16(static_cast<int16_t>(s0)));
}

// f times the 8 int32 lanes of isum, as floats.
inline __m256 scaled(float f, __m256i isum) { return _mm256_mul_ps(_mm256_set1_ps(f), _mm256_cvtepi32_ps(isum)); }

// The 6-bit scales and mins of Q4_K/Q5_K, 8 each, packed in 12 bytes:
// sub-blocks 0..3 keep their low 6 bits in bytes 0..3 (scale) and 4..7 (min);
// sub-blocks 4..7 keep their low 4 bits in bytes 8..11 (scale low nibble, min
// high nibble) and their top 2 bits in the top bits of bytes 0..7.
// Returns the bytes sc0..sc7 m0..m7.
inline __m128i unpack_k4_scales(const uint8_t* s) {
  const uint32_t a = load_u32(s), b = load_u32(s + 4), c = load_u32(s + 8);
  const uint32_t sc_lo = a & 0x3f3f3f3fu;
  const uint32_t m_lo = b & 0x3f3f3f3fu;
  const uint32_t sc_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
  return _mm_set_epi32(static_cast<int>(m_hi), static_cast<int>(m_lo), static_cast<int>(sc_hi),
                       static_cast<int>(sc_lo));
}

// E8M0 exponent e as float 2^(e-128): the MXFP4 block scale 2^(e-127) halved,
// because the kernels use the E2M1 values doubled (integers).
constexpr uint32_t e8m0_half_bits(int e) {
  return e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : (e == 1 ? 0x00400000u : 0x00200000u);
}
struct E8M0Table {
  uint32_t bits[256];
  constexpr E8M0Table() : bits{} {
    for (int e = 0; e < 256; ++e) bits[e] = e8m0_half_bits(e);
  }
};
alignas(64) constexpr E8M0Table kE8M0Half{};
inline float e8m0_half(uint8_t e) {
  float f;
  std::memcpy(&f, &kE8M0Half.bits[e], 4);
  return f;
}

}  // namespace
}  // namespace ms::simd
