// Row-level operations on every supported tensor type.
//
// *_ref functions are the plain scalar definitions (ref_*.cpp): the meaning of
// each format, and what every fast path is tested against. The functions
// without suffix dispatch at run time to the best path for this CPU (AVX-512,
// AVX2, or the reference).
//
// Rows of n elements; n must be a multiple of the type's block size (callers
// check with row_bytes(), which throws).
#pragma once
#include <cstdint>

#include "quant/types.h"

namespace ms {

// ---------------------------------------------------------------- reference
void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n);

// Reference quantizer. For weights of the K formats it searches scales and
// mins to reduce the squared error (not a naive max-abs rounding); the IQ and
// TQ formats scan a few scales per sub-block and snap groups of 8 to their
// nearest grid points (ref_iquants_quantize.cpp: valid, reasonable, not
// optimal -- no importance matrix); for the activation formats (Q8_0, Q8_1,
// Q8_K) it rounds to nearest.
void quantize_row_ref(DType t, const float* src, void* dst, int64_t n);

// Dot product of a weight row of type t with activations already in
// type_info(t).vec_dot_type (F32 activations for F32/F16/BF16 weights).
float vec_dot_ref(DType t, int64_t n, const void* w, const void* a);

// ---------------------------------------------------------------- dispatched
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Quantizes activations to an activation format (Q8_0, Q8_1, Q8_K, or F32 as
// a copy). Bit-identical to quantize_row_ref for those formats.
void quantize_row_act(DType act_type, const float* src, void* dst, int64_t n);
float vec_dot(DType t, int64_t n, const void* w, const void* a);

// Row dots of several weight rows against one activation row: out[r] =
// vec_dot(t, n, w + r*row_stride, a). Lets a fast path keep activations in
// registers across rows.
void vec_dot_rows(DType t, int64_t n, const void* w, int64_t row_stride, int64_t rows,
                  const void* a, float* out);

// Which path vec_dot takes for t on this CPU: "avx512-vnni", "avx2", "scalar".
const char* vec_dot_path(DType t);

}  // namespace ms
