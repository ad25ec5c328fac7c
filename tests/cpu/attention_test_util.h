// Helpers shared by the CPU attention tests of the cache types
// (attention_test.cpp: f16, attention_f32_test.cpp, attention_q8_0_test.cpp):
// one test case's shape, and where its random inputs come from.
#pragma once
#include <cmath>
#include <cstdint>

#include "cpu/attention.h"
#include "quant/ref_test_util.h"

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

// Random inputs: gaussian(n, seed, sd) from the quant tests' helpers.
using testing_ref::gaussian;

}  // namespace ms::attntest
