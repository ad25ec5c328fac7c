// AVX-512 (F/BW/VL/DQ + VNNI) row-dot kernels. The integer formats use
// vpdpbusd (u8 x s8, four products into an int32 lane, no int16 saturation);
// the K formats cover 64 elements (two or four sub-blocks) per zmm and apply
// the sub-block scales with vpdpwssd, since each lane's sum of four products
// still fits in int16. The 32-element formats work per block in 256-bit
// registers (AVX512VL forms of vpdpbusd).
//
// Built with the AVX-512 flags: see the note in simd_kernels.h about what this
// file may include.
#include "quant/simd_avx512_warnings.h"  // first: GCC 12's own _mm512_undefined_* helpers
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/simd_avx2_util.h"
#include "quant/simd_avx512_rows.h"
#include "quant/simd_hsum.h"
#include "quant/simd_kernels.h"

namespace ms::simd {
namespace {

// Helpers (hsum, load512, bcast256, idx_quad4) and the row-group driver
// (for_row_groups): simd_avx512_rows.h.

// ---------------------------------------------------------------- Q4_K / Q5_K x Q8_K
// 64 bytes of qs (chunks c and c+1, 128 elements) per load: their low nibbles
// are sub-blocks 2c and 2c+2, their high nibbles 2c+1 and 2c+3. The
// activations are rearranged to match once per super-block (shared by the R
// rows): alo = [a(64c..+31), a(64c+64..+95)], ahi = [a(64c+32..+63), a(64c+96..+127)].
// vpdpbusd sums (each lane's 4 products fit int16: |.| <= 4*31*128) of the
// low and high halves are packed to int16 and scaled by one vpdpwssd, whose
// scale vector comes from a vpermw of the 8 scales.
template <bool kFifthBit>
struct QK45 {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = static_cast<int>(kFifthBit ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    using Block = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;
    const int64_t nb = n / QK_K;
    const auto* a = static_cast<const BlockQ8_K*>(act);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    // packs_epi32(lo, hi) puts, per 128-bit lane k, 4 int16 of lo then 4 of
    // hi; lanes 0-1 come from the first sub-block of each half, 2-3 from the
    // second. Int16 scale index per lane for chunk pair p (scales 4p..4p+3):
    //   lane k<2: sc[4p] x4, sc[4p+1] x4;  lane k>=2: sc[4p+2] x4, sc[4p+3] x4.
    __m512i sidx[2];
    for (int p = 0; p < 2; ++p) {
      alignas(64) int16_t idx[32];
      for (int l = 0; l < 32; ++l) {
        const int k = l / 8, hi = (l % 8) / 4;
        idx[l] = static_cast<int16_t>(4 * p + (k < 2 ? 0 : 2) + hi);
      }
      sidx[p] = _mm512_load_si512(idx);
    }
    // Q5_K: the 5th bit of element l of chunk c is bit 2c (low nibbles) or
    // 2c+1 (high nibbles) of qh[l].
    __m512i hsel_lo[2], hsel_hi[2];
    for (int p = 0; p < 2; ++p) {
      const int c = 2 * p;
      hsel_lo[p] = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                                      _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 2))), 1);
      hsel_hi[p] = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c + 1))),
                                      _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 3))), 1);
    }
    __m512 acc[R];
    __m128 accm[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const BlockQ8_K& A = a[i];
      const __m256i bs = load256(A.bsums);
      const __m128i bsum8 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const __m128 da = _mm_set1_ps(A.d);
      __m512i alo[2], ahi[2];
      for (int p = 0; p < 2; ++p) {
        const __m512i x0 = load512(A.qs + 128 * p), x1 = load512(A.qs + 128 * p + 64);
        alo[p] = _mm512_inserti64x4(x0, _mm512_castsi512_si256(x1), 1);
        ahi[p] = _mm512_shuffle_i64x2(x0, x1, 0xEE);
      }
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const Block*>(w + r * stride) + i;
        const __m128i scm = unpack_k4_scales(W->scales);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(scm));  // sc0..7 m0..7
        const __m128i prod_m = _mm_madd_epi16(bsum8, _mm_cvtepu8_epi16(_mm_srli_si128(scm, 8)));
        __m512i hz;
        if constexpr (kFifthBit) hz = bcast256(W->qh);
        __m512i sum = _mm512_setzero_si512();
        for (int p = 0; p < 2; ++p) {
          const __m512i q = load512(W->qs + 64 * p);
          __m512i lo = _mm512_and_si512(q, m4);
          __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
          if constexpr (kFifthBit) {
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hz, hsel_lo[p]), lo, bit4);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(hz, hsel_hi[p]), hi, bit4);
          }
          const __m512i dlo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo[p]);
          const __m512i dhi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, ahi[p]);
          sum = _mm512_dpwssd_epi32(sum, _mm512_packs_epi32(dlo, dhi), _mm512_permutexvar_epi16(sidx[p], sc16));
        }
        const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(&W->d)))), da);
        acc[r] = _mm512_fmadd_ps(_mm512_broadcastss_ps(dd), _mm512_cvtepi32_ps(sum), acc[r]);
        accm[r] = _mm_fmadd_ps(_mm_shuffle_ps(dd, dd, 0x55), _mm_cvtepi32_ps(prod_m), accm[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) - hsum(accm[r]);
  }
};

// ---------------------------------------------------------------- Q6_K x Q8_K
// For half h, the 64 bytes ql[64h..] as one zmm: low nibbles are elements
// 128h+0..63 (with qh bits 0-1 for the first 32, bits 2-3 for the next 32),
// high nibbles elements 128h+64..127 (qh bits 4-5, then 6-7). Each group of 4
// int32 lanes of a vpdpbusd result is one sub-block of 16.
struct Q6K {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = static_cast<int>(sizeof(BlockQ6_K));
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK_K;
    const auto* a = static_cast<const BlockQ8_K*>(act);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    const __m512i shl_lo = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);  // bits 0-1 / 2-3 -> 4-5
    const __m512i shr_hi = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);  // bits 4-5 / 6-7 -> 4-5
    __m512i idx[4];
    for (int t = 0; t < 4; ++t) idx[t] = idx_quad4(t);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const BlockQ8_K& A = a[i];
      const __m256i bs = load256(A.bsums);
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const BlockQ6_K*>(w + r * stride) + i;
        const __m256i sc16 = _mm256_cvtepi8_epi16(load128(W->scales));
        const __m256i offs = _mm256_madd_epi16(bs, sc16);  // sum_j sc_j * bsum_j
        const __m512i sc32 = _mm512_cvtepu16_epi32(sc16);  // signed int16 in each lane's low half
        __m512i sum = _mm512_setzero_si512();
        for (int h = 0; h < 2; ++h) {
          const __m512i ql = load512(W->ql + 64 * h);
          const __m512i hz = bcast256(W->qh + 32 * h);
          const __m512i hl = _mm512_and_si512(_mm512_sllv_epi64(hz, shl_lo), m30);
          const __m512i hh = _mm512_and_si512(_mm512_srlv_epi64(hz, shr_hi), m30);
          // (x & 0x0F) | h in one vpternlogd: imm 0xEA = (A & B) | C
          const __m512i qlo = _mm512_ternarylogic_epi32(ql, m4, hl, 0xEA);
          const __m512i qhi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), m4, hh, 0xEA);
          const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qlo, load512(A.qs + 128 * h));
          const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qhi, load512(A.qs + 128 * h + 64));
          sum = _mm512_dpwssd_epi32(sum, d0, _mm512_permutexvar_epi32(idx[2 * h], sc32));
          sum = _mm512_dpwssd_epi32(sum, d1, _mm512_permutexvar_epi32(idx[2 * h + 1], sc32));
        }
        sum = _mm512_sub_epi32(sum, _mm512_zextsi256_si512(_mm256_slli_epi32(offs, 5)));
        const __m512 d = _mm512_set1_ps(f16(W->d) * A.d);
        acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sum), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
};

// ---------------------------------------------------------------- Q8_0 x Q8_0
// vpdpbusd(|w|, sign(a, w)); exact for any weights, activations in [-127, 127].
struct Q80 {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = static_cast<int>(sizeof(BlockQ8_0));
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK;
    const auto* a = static_cast<const BlockQ8_0*>(act);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const __m256i av = load256(a[i].qs);
      const float da = f16(a[i].d);
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const BlockQ8_0*>(w + r * stride) + i;
        const __m256i wv = load256(W->qs);
        const __m256i s =
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wv), _mm256_sign_epi8(av, wv));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(f16(W->d) * da), _mm256_cvtepi32_ps(s), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
};

// ---------------------------------------------------------------- Q4_0 / MXFP4 x Q8_0
// Unsigned codes u (Q4_0: q in 0..15, offset 8; MXFP4: doubled E2M1 value + 12
// through a pshufb table, offset 12): the accumulator starts at -offset*sum(a)
// (once per activation block) and one vpdpbusd per row adds u . a.
// Two blocks per zmm: bytes [q0 low nibbles, q1 low, q0 high, q1 high], with
// the activations of the pair rearranged to match once (shared by the rows);
// int32 lanes 0-3 and 8-11 belong to the first block, 4-7 and 12-15 to the
// second. An odd last block takes the 256-bit path.
template <bool kMXFP4>
struct Q4Like {
  static constexpr int kRows = 4;
  static constexpr int kBlockBytes = static_cast<int>(kMXFP4 ? sizeof(BlockMXFP4) : sizeof(BlockQ4_0));
  using Block = std::conditional_t<kMXFP4, BlockMXFP4, BlockQ4_0>;

  static __m128 weight_scales(const Block* b) {  // [d of b[0], d of b[1], 0, 0]
    if constexpr (kMXFP4) {
      return _mm_unpacklo_ps(_mm_set_ss(e8m0_half(b[0].e)), _mm_set_ss(e8m0_half(b[1].e)));
    } else {
      return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(b[0].d | (static_cast<uint32_t>(b[1].d) << 16))));
    }
  }

  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    const int64_t nb = n / QK;
    const auto* a = static_cast<const BlockQ8_0*>(act);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i offset = _mm512_set1_epi8(kMXFP4 ? 12 : 8);
    const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i sidx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
      const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(load256(a[i].qs)), load256(a[i + 1].qs), 1);
      const __m512i av = _mm512_shuffle_i64x2(t, t, 0xD8);
      const __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, av));
      const __m128 da = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a[i].d | (static_cast<uint32_t>(a[i + 1].d) << 16))));
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const Block*>(w + r * stride) + i;
        const __m256i q01 = _mm256_set_m128i(load128(W[1].qs), load128(W[0].qs));
        __m512i u = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q01), _mm256_srli_epi16(q01, 4), 1), m4);
        if constexpr (kMXFP4) u = _mm512_shuffle_epi8(table, u);
        const __m512i s = _mm512_dpbusd_epi32(neg, u, av);
        const __m512 d = _mm512_permutexvar_ps(sidx, _mm512_castps128_ps512(_mm_mul_ps(weight_scales(W), da)));
        acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[r]);
      }
    }
    __m256 tail[R];
    for (int r = 0; r < R; ++r) tail[r] = _mm256_setzero_ps();
    if (i < nb) {  // the odd last block
      const __m256i av = load256(a[i].qs);
      const __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(),
                                           _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(offset), av));
      const float da = f16(a[i].d);
      for (int r = 0; r < R; ++r) {
        const auto* W = reinterpret_cast<const Block*>(w + r * stride) + i;
        __m256i u = unpack_nibbles_32(W->qs);
        float dw;
        if constexpr (kMXFP4) {
          u = _mm256_shuffle_epi8(_mm512_castsi512_si256(table), u);
          dw = e8m0_half(W->e);
        } else {
          dw = f16(W->d);
        }
        const __m256i s = _mm256_dpbusd_epi32(neg, u, av);
        tail[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(s), tail[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) + hsum(tail[r]);
  }
};

// ---------------------------------------------------------------- float weights x F32
struct FromBF16 {
  using T = uint16_t;
  static __m512 load16(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
  }
  static float one(const uint16_t* p) {
    const uint32_t bits = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};
struct FromF16 {
  using T = uint16_t;
  static __m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(load256(p)); }
  static float one(const uint16_t* p) { return f16(*p); }
};
struct FromF32 {
  using T = float;
  static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
  static float one(const float* p) { return *p; }
};

template <class From>
struct FloatDot {
  static constexpr int kRows = 4;
  template <int R>
  static void run(int64_t n, const uint8_t* w, int64_t stride, const void* act, float* out) {
    using T = typename From::T;
    const float* x = static_cast<const float*>(act);
    const T* wr[R];
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const T*>(w + r * stride);
    __m512 acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);
      for (int r = 0; r < R; ++r) {
        acc0[r] = _mm512_fmadd_ps(From::load16(wr[r] + j), x0, acc0[r]);
        acc1[r] = _mm512_fmadd_ps(From::load16(wr[r] + j + 16), x1, acc1[r]);
      }
    }
    for (; j + 16 <= n; j += 16) {
      const __m512 x0 = _mm512_loadu_ps(x + j);
      for (int r = 0; r < R; ++r) acc0[r] = _mm512_fmadd_ps(From::load16(wr[r] + j), x0, acc0[r]);
    }
    for (int r = 0; r < R; ++r) {
      float s = hsum(_mm512_add_ps(acc0[r], acc1[r]));
      for (int64_t k = j; k < n; ++k) s += From::one(wr[r] + k) * x[k];
      out[r] = s;
    }
  }
};

// ---------------------------------------------------------------- Q4_K / Q5_K x several Q8_K rows
// Prompt processing dots each weight row with many tokens. The single-token
// kernel above spends most of its work per (row, super-block) on unpacking
// (nibbles, 6-bit scales, the scale permutation) and only a third on the
// dot itself; here a group of up to 4 rows is unpacked once per chunk of up
// to 16 super-blocks into an L1 buffer, and every token of the call is then
// dotted with it, two tokens at a time (so each unpacked zmm is loaded once
// per two tokens and each rearranged activation is shared by the 4 rows).
template <bool kFifthBit>
struct QK45Multi {
  using Block = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;
  static constexpr int kChunk = 16;  // super-blocks per unpacked chunk (4 rows x 16 x 448 B = 28 KiB)

  struct alignas(64) Unpacked {
    __m512i lo[2], hi[2];  // chunk pair p: low / high nibbles (+ fifth bit), unsigned
    __m512i sc[2];         // int16 scale per lane for pair p (see QK45)
    __m128i mins;          // 8 x int16
    __m128 dd;             // [d, dmin, 0, 0]
  };

  struct Consts {
    __m512i m4, bit4, sidx[2], hsel_lo[2], hsel_hi[2];
    Consts() {
      m4 = _mm512_set1_epi8(0x0F);
      bit4 = _mm512_set1_epi8(0x10);
      for (int p = 0; p < 2; ++p) {
        alignas(64) int16_t idx[32];
        for (int l = 0; l < 32; ++l) {
          const int k = l / 8, hi = (l % 8) / 4;
          idx[l] = static_cast<int16_t>(4 * p + (k < 2 ? 0 : 2) + hi);
        }
        sidx[p] = _mm512_load_si512(idx);
        const int c = 2 * p;
        hsel_lo[p] = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                                        _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 2))), 1);
        hsel_hi[p] = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c + 1))),
                                        _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 3))), 1);
      }
    }
  };

  static void unpack(const Block* W, const Consts& k, Unpacked& u) {
    const __m128i scm = unpack_k4_scales(W->scales);
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(scm));
    u.mins = _mm_cvtepu8_epi16(_mm_srli_si128(scm, 8));
    __m512i hz;
    if constexpr (kFifthBit) hz = bcast256(W->qh);
    for (int p = 0; p < 2; ++p) {
      const __m512i q = load512(W->qs + 64 * p);
      __m512i lo = _mm512_and_si512(q, k.m4);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), k.m4);
      if constexpr (kFifthBit) {
        lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hz, k.hsel_lo[p]), lo, k.bit4);
        hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(hz, k.hsel_hi[p]), hi, k.bit4);
      }
      u.lo[p] = lo;
      u.hi[p] = hi;
      u.sc[p] = _mm512_permutexvar_epi16(k.sidx[p], sc16);
    }
    u.dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(&W->d))));
  }

  // Accumulator state of one (row, token): kept across chunks, so a row of
  // any length gives, bit for bit, what the single-token kernel gives (same
  // products, same order of float additions).
  struct Acc {
    __m512 acc;
    __m128 accm;
  };

  // Adds the chunk's nc super-blocks of unpacked rows r < R, tokens t < T
  // (a[t] points at the chunk's first activation block) to st[t * 4 + r].
  template <int R, int T>
  static void dot(const Unpacked (*buf)[kChunk], int nc, const BlockQ8_K* const* a, Acc* st) {
    __m512 acc[R][T];
    __m128 accm[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = st[t * 4 + r].acc, accm[r][t] = st[t * 4 + r].accm;
    for (int j = 0; j < nc; ++j) {
      __m512i alo[T][2], ahi[T][2];
      __m128i bsum8[T];
      __m128 da[T];
      for (int t = 0; t < T; ++t) {
        const BlockQ8_K& A = a[t][j];
        const __m256i bs = load256(A.bsums);
        bsum8[t] = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        da[t] = _mm_set1_ps(A.d);
        for (int p = 0; p < 2; ++p) {
          const __m512i x0 = load512(A.qs + 128 * p), x1 = load512(A.qs + 128 * p + 64);
          alo[t][p] = _mm512_inserti64x4(x0, _mm512_castsi512_si256(x1), 1);
          ahi[t][p] = _mm512_shuffle_i64x2(x0, x1, 0xEE);
        }
      }
      for (int r = 0; r < R; ++r) {
        const Unpacked& u = buf[r][j];
        for (int t = 0; t < T; ++t) {
          __m512i sum = _mm512_setzero_si512();
          for (int p = 0; p < 2; ++p) {
            const __m512i dlo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.lo[p], alo[t][p]);
            const __m512i dhi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u.hi[p], ahi[t][p]);
            sum = _mm512_dpwssd_epi32(sum, _mm512_packs_epi32(dlo, dhi), u.sc[p]);
          }
          const __m128i prod_m = _mm_madd_epi16(bsum8[t], u.mins);
          const __m128 dd = _mm_mul_ps(u.dd, da[t]);  // [d * da, dmin * da, ...] as in QK45
          acc[r][t] = _mm512_fmadd_ps(_mm512_broadcastss_ps(dd), _mm512_cvtepi32_ps(sum), acc[r][t]);
          accm[r][t] = _mm_fmadd_ps(_mm_shuffle_ps(dd, dd, 0x55), _mm_cvtepi32_ps(prod_m), accm[r][t]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) st[t * 4 + r].acc = acc[r][t], st[t * 4 + r].accm = accm[r][t];
  }

  template <int T>
  static void dot_r(int R, const Unpacked (*buf)[kChunk], int nc, const BlockQ8_K* const* a, Acc* st) {
    switch (R) {
      case 4: return dot<4, T>(buf, nc, a, st);
      case 3: return dot<3, T>(buf, nc, a, st);
      case 2: return dot<2, T>(buf, nc, a, st);
      default: return dot<1, T>(buf, nc, a, st);
    }
  }

  static constexpr int kMaxTokens = 64;  // tokens whose state is kept at once

  static void run(int64_t n, const uint8_t* w, int64_t stride, int64_t rows, const void* const* acts, int64_t n_tok,
                  float* const* outs) {
    static const Consts k;
    const int64_t nb = n / QK_K;
    Unpacked buf[4][kChunk];
    Acc st[kMaxTokens * 4];
    for (int64_t tb = 0; tb < n_tok; tb += kMaxTokens) {
      const int64_t m = n_tok - tb < kMaxTokens ? n_tok - tb : kMaxTokens;
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const int R = static_cast<int>(rows - r0 < 4 ? rows - r0 : 4);
        for (int64_t i = 0; i < m * 4; ++i) st[i].acc = _mm512_setzero_ps(), st[i].accm = _mm_setzero_ps();
        for (int64_t c0 = 0; c0 < nb; c0 += kChunk) {
          const int nc = static_cast<int>(nb - c0 < kChunk ? nb - c0 : kChunk);
          for (int r = 0; r < R; ++r) {
            const auto* W = reinterpret_cast<const Block*>(w + (r0 + r) * stride) + c0;
            for (int j = 0; j < nc; ++j) unpack(W + j, k, buf[r][j]);
          }
          // While this group is dotted with the tokens, prefetch the same
          // chunk of the next row group (into L2), spread over the token
          // pairs: in a prompt the weights come from DRAM once, and without
          // this every unpack waited for them.
          const int64_t next_r0 = r0 + 4;
          const int64_t next_rows = next_r0 < rows ? (rows - next_r0 < 4 ? rows - next_r0 : 4) : 0;
          const int64_t row_lines = (nc * static_cast<int64_t>(sizeof(Block)) + 63) / 64;
          const int64_t pf_total = next_rows * row_lines;
          const int64_t pf_per_pair = (pf_total + (m + 1) / 2 - 1) / ((m + 1) / 2);
          const char* pf_base = reinterpret_cast<const char*>(w + next_r0 * stride) + c0 * sizeof(Block);
          int64_t pf = 0;
          for (int64_t t0 = 0; t0 < m; t0 += 2) {
            for (int64_t q = 0; q < pf_per_pair && pf < pf_total; ++q, ++pf)
              _mm_prefetch(pf_base + (pf / row_lines) * stride + (pf % row_lines) * 64, _MM_HINT_T1);
            const BlockQ8_K* a[2];
            const int T = m - t0 >= 2 ? 2 : 1;
            for (int t = 0; t < T; ++t) a[t] = static_cast<const BlockQ8_K*>(acts[tb + t0 + t]) + c0;
            if (T == 2) dot_r<2>(R, buf, nc, a, st + t0 * 4);
            else dot_r<1>(R, buf, nc, a, st + t0 * 4);
          }
        }
        for (int64_t t = 0; t < m; ++t)
          for (int r = 0; r < R; ++r) outs[tb + t][r0 + r] = hsum(st[t * 4 + r].acc) - hsum(st[t * 4 + r].accm);
      }
    }
  }
};

}  // namespace

// ---------------------------------------------------------------- entry points

void vec_dot_rows_q4_K_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<QK45<false>>(n, w, s, rows, a, out);
}
void vec_dot_rows_q5_K_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<QK45<true>>(n, w, s, rows, a, out);
}
void vec_dot_rows_q6_K_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<Q6K>(n, w, s, rows, a, out);
}
void vec_dot_rows_q8_0_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<Q80>(n, w, s, rows, a, out);
}
void vec_dot_rows_q4_0_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<Q4Like<false>>(n, w, s, rows, a, out);
}
void vec_dot_rows_mxfp4_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<Q4Like<true>>(n, w, s, rows, a, out);
}
void vec_dot_rows_bf16_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<FloatDot<FromBF16>>(n, w, s, rows, a, out);
}
void vec_dot_rows_f16_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<FloatDot<FromF16>>(n, w, s, rows, a, out);
}
void vec_dot_rows_f32_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
  for_row_groups<FloatDot<FromF32>>(n, w, s, rows, a, out);
}

void vec_dot_tokens_q4_K_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* const* acts,
                                 int64_t n_tok, float* const* outs) {
  QK45Multi<false>::run(n, static_cast<const uint8_t*>(w), s, rows, acts, n_tok, outs);
}
void vec_dot_tokens_q5_K_avx512(int64_t n, const void* w, int64_t s, int64_t rows, const void* const* acts,
                                 int64_t n_tok, float* const* outs) {
  QK45Multi<true>::run(n, static_cast<const uint8_t*>(w), s, rows, acts, n_tok, outs);
}

}  // namespace ms::simd
