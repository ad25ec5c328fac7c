// Helpers shared by the reference quantization tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "quant/types.h"

namespace ms::testing_ref {

inline std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

inline std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row_ref(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

inline std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(n, NAN);  // poisoned
  dequantize_row_ref(t, q.data(), y.data(), n);
  return y;
}

inline double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

inline double l2(const std::vector<float>& a) {
  double s = 0;
  for (float v : a) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// The formats moestream computes with, in the order the brief lists them.
inline const std::vector<DType>& computable_types() {
  static const std::vector<DType> k = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                       DType::Q5_1, DType::Q8_0, DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                                       DType::Q5_K, DType::Q6_K, DType::Q8_K, DType::MXFP4,
                                       DType::TQ1_0, DType::TQ2_0, DType::IQ1_S, DType::IQ1_M, DType::IQ2_XXS,
                                       DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S, DType::IQ4_NL,
                                       DType::IQ4_XS};
  return k;
}

}  // namespace ms::testing_ref
