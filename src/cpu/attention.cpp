#include "cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu/attention_kernels.h"
#include "cpu/thread_pool.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace ms {
namespace {

// Every function below is written once for the cache's unit types (uint16_t
// halves, floats, BlockQ8_0); row_units and elem are where they differ.
// A row of head_dim elements is head_dim units, or head_dim/32 blocks.
inline int64_t row_units(const uint16_t*, int d) { return d; }
inline int64_t row_units(const float*, int d) { return d; }
inline int64_t row_units(const BlockQ8_0*, int d) { return d / QK; }

// Element i of a row as a float (q8_0: d * q, exact in float: 11 by 8 bits).
inline float elem(const uint16_t* row, int i) { return f16_to_f32(row[i]); }
inline float elem(const float* row, int i) { return row[i]; }
inline float elem(const BlockQ8_0* row, int i) {
  const BlockQ8_0& b = row[i / QK];
  return f16_to_f32(b.d) * static_cast<float>(b.qs[i % QK]);
}

template <typename T>
float dot_scalar(const float* a, const T* b, int n) {
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += a[i] * elem(b, i);
  return sum;
}

template <typename T>
void axpy_scalar(float w, const T* v, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += w * elem(v, i);
}

}  // namespace

// Q8_0 without SIMD (declared in attention_kernels.h, for its tests).
float attn_kernels::dot_f32_q8_0_scalar(const float* a, const BlockQ8_0* b, int n) {
  float sum = 0;
  for (int blk = 0; blk < n / QK; ++blk) {
    float s = 0;
    for (int i = 0; i < QK; ++i) s += a[blk * QK + i] * static_cast<float>(b[blk].qs[i]);
    sum += f16_to_f32(b[blk].d) * s;
  }
  return sum;
}

void attn_kernels::axpy_q8_0_scalar(float w, const BlockQ8_0* v, float* y, int n) {
  for (int blk = 0; blk < n / QK; ++blk) {
    const float ws = w * f16_to_f32(v[blk].d);
    for (int i = 0; i < QK; ++i) y[blk * QK + i] += ws * static_cast<float>(v[blk].qs[i]);
  }
}

namespace {

template <typename T>
struct RowKernels {
  float (*dot)(const float*, const T*, int);
  void (*axpy)(float, const T*, float*, int);
};

// Chosen once from the CPU's features; the overload is picked by the cache type.
const RowKernels<uint16_t>& row_kernels(const uint16_t*) {
  static const RowKernels<uint16_t> k =
      cpu_features().avx2 ? RowKernels<uint16_t>{attn_kernels::dot_f32_f16_avx2, attn_kernels::axpy_f16_avx2}
                          : RowKernels<uint16_t>{dot_scalar<uint16_t>, axpy_scalar<uint16_t>};
  return k;
}

const RowKernels<float>& row_kernels(const float*) {
  static const RowKernels<float> k =
      cpu_features().avx2 ? RowKernels<float>{attn_kernels::dot_f32_f32_avx2, attn_kernels::axpy_f32_avx2}
                          : RowKernels<float>{dot_scalar<float>, axpy_scalar<float>};
  return k;
}

const RowKernels<BlockQ8_0>& row_kernels(const BlockQ8_0*) {
  static const RowKernels<BlockQ8_0> k =
      cpu_features().avx2 ? RowKernels<BlockQ8_0>{attn_kernels::dot_f32_q8_0_avx2, attn_kernels::axpy_q8_0_avx2}
                          : RowKernels<BlockQ8_0>{attn_kernels::dot_f32_q8_0_scalar, attn_kernels::axpy_q8_0_scalar};
  return k;
}

// The first key position the query at position p sees.
inline int64_t first_key(const AttentionExtras& x, int64_t p) {
  return x.window > 0 ? std::max<int64_t>(0, p - x.window + 1) : 0;
}

void check_extras(const AttentionExtras& x) {
  if (x.window < 0) throw Error("attention: sliding window " + std::to_string(x.window) + " must be >= 0");
}

// One (token, head): scores over the keys of positions j0 .. j1-1 (rows of
// KV head kv), then those of the rows extra[0 .. n_extra-1] (a token tree's
// ancestors, ascending), softmax (with the sink's term in the denominator
// when there is one), weighted V sum. The same operations in the same order
// whatever the rows' pages: a paged cache gives the contiguous one's results
// bit for bit, and a tree node the results of its path at consecutive
// positions.
template <typename T>
void attend_one(const AttentionShape& s, const RowKernels<T>& rk, const float* q, const KvRows<T>& k,
                const KvRows<T>& v, int kh, int64_t j0, int64_t j1, const int64_t* extra, int n_extra,
                const float* sink, float* scores, float* out) {
  const int d = s.head_dim;
  const int64_t n_range = j1 - j0;
  float mx = -INFINITY;
  k.for_rows(kh, j0, j1, [&](int64_t j, const T* row) {
    scores[j - j0] = rk.dot(q, row, d) * s.scale;
    mx = std::max(mx, scores[j - j0]);
  });
  for (int e = 0; e < n_extra; ++e) {
    scores[n_range + e] = rk.dot(q, k.row(kh, extra[e]), d) * s.scale;
    mx = std::max(mx, scores[n_range + e]);
  }
  if (sink) mx = std::max(mx, *sink);
  float sum = 0;
  for (int64_t j = 0; j < n_range + n_extra; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  if (sink) sum += std::exp(*sink - mx);
  std::fill(out, out + d, 0.0f);
  const float inv = 1.0f / sum;
  v.for_rows(kh, j0, j1, [&](int64_t j, const T* row) { rk.axpy(scores[j - j0] * inv, row, out, d); });
  for (int e = 0; e < n_extra; ++e) rk.axpy(scores[n_range + e] * inv, v.row(kh, extra[e]), out, d);
}

// A token tree's keys (attention_tree): per token, its position and the
// slots it sees past the prefix (its ancestors' and its own, ascending,
// those inside the window).
struct TreeKeys {
  std::vector<int64_t> pos;     // [n]: pos0 + depth
  std::vector<int64_t> slots;   // the slots of token t: slots[first[t] .. first[t+1])
  std::vector<int64_t> first;   // [n + 1]
  int max_keys = 0;             // the most slots past the prefix any token sees
};

TreeKeys tree_keys(const int32_t* parents, int n_tokens, int64_t pos0, const AttentionExtras& x) {
  TreeKeys tk;
  std::vector<int32_t> depth(static_cast<size_t>(n_tokens));
  for (int t = 0; t < n_tokens; ++t) {
    const int32_t p = parents[t];
    if (p < -1 || p >= t)
      throw Error("attention: token " + std::to_string(t) + " of a tree has parent " + std::to_string(p) +
                  " (must be -1 or an earlier token)");
    depth[static_cast<size_t>(t)] = p < 0 ? 0 : depth[static_cast<size_t>(p)] + 1;
  }
  tk.pos.resize(static_cast<size_t>(n_tokens));
  tk.first.push_back(0);
  std::vector<int64_t> path;
  for (int t = 0; t < n_tokens; ++t) {
    const int64_t p = pos0 + depth[static_cast<size_t>(t)];
    tk.pos[static_cast<size_t>(t)] = p;
    path.clear();
    for (int a = t; a >= 0; a = parents[a]) path.push_back(a);
    const int64_t lo = x.window > 0 ? p - x.window + 1 : std::numeric_limits<int64_t>::min();
    int n = 0;
    for (auto it = path.rbegin(); it != path.rend(); ++it) {  // root first: ascending slots
      const int64_t key_pos = pos0 + depth[static_cast<size_t>(*it)];
      if (key_pos < lo) continue;
      tk.slots.push_back(pos0 + *it);
      ++n;
    }
    tk.max_keys = std::max(tk.max_keys, n);
    tk.first.push_back(static_cast<int64_t>(tk.slots.size()));
  }
  return tk;
}

template <typename T>
void attention_ref_impl(const AttentionShape& s, const float* q, const KvRows<T>& k_cache, const KvRows<T>& v_cache,
                        int n_tokens, int64_t pos0, float* out, const AttentionExtras& x) {
  check_extras(x);
  const int d = s.head_dim;
  const int group = s.n_head / s.n_kv;
  std::vector<double> scores;
  for (int t = 0; t < n_tokens; ++t) {
    const int64_t kv_len = pos0 + t + 1, j0 = first_key(x, pos0 + t);
    scores.assign(static_cast<size_t>(kv_len), 0.0);
    for (int h = 0; h < s.n_head; ++h) {
      const float* qh = q + (static_cast<int64_t>(t) * s.n_head + h) * d;
      const int kh = h / group;
      double mx = -INFINITY;
      for (int64_t j = j0; j < kv_len; ++j) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(qh[i]) * elem(k_cache.row(kh, j), i);
        scores[j] = dot * s.scale;
        mx = std::max(mx, scores[j]);
      }
      if (x.sinks) mx = std::max(mx, static_cast<double>(x.sinks[h]));
      double sum = 0;
      for (int64_t j = j0; j < kv_len; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
      if (x.sinks) sum += std::exp(static_cast<double>(x.sinks[h]) - mx);
      float* oh = out + (static_cast<int64_t>(t) * s.n_head + h) * d;
      for (int i = 0; i < d; ++i) {
        double acc = 0;
        for (int64_t j = j0; j < kv_len; ++j) acc += scores[j] * elem(v_cache.row(kh, j), i);
        oh[i] = static_cast<float>(acc / sum);
      }
    }
  }
}

template <typename T>
void attention_impl(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<T>& k_cache,
                    const KvRows<T>& v_cache, int n_tokens, int64_t pos0, float* out, const AttentionExtras& x) {
  check_extras(x);
  const RowKernels<T>& rk = row_kernels(static_cast<const T*>(nullptr));
  const int d = s.head_dim;
  const int group = s.n_head / s.n_kv;
  const int64_t n_items = static_cast<int64_t>(n_tokens) * s.n_head;
  const int64_t max_len = x.window > 0 ? std::min<int64_t>(x.window, pos0 + n_tokens) : pos0 + n_tokens;
  std::atomic<int64_t> next{0};
  // One scores buffer per thread; items (token, head) handed out one by one
  // (their cost grows with the token's position, so static splits balance badly).
  auto work = [&](int, int) {
    std::vector<float> scores(static_cast<size_t>(max_len));
    for (;;) {
      const int64_t item = next.fetch_add(1, std::memory_order_relaxed);
      if (item >= n_items) break;
      const int t = static_cast<int>(item / s.n_head), h = static_cast<int>(item % s.n_head);
      attend_one(s, rk, q + item * d, k_cache, v_cache, h / group, first_key(x, pos0 + t), pos0 + t + 1, nullptr, 0,
                 x.sinks ? x.sinks + h : nullptr, scores.data(), out + item * d);
    }
  };
  if (n_items * max_len * d < 32768 || pool.size() == 1)
    work(0, 1);  // too small to be worth waking the pool
  else
    pool.run_on_all(work);
}

template <typename T>
void attention_tree_ref_impl(const AttentionShape& s, const float* q, const KvRows<T>& k_cache,
                             const KvRows<T>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents, float* out,
                             const AttentionExtras& x) {
  check_extras(x);
  const TreeKeys tk = tree_keys(parents, n_tokens, pos0, x);
  const int d = s.head_dim;
  const int group = s.n_head / s.n_kv;
  std::vector<int64_t> keys;
  std::vector<double> scores;
  for (int t = 0; t < n_tokens; ++t) {
    keys.clear();
    for (int64_t j = std::min(first_key(x, tk.pos[static_cast<size_t>(t)]), pos0); j < pos0; ++j) keys.push_back(j);
    keys.insert(keys.end(), tk.slots.begin() + tk.first[static_cast<size_t>(t)],
                tk.slots.begin() + tk.first[static_cast<size_t>(t) + 1]);
    scores.assign(keys.size(), 0.0);
    for (int h = 0; h < s.n_head; ++h) {
      const float* qh = q + (static_cast<int64_t>(t) * s.n_head + h) * d;
      const int kh = h / group;
      double mx = -INFINITY;
      for (size_t j = 0; j < keys.size(); ++j) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(qh[i]) * elem(k_cache.row(kh, keys[j]), i);
        scores[j] = dot * s.scale;
        mx = std::max(mx, scores[j]);
      }
      if (x.sinks) mx = std::max(mx, static_cast<double>(x.sinks[h]));
      double sum = 0;
      for (double& sc : scores) sum += (sc = std::exp(sc - mx));
      if (x.sinks) sum += std::exp(static_cast<double>(x.sinks[h]) - mx);
      float* oh = out + (static_cast<int64_t>(t) * s.n_head + h) * d;
      for (int i = 0; i < d; ++i) {
        double acc = 0;
        for (size_t j = 0; j < keys.size(); ++j) acc += scores[j] * elem(v_cache.row(kh, keys[j]), i);
        oh[i] = static_cast<float>(acc / sum);
      }
    }
  }
}

template <typename T>
void attention_tree_impl(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<T>& k_cache,
                         const KvRows<T>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents, float* out,
                         const AttentionExtras& x) {
  check_extras(x);
  const TreeKeys tk = tree_keys(parents, n_tokens, pos0, x);
  const RowKernels<T>& rk = row_kernels(static_cast<const T*>(nullptr));
  const int d = s.head_dim;
  const int group = s.n_head / s.n_kv;
  const int64_t n_items = static_cast<int64_t>(n_tokens) * s.n_head;
  const int64_t max_len = (x.window > 0 ? std::min<int64_t>(x.window, pos0) : pos0) + tk.max_keys;
  std::atomic<int64_t> next{0};
  auto work = [&](int, int) {
    std::vector<float> scores(static_cast<size_t>(std::max<int64_t>(max_len, 1)));
    for (;;) {
      const int64_t item = next.fetch_add(1, std::memory_order_relaxed);
      if (item >= n_items) break;
      const size_t t = static_cast<size_t>(item / s.n_head);
      const int h = static_cast<int>(item % s.n_head);
      const int64_t j0 = std::min(first_key(x, tk.pos[t]), pos0);
      attend_one(s, rk, q + item * d, k_cache, v_cache, h / group, j0, pos0, tk.slots.data() + tk.first[t],
                 static_cast<int>(tk.first[t + 1] - tk.first[t]), x.sinks ? x.sinks + h : nullptr, scores.data(),
                 out + item * d);
    }
  };
  if (n_items * max_len * d < 32768 || pool.size() == 1)
    work(0, 1);
  else
    pool.run_on_all(work);
}

// Calls store_row(src, dst) for k and v of every (token, KV head).
template <typename T, typename StoreRow>
void kv_store_impl(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
                   const KvRows<T>& k_cache, const KvRows<T>& v_cache, StoreRow store_row) {
  const int d = s.head_dim;
  for (int t = 0; t < n_tokens; ++t)
    for (int h = 0; h < s.n_kv; ++h) {
      const int64_t src = (static_cast<int64_t>(t) * s.n_kv + h) * d;
      store_row(k + src, k_cache.row(h, pos0 + t));
      store_row(v + src, v_cache.row(h, pos0 + t));
    }
}

// The pointer overloads' contiguous [n_kv][ctx] caches, as one page.
template <typename T>
KvRows<T> flat(const T* cache, const AttentionShape& s) {
  return contiguous_rows(const_cast<T*>(cache), s.ctx, row_units(cache, s.head_dim));
}

}  // namespace

#define MS_ATTENTION_OVERLOADS(T)                                                                                   \
  void attention_ref(const AttentionShape& s, const float* q, const T* k_cache, const T* v_cache, int n_tokens,   \
                     int64_t pos0, float* out, const AttentionExtras& x) {                                        \
    attention_ref_impl(s, q, flat(k_cache, s), flat(v_cache, s), n_tokens, pos0, out, x);                         \
  }                                                                                                               \
  void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const T* k_cache, const T* v_cache,    \
                 int n_tokens, int64_t pos0, float* out, const AttentionExtras& x) {                              \
    attention_impl(pool, s, q, flat(k_cache, s), flat(v_cache, s), n_tokens, pos0, out, x);                       \
  }                                                                                                               \
  void attention_ref(const AttentionShape& s, const float* q, const KvRows<T>& k_cache, const KvRows<T>& v_cache, \
                     int n_tokens, int64_t pos0, float* out, const AttentionExtras& x) {                          \
    attention_ref_impl(s, q, k_cache, v_cache, n_tokens, pos0, out, x);                                           \
  }                                                                                                               \
  void attention(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<T>& k_cache,             \
                 const KvRows<T>& v_cache, int n_tokens, int64_t pos0, float* out, const AttentionExtras& x) {    \
    attention_impl(pool, s, q, k_cache, v_cache, n_tokens, pos0, out, x);                                         \
  }                                                                                                               \
  void attention_tree_ref(const AttentionShape& s, const float* q, const KvRows<T>& k_cache,                      \
                          const KvRows<T>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents, float* out, \
                          const AttentionExtras& x) {                                                             \
    attention_tree_ref_impl(s, q, k_cache, v_cache, n_tokens, pos0, parents, out, x);                             \
  }                                                                                                               \
  void attention_tree(ThreadPool& pool, const AttentionShape& s, const float* q, const KvRows<T>& k_cache,        \
                      const KvRows<T>& v_cache, int n_tokens, int64_t pos0, const int32_t* parents, float* out,   \
                      const AttentionExtras& x) {                                                                 \
    attention_tree_impl(pool, s, q, k_cache, v_cache, n_tokens, pos0, parents, out, x);                           \
  }                                                                                                               \
  void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0, T* k_cache,  \
                T* v_cache) {                                                                                     \
    kv_store(s, k, v, n_tokens, pos0, flat(k_cache, s), flat(v_cache, s));                                        \
  }

MS_ATTENTION_OVERLOADS(uint16_t)
MS_ATTENTION_OVERLOADS(float)
MS_ATTENTION_OVERLOADS(BlockQ8_0)
#undef MS_ATTENTION_OVERLOADS

void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              const KvRows<uint16_t>& k_cache, const KvRows<uint16_t>& v_cache) {
  const int d = s.head_dim;
  if (cpu_features().avx2)
    kv_store_impl(s, k, v, n_tokens, pos0, k_cache, v_cache,
                  [d](const float* src, uint16_t* dst) { attn_kernels::f32_to_f16_row_avx2(src, dst, d); });
  else
    kv_store_impl(s, k, v, n_tokens, pos0, k_cache, v_cache, [d](const float* src, uint16_t* dst) {
      for (int i = 0; i < d; ++i) dst[i] = f32_to_f16(src[i]);
    });
}

void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              const KvRows<float>& k_cache, const KvRows<float>& v_cache) {
  const int d = s.head_dim;
  kv_store_impl(s, k, v, n_tokens, pos0, k_cache, v_cache,
                [d](const float* src, float* dst) { std::copy(src, src + d, dst); });
}

void kv_store(const AttentionShape& s, const float* k, const float* v, int n_tokens, int64_t pos0,
              const KvRows<BlockQ8_0>& k_cache, const KvRows<BlockQ8_0>& v_cache) {
  const int d = s.head_dim;
  kv_store_impl(s, k, v, n_tokens, pos0, k_cache, v_cache,
                [d](const float* src, BlockQ8_0* dst) { quantize_row_act(DType::Q8_0, src, dst, d); });
}

}  // namespace ms
