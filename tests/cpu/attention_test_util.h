// Helpers shared by the CPU attention tests of the cache types
// (attention_test.cpp: f16, attention_f32_test.cpp, attention_q8_0_test.cpp):
// one test case's shape and random inputs.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/attention.h"

namespace ms::attntest {

// n_tokens query positions starting at pos0 over a cache of ctx positions,
// n_head query heads sharing n_kv K/V heads (GQA) of head_dim each.
struct Case {
  int n_head, n_kv, head_dim;
  int64_t ctx;
  int n_tokens;
  int64_t pos0;
};

// The case's attention shape, with the usual 1/sqrt(head_dim) scale.
inline AttentionShape shape(const Case& c) {
  return {c.n_head, c.n_kv, c.head_dim, c.ctx, 1.0f / std::sqrt(float(c.head_dim))};
}

// n normal values (mean 0, deviation sd) from the given seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace ms::attntest
