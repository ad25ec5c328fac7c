// Internal: the vector kernels of attention.cpp (F16, F32, Q8_0 caches), one
// ISA level per file (attention_avx2.cpp is built with AVX2/FMA/F16C flags;
// the dispatcher calls it only when cpu_features().avx2 says the CPU has them).
#pragma once
#include <cstdint>

#include "quant/blocks.h"

namespace ms::attn_kernels {

// sum_i a[i] * half(b[i])
float dot_f32_f16_avx2(const float* a, const uint16_t* b, int n);
// y[i] += w * half(v[i])
void axpy_f16_avx2(float w, const uint16_t* v, float* y, int n);
// sum_i a[i] * b[i] and y[i] += w * v[i], for an F32 cache
float dot_f32_f32_avx2(const float* a, const float* b, int n);
void axpy_f32_avx2(float w, const float* v, float* y, int n);
// For a Q8_0 cache: n (a multiple of 32) elements as n/32 blocks;
// sum over blocks of d * sum_i a[i] * q[i], and y[i] += (w * d) * q[i].
float dot_f32_q8_0_avx2(const float* a, const BlockQ8_0* b, int n);
void axpy_q8_0_avx2(float w, const BlockQ8_0* v, float* y, int n);
// The same without SIMD (attention.cpp; CPUs without AVX2), the scale
// applied once per block as above.
float dot_f32_q8_0_scalar(const float* a, const BlockQ8_0* b, int n);
void axpy_q8_0_scalar(float w, const BlockQ8_0* v, float* y, int n);
// dst[i] = half(src[i]) (round to nearest even)
void f32_to_f16_row_avx2(const float* src, uint16_t* dst, int n);

}  // namespace ms::attn_kernels
