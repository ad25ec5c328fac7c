// The formats that the CUDA kernels read through the sub-block decoders of
// quant_sub32.cuh / quant_sub32_iq.cuh, as X-macro lists X(DType name, decoder)
// for the host-side switches (no device code here).
#pragma once

#define MS_SUB32_BASIC_TYPES(X) \
  X(Q4_1, DecQ4_1) X(Q5_0, DecQ5_0) X(Q5_1, DecQ5_1) X(Q2_K, DecQ2K) X(Q3_K, DecQ3K) X(TQ1_0, DecTQ1_0) \
  X(TQ2_0, DecTQ2_0)

// As MS_SUB32_BASIC_TYPES without Q2_K (the int8 GEMM reads it through its
// own tile loader, gemm_q8.cu's FmtQ2K, for its per-16 offsets).
#define MS_SUB32_BASIC_TYPES_NO_Q2K(X) \
  X(Q4_1, DecQ4_1) X(Q5_0, DecQ5_0) X(Q5_1, DecQ5_1) X(Q3_K, DecQ3K) X(TQ1_0, DecTQ1_0) X(TQ2_0, DecTQ2_0)

#define MS_SUB32_IQ_TYPES(X)                                                                                \
  X(IQ4_NL, DecIQ4_NL) X(IQ4_XS, DecIQ4_XS) X(IQ2_XXS, DecIQ2_XXS) X(IQ2_XS, DecIQ2_XS) X(IQ2_S, DecIQ2_S) \
  X(IQ3_XXS, DecIQ3_XXS) X(IQ3_S, DecIQ3_S) X(IQ1_S, DecIQ1_S) X(IQ1_M, DecIQ1_M)

#define MS_SUB32_TYPES(X) MS_SUB32_BASIC_TYPES(X) MS_SUB32_IQ_TYPES(X)
