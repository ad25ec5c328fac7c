// The x86 features that select SIMD kernels at run time.
#pragma once
#include <string>

namespace ms {

struct CpuFeatures {
  bool avx2 = false;      // with FMA and F16C
  bool avx512 = false;    // F, BW, VL, DQ
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
};

// Detected once; the debug switch MOESTREAM_ISA=scalar|avx2 (README, "Environment") caps it
// (for tests and benchmarks that compare paths).
const CpuFeatures& cpu_features();
std::string cpu_features_string();

}  // namespace ms
