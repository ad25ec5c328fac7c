// Helpers shared by the engine tests of the KV cache types (kv_f32_test.cpp,
// kv_q8_0_test.cpp) and the forward tests (forward_test.cpp): the prompt and
// error measure the cache-type tests compare logits with, and the batched
// prefill check every cache type must pass.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "model/weights.h"

namespace ms::kvtest {

// 16 tokens inside every tiny model's vocabulary (512), one repeated.
inline const std::vector<int32_t> kPrompt = {5, 77, 300, 12, 41, 41, 200, 3, 499, 150, 64, 9, 250, 18, 7, 330};

// Relative RMS distance of a from b (n values).
inline double rel_rms(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// A 40-token random prompt fed in one call (batches of 16, 16, 8, all
// logits kept) gives every position's logits within 1e-4 of the same prompt
// fed token by token, with a cache of `type`; both caches then hold 40
// positions and continue with the same logits. `what` names the case in
// failure messages.
inline void expect_batched_prefill_equals_token_by_token(const ModelWeights& w, KvType type, const std::string& what) {
  std::vector<int32_t> prompt;
  std::mt19937 rng(5);
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int32_t>(rng() % 509));
  ThreadPool pool(2);
  CpuBackend one(w, pool);
  KvCache kv1 = one.make_cache(64, type);
  std::vector<float> step, all_steps;
  for (int32_t t : prompt) {
    one.forward(kv1, std::span<const int32_t>(&t, 1), step);
    all_steps.insert(all_steps.end(), step.begin(), step.end());
  }
  CpuBackend::Options o;
  o.max_batch = 16;  // 40 tokens: batches of 16, 16, 8
  CpuBackend batched(w, pool, o);
  KvCache kv2 = batched.make_cache(64, type);
  std::vector<float> all;
  batched.forward(kv2, prompt, all, /*all_logits=*/true);
  ASSERT_EQ(all.size(), all_steps.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < all.size(); ++i) worst = std::max(worst, double(std::fabs(all[i] - all_steps[i])));
  EXPECT_LT(worst, 1e-4) << what;
  EXPECT_EQ(kv2.n_past(), 40) << what;
  // Both caches continue the same way.
  const int32_t next = 17;
  one.forward(kv1, std::span<const int32_t>(&next, 1), step);
  batched.forward(kv2, std::span<const int32_t>(&next, 1), all);
  ASSERT_EQ(all.size(), step.size()) << what;
  for (size_t i = 0; i < step.size(); ++i) ASSERT_NEAR(step[i], all[i], 1e-4) << what << " logit " << i;
}

}  // namespace ms::kvtest
