#include "util/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace ms {

static CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  if (const char* cap = std::getenv("MOESTREAM_ISA")) {
    if (!std::strcmp(cap, "scalar")) f = CpuFeatures{};
    if (!std::strcmp(cap, "avx2")) f.avx512 = f.avx512_vnni = f.avx512_bf16 = false;
  }
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  std::string s = "scalar";
  if (f.avx2) s += " avx2";
  if (f.avx512) s += " avx512";
  if (f.avx512_vnni) s += " avx512-vnni";
  if (f.avx512_bf16) s += " avx512-bf16";
  return s;
}

}  // namespace ms
