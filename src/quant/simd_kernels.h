// Internal: the ISA-specific row-dot kernels and activation quantizers behind
// the dispatched functions of quant.h. Exposed so tests and benchmarks can
// call one ISA level directly, whatever MOESTREAM_ISA says; code elsewhere
// should call vec_dot_rows() and quantize_row_act() instead.
//
// Every kernel has the signature of vec_dot_rows() without the type:
//   out[r] = dot(weight row at w + r*row_stride, activations a), r < rows,
// with activations in type_info(t).vec_dot_type. n must be a multiple of the
// weight type's block size (the dispatcher checks). A kernel must only be
// called on a CPU with its ISA (cpu_supports_avx2/avx512 below).
//
// Integer formats are exact in int32 per super-block / block and accumulate in
// float, so they differ from vec_dot_ref only by float rounding order.
// Activation limits the kernels rely on (all that quantize_row_act produces):
// Q8_0 activations in [-127, 127]; Q8_K activations in [-128, 127], except
// for the IQ/TQ kernels, which apply weight signs to the activations and so
// need [-127, 127].
//
// Note for whoever edits the *_avx2.cpp / *_avx512.cpp files: they are built
// with ISA flags, so they must not instantiate inline functions or templates
// that baseline files also use (std::vector, half.h, ...): the linker keeps one
// copy of such a function, and it could be the AVX-512 one. They include only
// <immintrin.h>, <cstdint>, <cstring> and blocks.h, and keep helpers in an
// anonymous namespace.
#pragma once
#include <cstdint>

#include "quant/types.h"

namespace ms::simd {

using VecDotRowsFn = void (*)(int64_t n, const void* w, int64_t row_stride, int64_t rows,
                              const void* a, float* out);
// Quantizes n floats to one activation format; bit-identical to quantize_row_ref.
using QuantizeActFn = void (*)(const float* src, void* dst, int64_t n);
// Several tokens at once: outs[t][r] = dot(weight row r, activation row
// acts[t]) for r < rows, t < n_tok. For prompt processing: the weights of a
// row group are unpacked once and dotted with every token.
using VecDotTokensFn = void (*)(int64_t n, const void* w, int64_t row_stride, int64_t rows,
                                const void* const* acts, int64_t n_tok, float* const* outs);

// The kernel of one ISA level for weight type t; nullptr where that level has
// none (the dispatcher then falls back to AVX2 or the reference). "avx512" kernels use AVX-512 F/BW/VL/DQ plus VNNI for integer formats.
VecDotRowsFn vec_dot_rows_kernel_avx2(DType t);
VecDotRowsFn vec_dot_rows_kernel_avx512(DType t);
VecDotTokensFn vec_dot_tokens_kernel_avx512(DType t);  // nullptr: no multi-token kernel
QuantizeActFn quantize_act_kernel_avx2(DType act_type);
QuantizeActFn quantize_act_kernel_avx512(DType act_type);

// Whether this CPU can run the kernels of a level (ignores MOESTREAM_ISA).
bool cpu_supports_avx2();
bool cpu_supports_avx512();  // F, BW, VL, DQ and VNNI (and BMI2, which every such CPU has)

// The AVX2 kernels' software prefetch of a later row group (simd_row_groups.h)
// goes into L2 (on a 16-thread Xeon host, L1 prefetches competed with the
// demand loads and lost bandwidth: bench/results/cpu_kernels.md, "What the
// numbers say", prefetch mode), kPrefetchGroups groups ahead: one group of
// 4 rows is ~5 KiB of Q4_K at 2048 columns, consumed in
// ~200 ns -- barely a DRAM latency on a fast core. L1, and 1, 3 or 4 groups,
// measured no better (bench/results/cpu_bench.md, cpu_kernels.md), so
// neither is a setting.
constexpr int kPrefetchGroups = 2;

// ---- AVX2 + FMA + F16C (simd_avx2.cpp)
void vec_dot_rows_q4_K_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q5_K_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q6_K_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q8_0_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q4_0_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_mxfp4_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_bf16_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_f16_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_f32_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
// (simd_legacy_avx2.cpp)
void vec_dot_rows_q4_1_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q5_0_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q5_1_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q2_K_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q3_K_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
// (simd_iquants_avx2.cpp; these need activations in [-127, 127], see there)
void vec_dot_rows_tq1_0_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_tq2_0_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq1_s_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq1_m_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq2_xxs_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq2_xs_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq2_s_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq3_xxs_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq3_s_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq4_nl_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq4_xs_avx2(int64_t, const void*, int64_t, int64_t, const void*, float*);
void quantize_act_q8_0_avx2(const float*, void*, int64_t);
void quantize_act_q8_K_avx2(const float*, void*, int64_t);

// ---- AVX-512 F/BW/VL/DQ + VNNI (simd_avx512.cpp)
void vec_dot_rows_q4_K_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q5_K_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q6_K_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q8_0_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q4_0_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_mxfp4_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_bf16_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_f16_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_f32_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
// (simd_legacy_avx512.cpp)
void vec_dot_rows_q4_1_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q5_0_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q5_1_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq4_nl_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q2_K_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_q3_K_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
// (simd_iquants_avx512.cpp; these need activations in [-127, 127] and BMI2)
void vec_dot_rows_tq1_0_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_tq2_0_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq1_s_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq1_m_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq2_xxs_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq2_xs_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq2_s_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq3_xxs_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq3_s_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_rows_iq4_xs_avx512(int64_t, const void*, int64_t, int64_t, const void*, float*);
void vec_dot_tokens_q4_K_avx512(int64_t, const void*, int64_t, int64_t, const void* const*, int64_t, float* const*);
void vec_dot_tokens_q5_K_avx512(int64_t, const void*, int64_t, int64_t, const void* const*, int64_t, float* const*);

}  // namespace ms::simd

namespace ms {

// Dispatched multi-token row dot (the prompt-processing counterpart of
// vec_dot_rows in quant.h):
//   out[i * out_stride + r] = dot(weight row r, activation row a_i)
// for r < rows, i < n_tok, where a_i is the activation row at
// acts + (act_index ? act_index[i] : i) * act_stride (each in the weight
// type's vec_dot_type). Uses a kernel that unpacks each weight row once for
// all tokens where the CPU and type have one (Q4_K, Q5_K on AVX-512 VNNI),
// else vec_dot_rows per token. Same checks as vec_dot_rows.
void vec_dot_rows_tokens(DType t, int64_t n, const void* w, int64_t row_stride, int64_t rows, const void* acts,
                         int64_t act_stride, const int32_t* act_index, int64_t n_tok, float* out,
                         int64_t out_stride);

}  // namespace ms
