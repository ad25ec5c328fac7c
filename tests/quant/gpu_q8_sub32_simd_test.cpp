// The SIMD-decoding GPU Q8 kernels of the sub-block formats and Q6_K
// (quant/gpu_q8_sub32_simd.h, AVX2 and AVX-512 VNNI builds): which ones the
// dispatcher takes. Their results against the scalar reference are checked
// by tests/backend_ops (ops dot_q8_<type>, implementations avx2 / avx512 /
// dispatched: odd row counts, padded strides, a partial group of 8 blocks,
// saturated activations, poisoned outputs and a guard past the last row).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/gpu_q8.h"
#include "quant/gpu_q8_sub32.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/simd_kernels.h"
#include "util/cpu_features.h"

namespace ms {
namespace {

const DType kTypes[] = {DType::Q3_K,    DType::Q2_K,   DType::IQ4_XS, DType::IQ4_NL,  DType::Q4_1,
                        DType::Q5_0,    DType::Q5_1,   DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,
                        DType::IQ3_XXS, DType::IQ3_S,  DType::IQ1_S,  DType::IQ1_M,  DType::TQ2_0,
                        DType::TQ1_0,   DType::Q6_K};

// The dispatcher takes these kernels where the CPU has them; the other
// GPU Q8 types have none here.
TEST(GpuQ8Sub32Simd, DispatchPicksThem) {
  if (!simd::cpu_supports_avx2()) GTEST_SKIP() << "no AVX2";
  for (DType t : kTypes) {
    if (t != DType::Q6_K)
      EXPECT_EQ(simd::gpu_q8_sub32_rows_kernel_avx2(t), simd::gpu_q8_sub32_fast_kernel_avx2(t)) << type_name(t);
    const CpuFeatures& f = cpu_features();  // capped by MOESTREAM_ISA
    const bool vnni = f.avx512 && f.avx512_vnni && simd::cpu_supports_avx512();
    EXPECT_EQ(std::string(gpu_q8_path(t)), vnni ? "avx512" : f.avx2 ? "avx2" : "scalar") << type_name(t);
  }
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q8_0}) EXPECT_EQ(simd::gpu_q8_sub32_fast_kernel_avx2(t), nullptr);
}

}  // namespace
}  // namespace ms
