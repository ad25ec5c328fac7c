#include "cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "cpu/attention_kernels.h"
#include "cpu/thread_pool.h"
#include "quant/half.h"
#include "util/cpu_features.h"

namespace ms {
namespace {

float dot_f32_f16_scalar(const float* a, const uint16_t* b, int n) {
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += a[i] * f16_to_f32(b[i]);
  return sum;
}

void axpy_f16_scalar(float w, const uint16_t* v, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += w * f16_to_f32(v[i]);
}

struct HalfKernels {
  float (*dot)(const float*, const uint16_t*, int);
  void (*axpy)(float, const uint16_t*, float*, int);
};

const HalfKernels& half_kernels() {
  static const HalfKernels k = cpu_features().avx2
                                   ? HalfKernels{attn_kernels::dot_f32_f16_avx2, attn_kernels::axpy_f16_avx2}
                                   : HalfKernels{dot_f32_f16_scalar, axpy_f16_scalar};
  return k;
}

// One (token, head): scores over kv_len positions, softmax, weighted V sum.
void attend_one(const AttentionShape& s, const HalfKernels& hk, const float* q, const uint16_t* k_head,
                const uint16_t* v_head, int64_t kv_len, float* scores, float* out) {
  const int d = s.head_dim;
  float mx = -INFINITY;
  for (int64_t j = 0; j < kv_len; ++j) {
    scores[j] = hk.dot(q, k_head + j * d, d) * s.scale;
    mx = std::max(mx, scores[j]);
  }
  float sum = 0;
  for (int64_t j = 0; j < kv_len; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  std::fill(out, out + d, 0.0f);
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < kv_len; ++j) hk.axpy(scores[j] * inv, v_head + j * d, out, d);
}

}  // namespace

void attention_ref(const AttentionShape& s, const float* q, const uint16_t* k_cache,
                   const uint16_t* v_cache, int n_tokens, int64_t pos0, float* out) {
  const int d = s.head_dim;
  const int group = s.n_head / s.n_kv;
  std::vector<double> scores;
  for (int t = 0; t < n_tokens; ++t) {
    const int64_t kv_len = pos0 + t + 1;
    scores.assign(static_cast<size_t>(kv_len), 0.0);
    for (int h = 0; h < s.n_head; ++h) {
      const float* qh = q + (static_cast<int64_t>(t) * s.n_head + h) * d;
      const int64_t kv_base = static_cast<int64_t>(h / group) * s.ctx * d;
      double mx = -INFINITY;
      for (int64_t j = 0; j < kv_len; ++j) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(qh[i]) * f16_to_f32(k_cache[kv_base + j * d + i]);
        scores[j] = dot * s.scale;
        mx = std::max(mx, scores[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < kv_len; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
      float* oh = out + (static_cast<int64_t>(t) * s.n_head + h) * d;
      for (int i = 0; i < d; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < kv_len; ++j) acc += scores[j] * f16_to_f32(v_cache[kv_base + j * d + i]);
        oh[i] = static_cast<float>(acc / sum);
      }
    }
  }
}

void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const uint16_t* k_cache,
               const uint16_t* v_cache, int n_tokens, int64_t pos0, float* out) {
  const HalfKernels& hk = half_kernels();
  const int d = s.head_dim;
  const int group = s.n_head / s.n_kv;
  const int64_t n_items = static_cast<int64_t>(n_tokens) * s.n_head;
  const int64_t max_len = pos0 + n_tokens;
  std::atomic<int64_t> next{0};
  // One scores buffer per thread; items (token, head) handed out one by one
  // (their cost grows with the token's position, so static splits balance badly).
  auto work = [&](int, int) {
    std::vector<float> scores(static_cast<size_t>(max_len));
    for (;;) {
      const int64_t item = next.fetch_add(1, std::memory_order_relaxed);
      if (item >= n_items) break;
      const int t = static_cast<int>(item / s.n_head), h = static_cast<int>(item % s.n_head);
      const int64_t kv_base = static_cast<int64_t>(h / group) * s.ctx * d;
      attend_one(s, hk, q + item * d, k_cache + kv_base, v_cache + kv_base, pos0 + t + 1, scores.data(),
                 out + item * d);
    }
  };
  if (n_items * max_len * d < 32768 || pool.size() == 1)
    work(0, 1);  // too small to be worth waking the pool
  else
    pool.run_on_all(work);
}

void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              uint16_t* k_cache, uint16_t* v_cache) {
  const int d = s.head_dim;
  const bool avx2 = cpu_features().avx2;
  for (int t = 0; t < n_tokens; ++t)
    for (int h = 0; h < s.n_kv; ++h) {
      const int64_t src = (static_cast<int64_t>(t) * s.n_kv + h) * d;
      const int64_t dst = (static_cast<int64_t>(h) * s.ctx + pos0 + t) * d;
      if (avx2) {
        attn_kernels::f32_to_f16_row_avx2(k + src, k_cache + dst, d);
        attn_kernels::f32_to_f16_row_avx2(v + src, v_cache + dst, d);
      } else {
        for (int i = 0; i < d; ++i) {
          k_cache[dst + i] = f32_to_f16(k[src + i]);
          v_cache[dst + i] = f32_to_f16(v[src + i]);
        }
      }
    }
}

}  // namespace ms
