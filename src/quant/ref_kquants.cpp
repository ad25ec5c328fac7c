// Scalar reference of the K formats: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (weights)
// and Q8_K (activations).
//
// Every weight K format is read through one unpack function into 256 integer
// levels q, per-sub-block integer scales and mins, and the super-block
// factors: x = d*scale[j]*q - dmin*min[j] for element i of sub-block j. The
// dequant and the dot product are written once over that form; the layouts
// live only in the unpack/pack pairs below.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/ref_formats.h"
#include "quant/ref_kquant_search.h"

namespace ms::ref {
namespace {

struct LevelsK {
  int8_t q[QK_K];
  int scale[16] = {};
  int min[16] = {};
  int nsub = 16;  // sub-blocks of QK_K/nsub elements
  float d = 0;
  float dmin = 0;
};

// ------------------------------------------------------------------ 6-bit scales of Q4_K / Q5_K
// 12 bytes hold 8 scales and 8 mins of 6 bits: bytes 0-3 the low 6 bits of
// scales 0-3, bytes 4-7 those of mins 0-3; bytes 8-11 the low nibbles of
// scale 4+k (bits 0-3) and min 4+k (bits 4-7); the top 2 bits of scale 4+k
// and min 4+k sit in bits 6-7 of bytes k and 4+k.
void unpack_scales_k4(const uint8_t* s, int* sc, int* mn) {
  for (int k = 0; k < 4; ++k) {
    sc[k] = s[k] & 63;
    mn[k] = s[k + 4] & 63;
    sc[k + 4] = (s[k + 8] & 0xF) | ((s[k] >> 6) << 4);
    mn[k + 4] = (s[k + 8] >> 4) | ((s[k + 4] >> 6) << 4);
  }
}
void pack_scales_k4(const uint8_t* sc, const uint8_t* mn, uint8_t* s) {
  for (int k = 0; k < 4; ++k) {
    s[k] = static_cast<uint8_t>((sc[k] & 63) | ((sc[k + 4] >> 4) << 6));
    s[k + 4] = static_cast<uint8_t>((mn[k] & 63) | ((mn[k + 4] >> 4) << 6));
    s[k + 8] = static_cast<uint8_t>((sc[k + 4] & 0xF) | ((mn[k + 4] & 0xF) << 4));
  }
}

// ------------------------------------------------------------------ 6-bit signed scales of Q3_K
// 16 values v = scale + 32 in 0..63: bytes 0-7 hold the low nibbles (value i
// in byte i%8, low nibble for i < 8, high for i >= 8); byte 8+k holds the top
// 2 bits of values k, k+4, k+8, k+12 at bits 0, 2, 4, 6.
void unpack_scales_q3(const uint8_t* s, int* sc) {
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
    const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    sc[i] = (low | (high << 4)) - 32;
  }
}
void pack_scales_q3(const int* sc, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int i = 0; i < 16; ++i) {
    const int v = sc[i] + 32;
    s[i % 8] = static_cast<uint8_t>(s[i % 8] | ((v & 0xF) << (i < 8 ? 0 : 4)));
    s[8 + i % 4] = static_cast<uint8_t>(s[8 + i % 4] | ((v >> 4) << (2 * (i / 4))));
  }
}

// ------------------------------------------------------------------ unpack

// Q2_K: each half of 128 elements uses 32 bytes of qs; element 32j+l of the
// half is bits 2j..2j+1 of byte l. Sub-block i (of 16) has scale nibble
// scales[i] & 15 and min nibble scales[i] >> 4.
LevelsK unpack(const BlockQ2_K& b) {
  LevelsK u;
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) u.q[128 * h + 32 * j + l] = static_cast<int8_t>((b.qs[32 * h + l] >> (2 * j)) & 3);
  for (int i = 0; i < 16; ++i) {
    u.scale[i] = b.scales[i] & 0xF;
    u.min[i] = b.scales[i] >> 4;
  }
  u.d = f16_to_f32(b.d);
  u.dmin = f16_to_f32(b.dmin);
  return u;
}

// Q3_K: low 2 bits as Q2_K; the high bit of element 32j+l of half h is bit
// 4h+j of hmask[l]; a clear bit means the level is 4 lower (q in -4..3).
LevelsK unpack(const BlockQ3_K& b) {
  LevelsK u;
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
        const int high = (b.hmask[l] >> (4 * h + j)) & 1;
        u.q[128 * h + 32 * j + l] = static_cast<int8_t>(low - (high ? 0 : 4));
      }
  unpack_scales_q3(b.scales, u.scale);
  u.d = f16_to_f32(b.d);
  return u;
}

// Q4_K: chunk c of 64 elements uses qs[32c..32c+31]: low nibbles are elements
// 64c..64c+31 (sub-block 2c), high nibbles 64c+32.. (sub-block 2c+1).
LevelsK unpack(const BlockQ4_K& b) {
  LevelsK u;
  u.nsub = 8;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      u.q[64 * c + l] = static_cast<int8_t>(b.qs[32 * c + l] & 0xF);
      u.q[64 * c + 32 + l] = static_cast<int8_t>(b.qs[32 * c + l] >> 4);
    }
  unpack_scales_k4(b.scales, u.scale, u.min);
  u.d = f16_to_f32(b.d);
  u.dmin = f16_to_f32(b.dmin);
  return u;
}

// Q5_K: as Q4_K; the 5th bit of element 32s+l (sub-block s) is bit s of qh[l].
LevelsK unpack(const BlockQ5_K& b) {
  LevelsK u;
  u.nsub = 8;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = b.qs[32 * c + l] & 0xF, hi = b.qs[32 * c + l] >> 4;
      u.q[64 * c + l] = static_cast<int8_t>(lo | (((b.qh[l] >> (2 * c)) & 1) << 4));
      u.q[64 * c + 32 + l] = static_cast<int8_t>(hi | (((b.qh[l] >> (2 * c + 1)) & 1) << 4));
    }
  unpack_scales_k4(b.scales, u.scale, u.min);
  u.d = f16_to_f32(b.d);
  u.dmin = f16_to_f32(b.dmin);
  return u;
}

// Q6_K: each half h of 128 elements uses ql[64h..64h+63] and qh[32h..32h+31].
// For l < 32: element l = low nibble of ql[l], l+32 = low nibble of ql[l+32],
// l+64 = high nibble of ql[l], l+96 = high nibble of ql[l+32]; their top 2
// bits are bits 0-1, 2-3, 4-5, 6-7 of qh[l]. q = 6-bit value - 32. Sub-block
// i (of 16) has the int8 scale scales[i].
LevelsK unpack(const BlockQ6_K& b) {
  LevelsK u;
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    int8_t* q = u.q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      q[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      q[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      q[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      q[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
  for (int i = 0; i < 16; ++i) u.scale[i] = b.scales[i];
  u.d = f16_to_f32(b.d);
  return u;
}

// ------------------------------------------------------------------ pack (inverse of unpack)

void pack(const int8_t* L, const uint8_t* sc, const uint8_t* mn, uint16_t d, uint16_t dmin, BlockQ2_K& b) {
  std::memset(b.qs, 0, sizeof b.qs);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l)
        b.qs[32 * h + l] = static_cast<uint8_t>(b.qs[32 * h + l] | ((L[128 * h + 32 * j + l] & 3) << (2 * j)));
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<uint8_t>((sc[i] & 0xF) | ((mn[i] & 0xF) << 4));
  b.d = d;
  b.dmin = dmin;
}

void pack(const int8_t* L, const int* sc, uint16_t d, BlockQ3_K& b) {  // L in -4..3
  std::memset(b.qs, 0, sizeof b.qs);
  std::memset(b.hmask, 0, sizeof b.hmask);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        const int u = L[128 * h + 32 * j + l] + 4;
        b.qs[32 * h + l] = static_cast<uint8_t>(b.qs[32 * h + l] | ((u & 3) << (2 * j)));
        b.hmask[l] = static_cast<uint8_t>(b.hmask[l] | ((u >> 2) << (4 * h + j)));
      }
  pack_scales_q3(sc, b.scales);
  b.d = d;
}

void pack(const int8_t* L, const uint8_t* sc, const uint8_t* mn, uint16_t d, uint16_t dmin, BlockQ4_K& b) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * c + l] = static_cast<uint8_t>((L[64 * c + l] & 0xF) | ((L[64 * c + 32 + l] & 0xF) << 4));
  pack_scales_k4(sc, mn, b.scales);
  b.d = d;
  b.dmin = dmin;
}

void pack(const int8_t* L, const uint8_t* sc, const uint8_t* mn, uint16_t d, uint16_t dmin, BlockQ5_K& b) {
  std::memset(b.qh, 0, sizeof b.qh);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      b.qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      b.qh[l] = static_cast<uint8_t>(b.qh[l] | (((lo >> 4) & 1) << (2 * c)) | (((hi >> 4) & 1) << (2 * c + 1)));
    }
  pack_scales_k4(sc, mn, b.scales);
  b.d = d;
  b.dmin = dmin;
}

void pack(const int8_t* L, const int* sc, uint16_t d, BlockQ6_K& b) {  // L in -32..31
  for (int h = 0; h < 2; ++h) {
    uint8_t* ql = b.ql + 64 * h;
    uint8_t* qh = b.qh + 32 * h;
    const int8_t* q = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int u0 = q[l] + 32, u1 = q[l + 32] + 32, u2 = q[l + 64] + 32, u3 = q[l + 96] + 32;
      ql[l] = static_cast<uint8_t>((u0 & 0xF) | ((u2 & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((u1 & 0xF) | ((u3 & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((u0 >> 4) | ((u1 >> 4) << 2) | ((u2 >> 4) << 4) | ((u3 >> 4) << 6));
    }
  }
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>(sc[i]);
  b.d = d;
}

// ------------------------------------------------------------------ generic row loops

template <typename Block>
void dequantize_blocks(const void* src, float* dst, int64_t n) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const LevelsK u = unpack(b[i]);
    const int sub = QK_K / u.nsub;
    float* y = dst + i * QK_K;
    for (int j = 0; j < u.nsub; ++j) {
      const float ds = u.d * static_cast<float>(u.scale[j]);
      const float dm = u.dmin * static_cast<float>(u.min[j]);
      for (int l = 0; l < sub; ++l) y[j * sub + l] = ds * u.q[j * sub + l] - dm;
    }
  }
}

// Per super-block, in int32 as a SIMD kernel does: sumi = sum_j scale[j] *
// (sum of q*a over sub-block j); summ = sum_j min[j] * (sum of a over
// sub-block j, from the activations' bsums). Then d_a*d*sumi - d_a*dmin*summ.
template <typename Block>
float dot_blocks(int64_t n, const void* w, const void* a) {
  const Block* wb = static_cast<const Block*>(w);
  const BlockQ8_K* ab = static_cast<const BlockQ8_K*>(a);
  double total = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const LevelsK u = unpack(wb[i]);
    const BlockQ8_K& y = ab[i];
    const int sub = QK_K / u.nsub;
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < u.nsub; ++j) {
      int32_t isum = 0;
      for (int l = 0; l < sub; ++l) isum += static_cast<int32_t>(u.q[j * sub + l]) * y.qs[j * sub + l];
      sumi += u.scale[j] * isum;
      int32_t bsum = 0;
      for (int k = j * sub / 16; k < (j + 1) * sub / 16; ++k) bsum += y.bsums[k];
      summ += u.min[j] * bsum;
    }
    total += (y.d * u.d) * static_cast<float>(sumi) - (y.d * u.dmin) * static_cast<float>(summ);
  }
  return static_cast<float>(total);
}

// ------------------------------------------------------------------ quantizers

double squared_error(const float* x, const float* y, int n) {
  double e = 0;
  for (int i = 0; i < n; ++i) e += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
  return e;
}

// Affine formats (Q2_K, Q4_K, Q5_K): per sub-block fit scale and offset, then
// quantize those to `scale_max` against the super-block d and dmin, then pick
// each element's level with the scale and offset as they will be decoded.
// Searching, a last step re-fits d and dmin by least squares over the whole
// super-block for the integer scales and levels chosen (x ~= d*sc*L - dmin*m),
// and keeps that when it lowers the error.
template <typename Block>
void quantize_affine(const float* src, void* dst, int64_t n, int sub, int nmax, int scale_max, ScaleSearch mode) {
  Block* b = static_cast<Block*>(dst);
  const int nsub = QK_K / sub;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    float scales[16], offsets[16];
    for (int j = 0; j < nsub; ++j) {
      const AffineFit f = fit_affine(x + j * sub, nullptr, sub, nmax, mode == ScaleSearch::kSearch);
      scales[j] = f.scale;
      offsets[j] = f.offset;
    }
    uint8_t sc[16], mn[16];
    uint16_t dh = quantize_unsigned_scales(scales, nsub, scale_max, sc);
    uint16_t dminh = quantize_unsigned_scales(offsets, nsub, scale_max, mn);
    int8_t L[QK_K];
    auto assign = [&](uint16_t d_bits, uint16_t dmin_bits, int8_t* out) {
      const float d = f16_to_f32(d_bits), dmin = f16_to_f32(dmin_bits);
      for (int j = 0; j < nsub; ++j)
        levels_affine(x + j * sub, sub, d * static_cast<float>(sc[j]), dmin * static_cast<float>(mn[j]), nmax,
                      out + j * sub);
    };
    assign(dh, dminh, L);
    pack(L, sc, mn, dh, dminh, b[i]);
    if (mode != ScaleSearch::kSearch) continue;

    // Least squares for (d, dmin) with A = sc*L, B = m: x ~= d*A - dmin*B.
    double saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
    for (int j = 0; j < nsub; ++j)
      for (int l = 0; l < sub; ++l) {
        const double A = sc[j] * L[j * sub + l], B = mn[j], xv = x[j * sub + l];
        saa += A * A;
        sab += A * B;
        sbb += B * B;
        sax += A * xv;
        sbx += B * xv;
      }
    const double det = saa * sbb - sab * sab;
    double d_new, dmin_new;
    if (sbb == 0) {
      if (saa == 0) continue;
      d_new = sax / saa;
      dmin_new = 0;
    } else if (det > 1e-9 * saa * sbb) {
      d_new = (sax * sbb - sbx * sab) / det;
      dmin_new = (sax * sab - sbx * saa) / det;  // minus sign of -dmin folded in
    } else {
      continue;
    }
    if (!(d_new >= 0) || !(dmin_new >= 0) || !std::isfinite(d_new) || !std::isfinite(dmin_new)) continue;
    const uint16_t dh2 = f32_to_f16(static_cast<float>(std::min(d_new, 65504.0)));
    const uint16_t dminh2 = f32_to_f16(static_cast<float>(std::min(dmin_new, 65504.0)));
    int8_t L2[QK_K];
    assign(dh2, dminh2, L2);
    Block trial;
    pack(L2, sc, mn, dh2, dminh2, trial);
    float y1[QK_K], y2[QK_K];
    dequantize_blocks<Block>(&b[i], y1, QK_K);
    dequantize_blocks<Block>(&trial, y2, QK_K);
    if (squared_error(x, y2, QK_K) < squared_error(x, y1, QK_K)) b[i] = trial;
  }
}

// Symmetric formats (Q3_K, Q6_K): 16 sub-blocks of 16 with a signed scale,
// quantized to -scale_neg..scale_neg-1 against d. Searching, d is re-fitted by
// least squares over the super-block as for the affine formats.
template <typename Block>
void quantize_symmetric(const float* src, void* dst, int64_t n, int nneg, int scale_neg, ScaleSearch mode) {
  Block* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    float scales[16];
    for (int j = 0; j < 16; ++j)
      scales[j] = fit_symmetric(x + 16 * j, nullptr, 16, nneg, nneg - 1, mode == ScaleSearch::kSearch);
    int sc[16];
    const uint16_t dh = quantize_signed_scales(scales, 16, scale_neg, scale_neg - 1, sc);
    int8_t L[QK_K];
    auto assign = [&](uint16_t d_bits, int8_t* out) {
      const float d = f16_to_f32(d_bits);
      for (int j = 0; j < 16; ++j)
        levels_symmetric(x + 16 * j, 16, d * static_cast<float>(sc[j]), nneg, nneg - 1, out + 16 * j);
    };
    assign(dh, L);
    pack(L, sc, dh, b[i]);
    if (mode != ScaleSearch::kSearch) continue;

    double saa = 0, sax = 0;
    for (int j = 0; j < 16; ++j)
      for (int l = 0; l < 16; ++l) {
        const double A = sc[j] * L[16 * j + l];
        saa += A * A;
        sax += A * x[16 * j + l];
      }
    if (saa == 0) continue;
    const double d_new = sax / saa;
    if (!std::isfinite(d_new)) continue;
    const uint16_t dh2 = f32_to_f16(static_cast<float>(std::clamp(d_new, -65504.0, 65504.0)));
    int8_t L2[QK_K];
    assign(dh2, L2);
    Block trial;
    pack(L2, sc, dh2, trial);
    float y1[QK_K], y2[QK_K];
    dequantize_blocks<Block>(&b[i], y1, QK_K);
    dequantize_blocks<Block>(&trial, y2, QK_K);
    if (squared_error(x, y2, QK_K) < squared_error(x, y1, QK_K)) b[i] = trial;
  }
}

}  // namespace

// ------------------------------------------------------------------ public per-format functions

void dequantize_q2_K(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ2_K>(s, d, n); }
void dequantize_q3_K(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ3_K>(s, d, n); }
void dequantize_q4_K(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ4_K>(s, d, n); }
void dequantize_q5_K(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ5_K>(s, d, n); }
void dequantize_q6_K(const void* s, float* d, int64_t n) { dequantize_blocks<BlockQ6_K>(s, d, n); }

float vec_dot_q2_K(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ2_K>(n, w, a); }
float vec_dot_q3_K(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ3_K>(n, w, a); }
float vec_dot_q4_K(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ4_K>(n, w, a); }
float vec_dot_q5_K(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ5_K>(n, w, a); }
float vec_dot_q6_K(int64_t n, const void* w, const void* a) { return dot_blocks<BlockQ6_K>(n, w, a); }

void quantize_q2_K(const float* s, void* d, int64_t n, ScaleSearch m) { quantize_affine<BlockQ2_K>(s, d, n, 16, 3, 15, m); }
void quantize_q4_K(const float* s, void* d, int64_t n, ScaleSearch m) { quantize_affine<BlockQ4_K>(s, d, n, 32, 15, 63, m); }
void quantize_q5_K(const float* s, void* d, int64_t n, ScaleSearch m) { quantize_affine<BlockQ5_K>(s, d, n, 32, 31, 63, m); }
void quantize_q3_K(const float* s, void* d, int64_t n, ScaleSearch m) { quantize_symmetric<BlockQ3_K>(s, d, n, 4, 32, m); }
void quantize_q6_K(const float* s, void* d, int64_t n, ScaleSearch m) { quantize_symmetric<BlockQ6_K>(s, d, n, 32, 128, m); }

void quantize_q2_K(const float* s, void* d, int64_t n) { quantize_q2_K(s, d, n, ScaleSearch::kSearch); }
void quantize_q3_K(const float* s, void* d, int64_t n) { quantize_q3_K(s, d, n, ScaleSearch::kSearch); }
void quantize_q4_K(const float* s, void* d, int64_t n) { quantize_q4_K(s, d, n, ScaleSearch::kSearch); }
void quantize_q5_K(const float* s, void* d, int64_t n) { quantize_q5_K(s, d, n, ScaleSearch::kSearch); }
void quantize_q6_K(const float* s, void* d, int64_t n) { quantize_q6_K(s, d, n, ScaleSearch::kSearch); }

// ------------------------------------------------------------------ Q8_K (activations)

void dequantize_q8_K(const void* src, float* dst, int64_t n) {
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i)
    for (int l = 0; l < QK_K; ++l) dst[i * QK_K + l] = b[i].d * b[i].qs[l];
}

void quantize_q8_K(const float* src, void* dst, int64_t n) {
  BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    float amax = 0;
    for (int l = 0; l < QK_K; ++l) amax = std::max(amax, std::fabs(x[l]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int l = 0; l < QK_K; ++l) {
      const float v = x[l] * id;
      b[i].qs[l] = static_cast<int8_t>(std::clamp(round_even(std::isfinite(v) ? v : 0.0f), -127, 127));
    }
    b[i].d = d;
    for (int k = 0; k < QK_K / 16; ++k) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b[i].qs[16 * k + l];
      b[i].bsums[k] = static_cast<int16_t>(sum);
    }
  }
}

float vec_dot_q8_K(int64_t n, const void* w, const void* a) {
  const BlockQ8_K* x = static_cast<const BlockQ8_K*>(w);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
  double total = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int32_t isum = 0;
    for (int l = 0; l < QK_K; ++l) isum += static_cast<int32_t>(x[i].qs[l]) * y[i].qs[l];
    total += (x[i].d * y[i].d) * static_cast<float>(isum);
  }
  return static_cast<float>(total);
}

}  // namespace ms::ref
