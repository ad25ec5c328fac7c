// Helpers shared by the forward tests that compare the engine's logits with a
// float64 reference model (gpt_oss_forward_test.cpp, qwen35_forward_test.cpp).
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

namespace ms::test {

// Relative RMS distance of a (ref.size() values) from the reference.
inline double rel_rms(const float* a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

// The same for values held as doubles (rounded to float first, as logits are).
inline double rel_rms(const std::vector<double>& a, const std::vector<double>& ref) {
  const std::vector<float> f(a.begin(), a.end());
  return rel_rms(f.data(), ref);
}

}  // namespace ms::test
