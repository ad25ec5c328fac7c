// AVX2 kernels of GPU Q8 (quant/gpu_q8.h): the quantizer, and row dots for
// Q4_K, Q5_K, Q8_0, Q4_0 and MXFP4 weights (Q6_K stays on the reference).
//
// The GPU formulas scale every 32-element block by its own activation d, so
// unlike the Q8_K kernels the integer dots cannot run over a whole
// super-block: each block's dot is reduced to one int32 and 8 of them go
// through the float formula side by side (8 lanes = 8 blocks).
//
// Built with -mavx2 -mfma -mf16c: as simd_kernels.h says, include only
// intrinsics, <cstdint>/<cstring>, blocks.h and declarations, and keep
// helpers in an anonymous namespace (no inline functions shared with
// baseline files).
//
// The row kernels read 4 rows side by side, 4 short streams the hardware
// prefetcher misses, so each step prefetches the row group
// kPrefetchGroups groups ahead (simd_row_groups.h's prefetch_next_group,
// as the Q8_K kernels and gpu_q8_sub32_simd.h do). A prefetch only loads
// cache lines, but where it sits can change which products GCC fuses into
// FMAs (this file's float terms are plain mul/add/sub intrinsics, contracted
// by the compiler): Blocks32 prefetches at the end of its step because at
// the start GCC 12 fused Q4_0's a.d * idot - 8 * a.s the other way round
// (last-bit differences). Where it sits now, the results of all five
// kernels are bit-identical to the build without prefetch (compared on
// random rows, 1-64 rows, with and without a tail).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/gpu_q8.h"
#include "quant/gpu_q8_sub32.h"
#include "quant/simd_hsum.h"
#include "quant/simd_row_groups.h"

namespace ms::simd {
namespace {

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint16_t load_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// 32 unsigned weights (0..31) x 32 int8 activations -> 8 int32 partial sums.
__m256i dot_u8(__m256i w, __m256i a) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
}
// Same for signed weights: maddubs wants the unsigned operand first.
__m256i dot_s8(__m256i w, __m256i a) { return dot_u8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)); }

// p[j] holds block j's dot in 8 partial sums; returns the 8 totals in order.
__m256i reduce8(const __m256i* p) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  // per 128-bit lane: [p0 p1 p2 p3] (lane 0: elements 0-3, lane 1: 4-7)
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// A GPU Q8 row's parts (gpu_q8_row() in the header, not used here: it is an
// inline function of baseline files).
struct Act {
  const int8_t* q;
  const float* d;
  const float* s;
};
Act act_of(const void* p, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  const auto* d = reinterpret_cast<const float*>(b + n);
  return {reinterpret_cast<const int8_t*>(b), d, d + n / 32};
}

// Runs Kernel::run<R> over the rows in groups of 4 (activation loads shared
// by the group), then the rest.
template <class Kernel>
void for_rows(int64_t n, const void* w, int64_t stride, int64_t rows, const void* a, float* out) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const Act act = act_of(a, n);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) Kernel::template run<4>(n, wp + r * stride, stride, act, out + r);
  if (rows - r >= 2) {
    Kernel::template run<2>(n, wp + r * stride, stride, act, out + r);
    r += 2;
  }
  if (rows - r == 1) Kernel::template run<1>(n, wp + r * stride, stride, act, out + r);
}

// ---------------------------------------------------------------- Q4_K / Q5_K
// The 8 scales and 8 mins (6 bits each) of a Q4_K/Q5_K super-block as
// bytes sc0..sc7 m0..m7.
__m128i unpack_k4_scales(const uint8_t* s) {
  const uint32_t a = load_u32(s), b = load_u32(s + 4), c = load_u32(s + 8);
  const uint32_t sc_lo = a & 0x3f3f3f3fu, m_lo = b & 0x3f3f3f3fu;
  const uint32_t sc_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
  return _mm_set_epi32(static_cast<int>(m_hi), static_cast<int>(m_lo), static_cast<int>(sc_hi),
                       static_cast<int>(sc_lo));
}

// Per sub-block j (lane j): (d*sc_j) * a.d_j * idot_j - (dmin*m_j) * a.s_j,
// the terms of OpQ4K / OpQ5K.
template <bool Q5>
struct K45 {
  static constexpr int64_t kBlockBytes = Q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const Act& act, float* out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; ++i) {
      prefetch_next_group<R>(w, stride, i, static_cast<int>(kBlockBytes));
      const __m256 ad = _mm256_loadu_ps(act.d + 8 * i), as = _mm256_loadu_ps(act.s + 8 * i);
      __m256i a[8];
      for (int j = 0; j < 8; ++j) a[j] = load256(act.q + 256 * i + 32 * j);
      for (int r = 0; r < R; ++r) {
        const uint8_t* blk = w + r * stride + i * kBlockBytes;
        const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(blk))));  // d, dmin
        const __m128i scm = unpack_k4_scales(blk + 4);
        const __m256 sc = _mm256_mul_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(scm)));
        const __m256 mn = _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)),
                                        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(scm, 8))));
        const uint8_t* qs = blk + (Q5 ? 48 : 16);
        __m256i hb = _mm256_setzero_si256();
        if constexpr (Q5) hb = load256(blk + 16);
        __m256i p[8];
        for (int c = 0; c < 4; ++c) {
          const __m256i q = load256(qs + 32 * c);
          __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          if constexpr (Q5) {  // bit j of qh[l] is the 5th bit of sub-block j's element l
            const __m256i ml = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
            const __m256i mh = _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1)));
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, ml), ml), bit4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, mh), mh), bit4));
          }
          p[2 * c] = dot_u8(lo, a[2 * c]);
          p[2 * c + 1] = dot_u8(hi, a[2 * c + 1]);
        }
        const __m256 idot = _mm256_cvtepi32_ps(reduce8(p));
        const __m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(sc, ad), idot), _mm256_mul_ps(mn, as));
        acc[r] = _mm256_add_ps(acc[r], t);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
};

// ---------------------------------------------------------------- 32-element formats
// Q8_0, Q4_0, MXFP4: 8 blocks per step (lane j = block j), then single blocks.
// Fmt::dot(blk, a) -> 8 partial int32 sums of the block's integer dot;
// Fmt::scale(blk) -> the weight block's float scale.

// 2^(e-127) / 2, exact (the GPU's e8m0_half).
float e8m0_half(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00400000u >> (1 - e);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct FmtQ8_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ8_0);
  static constexpr bool kOffset8 = false;
  static __m256i dot(const uint8_t* blk, __m256i a) { return dot_s8(load256(blk + 2), a); }
  static float scale(const uint8_t* blk) { return _cvtsh_ss(load_u16(blk)); }
};
struct FmtQ4_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_0);
  static constexpr bool kOffset8 = true;  // x = d * (q - 8): d * (a.d * idot - 8 * a.s)
  static __m256i dot(const uint8_t* blk, __m256i a) {
    const __m128i x = load128(blk + 2);
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0F));
    return dot_u8(q, a);
  }
  static float scale(const uint8_t* blk) { return _cvtsh_ss(load_u16(blk)); }
};
struct FmtMXFP4 {
  static constexpr int64_t kBytes = sizeof(BlockMXFP4);
  static constexpr bool kOffset8 = false;
  static __m256i dot(const uint8_t* blk, __m256i a) {
    // E2M1 codes doubled: {0,1,2,3,4,6,8,12}, negative with bit 3
    const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,  //
                                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i x = load128(blk + 1);
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0F));
    return dot_s8(_mm256_shuffle_epi8(lut, q), a);
  }
  static float scale(const uint8_t* blk) { return e8m0_half(blk[0]); }
};

template <class Fmt>
struct Blocks32 {
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const Act& act, float* out) {
    const int64_t nb = n / 32;
    __m256 acc[R];
    float tail[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), tail[r] = 0.f;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      const __m256 ad = _mm256_loadu_ps(act.d + b), as = _mm256_loadu_ps(act.s + b);
      __m256i a[8];
      for (int j = 0; j < 8; ++j) a[j] = load256(act.q + 32 * (b + j));
      for (int r = 0; r < R; ++r) {
        const uint8_t* blk = w + r * stride + b * Fmt::kBytes;
        __m256i p[8];
        alignas(32) float ws[8];
        for (int j = 0; j < 8; ++j) {
          p[j] = Fmt::dot(blk + j * Fmt::kBytes, a[j]);
          ws[j] = Fmt::scale(blk + j * Fmt::kBytes);
        }
        const __m256 idot = _mm256_cvtepi32_ps(reduce8(p));
        const __m256 d = _mm256_load_ps(ws);
        __m256 t;
        if constexpr (Fmt::kOffset8)
          t = _mm256_mul_ps(d, _mm256_sub_ps(_mm256_mul_ps(ad, idot), _mm256_mul_ps(_mm256_set1_ps(8.f), as)));
        else
          t = _mm256_mul_ps(_mm256_mul_ps(d, ad), idot);
        acc[r] = _mm256_add_ps(acc[r], t);
      }
      prefetch_next_group<R>(w, stride, b / 8, static_cast<int>(8 * Fmt::kBytes));  // here: see the top
    }
    for (; b < nb; ++b) {
      const __m256i a = load256(act.q + 32 * b);
      for (int r = 0; r < R; ++r) {
        const uint8_t* blk = w + r * stride + b * Fmt::kBytes;
        const float s = static_cast<float>(hsum_i32(Fmt::dot(blk, a)));
        const float d = Fmt::scale(blk);
        tail[r] += Fmt::kOffset8 ? d * (act.d[b] * s - 8.f * act.s[b]) : d * act.d[b] * s;
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) + tail[r];
  }
};

// ---------------------------------------------------------------- quantizer
void quantize_avx2(const float* x, void* dst, int64_t n) {
  auto* q = static_cast<int8_t*>(dst);
  auto* dd = reinterpret_cast<float*>(static_cast<uint8_t*>(dst) + n);
  float* ss = dd + n / 32;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + 32 * b;
    __m256 xv[4], m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      xv[k] = _mm256_loadu_ps(v + 8 * k);
      m = _mm256_max_ps(m, _mm256_and_ps(xv[k], abs_mask));
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(xv[k], xv[k], _CMP_UNORD_Q));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float d = amax / 127.f;
    // Fast path: no NaN and d zero or normal and finite, where |x/d| <= 127
    // rounds into int8 and the sum of quants is exact. Otherwise the
    // reference reproduces the GPU's saturation and truncation.
    const bool fast = _mm256_movemask_ps(nan) == 0 && (amax == 0.f || (d >= 1.17549435e-38f && d <= 3.40282347e38f));
    if (!fast) {
      alignas(8) uint8_t one[32 + 8];
      quantize_row_gpu_q8_ref(v, one, 32);
      std::memcpy(q + 32 * b, one, 32);
      std::memcpy(dd + b, one + 32, 4);
      std::memcpy(ss + b, one + 36, 4);
      continue;
    }
    __m256i qi[4];
    if (amax == 0.f) {
      for (int k = 0; k < 4; ++k) qi[k] = _mm256_setzero_si256();
    } else {
      const __m256 dv = _mm256_set1_ps(d);
      for (int k = 0; k < 4; ++k)  // IEEE division and round-half-even, as x / d and __float2int_rn
        qi[k] = _mm256_cvtps_epi32(
            _mm256_round_ps(_mm256_div_ps(xv[k], dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3])));
    dd[b] = d;
    ss[b] = d * static_cast<float>(sum);
  }
}

void rows_q4_K(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_rows<K45<false>>(n, w, s, rows, a, out);
}
void rows_q5_K(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_rows<K45<true>>(n, w, s, rows, a, out);
}
void rows_q8_0(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_rows<Blocks32<FmtQ8_0>>(n, w, s, rows, a, out);
}
void rows_q4_0(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_rows<Blocks32<FmtQ4_0>>(n, w, s, rows, a, out);
}
void rows_mxfp4(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_rows<Blocks32<FmtMXFP4>>(n, w, s, rows, a, out);
}

}  // namespace

GpuQ8RowsFn gpu_q8_rows_kernel_avx2(DType t) {
  switch (t) {
    case DType::Q4_K: return rows_q4_K;
    case DType::Q5_K: return rows_q5_K;
    case DType::Q8_0: return rows_q8_0;
    case DType::Q4_0: return rows_q4_0;
    case DType::MXFP4: return rows_mxfp4;
    case DType::Q6_K: return nullptr;  // reference only
    default: return gpu_q8_sub32_rows_kernel_avx2(t);  // the sub-block formats, else nullptr
  }
}

GpuQ8QuantFn gpu_q8_quantize_kernel_avx2() { return quantize_avx2; }

}  // namespace ms::simd
