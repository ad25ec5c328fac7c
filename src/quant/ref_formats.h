// Internal: the per-format scalar reference functions behind the *_ref
// functions of quant.h (ref_dispatch.cpp switches over the type and calls
// these). Exposed for tests and for the fast paths' own tests; code elsewhere
// should call dequantize_row_ref / quantize_row_ref / vec_dot_ref.
//
// Every function takes a row of n elements, n a multiple of the block size
// (the dispatcher checks); `w` is a weight row of the named format, `a` the
// activations in its vec_dot_type.
//
// Activation quantizers (Q8_0, Q8_1, Q8_K) follow one exact rule so that SIMD
// versions can be bit-identical:
//   amax = max |x| over the block;  d = amax / 127.0f;  id = d != 0 ? 1.0f / d : 0;
//   q = round-half-to-even(x * id) clamped to [-127, 127]   (float math throughout)
//   Q8_0 / Q8_1 store f32_to_f16(d); Q8_1 also s = f32_to_f16(d * (float)sum(q));
//   Q8_K stores d as float and bsums[i] = sum of qs[16i .. 16i+15].
#pragma once
#include <cstdint>

#include "quant/blocks.h"

namespace ms::ref {

#define MS_REF_FORMAT(name)                                        \
  void dequantize_##name(const void* src, float* dst, int64_t n);  \
  void quantize_##name(const float* src, void* dst, int64_t n);    \
  float vec_dot_##name(int64_t n, const void* w, const void* a);

// ref_simple.cpp
MS_REF_FORMAT(f32)
MS_REF_FORMAT(f16)
MS_REF_FORMAT(bf16)
MS_REF_FORMAT(q4_0)
MS_REF_FORMAT(q4_1)
MS_REF_FORMAT(q5_0)
MS_REF_FORMAT(q5_1)
MS_REF_FORMAT(q8_0)
MS_REF_FORMAT(q8_1)
MS_REF_FORMAT(mxfp4)
// ref_kquants.cpp
MS_REF_FORMAT(q2_K)
MS_REF_FORMAT(q3_K)
MS_REF_FORMAT(q4_K)
MS_REF_FORMAT(q5_K)
MS_REF_FORMAT(q6_K)
MS_REF_FORMAT(q8_K)
// ref_iquants.cpp (dequant, dot) and ref_iquants_quantize.cpp (quantizers)
MS_REF_FORMAT(tq1_0)
MS_REF_FORMAT(tq2_0)
MS_REF_FORMAT(iq1_s)
MS_REF_FORMAT(iq1_m)
MS_REF_FORMAT(iq2_xxs)
MS_REF_FORMAT(iq2_xs)
MS_REF_FORMAT(iq2_s)
MS_REF_FORMAT(iq3_xxs)
MS_REF_FORMAT(iq3_s)
MS_REF_FORMAT(iq4_nl)
MS_REF_FORMAT(iq4_xs)

#undef MS_REF_FORMAT

// The weight K formats can also be quantized the naive way (each sub-block's
// scale from its max-abs or min/max, no search): the baseline the searched
// quantizer is measured against. quantize_q*_K(...) == kSearch.
enum class ScaleSearch { kNaive, kSearch };
void quantize_q2_K(const float* src, void* dst, int64_t n, ScaleSearch mode);
void quantize_q3_K(const float* src, void* dst, int64_t n, ScaleSearch mode);
void quantize_q4_K(const float* src, void* dst, int64_t n, ScaleSearch mode);
void quantize_q5_K(const float* src, void* dst, int64_t n, ScaleSearch mode);
void quantize_q6_K(const float* src, void* dst, int64_t n, ScaleSearch mode);

// The 16 values of an E2M1 nibble, doubled so they are integers
// (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, times 2); bit 3 is the sign.
extern const int8_t kE2M1Doubled[16];
// Half the E8M0 scale, 2^(e-128), exact for every e (subnormal for e <= 1):
// x = kE2M1Doubled[nibble] * e8m0_half(e).
float e8m0_half(uint8_t e);

}  // namespace ms::ref
