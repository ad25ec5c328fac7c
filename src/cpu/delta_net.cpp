#include "cpu/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "cpu/delta_net_kernels.h"
#include "cpu/thread_pool.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace ms {
namespace {

inline double silu_d(double x) { return x / (1.0 + std::exp(-x)); }
inline float silu_f(float x) { return x / (1.0f + std::exp(-x)); }
// softplus without overflow for large x (where it equals x to float precision).
inline double softplus_d(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
inline float softplus_f(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void check_shape(const DeltaNetShape& s) {
  if (s.n_k_heads <= 0 || s.n_v_heads <= 0 || s.head_k <= 0 || s.head_v <= 0 || s.n_v_heads % s.n_k_heads != 0)
    throw Error("delta rule: bad shape (" + std::to_string(s.n_k_heads) + " key heads, " +
                std::to_string(s.n_v_heads) + " value heads of " + std::to_string(s.head_k) + "/" +
                std::to_string(s.head_v) + "); value heads must be a multiple of key heads");
}

// The row kernels of the recurrence, chosen once from the CPU's features.
struct RowKernels {
  float (*dot)(const float*, const float*, int);
  // row = row * decay + d * k; returns dot(row, q) (after the update)
  float (*update)(float* row, const float* k, const float* q, float decay, float d, int n);
};

float dot_scalar(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float update_scalar(float* row, const float* k, const float* q, float decay, float d, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      row[i + j] = row[i + j] * decay + d * k[i + j];
      acc[j] += row[i + j] * q[i + j];
    }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) {
    row[i] = row[i] * decay + d * k[i];
    s += row[i] * q[i];
  }
  return s;
}

const RowKernels& row_kernels() {
  static const RowKernels k = cpu_features().avx2
                                  ? RowKernels{delta_kernels::dot_avx2, delta_kernels::update_avx2}
                                  : RowKernels{dot_scalar, update_scalar};
  return k;
}

// One value head of the recurrence over n tokens, in float.
void head_recurrent(const DeltaNetShape& s, int h, const float* qkv, int64_t ld, const float* g, const float* beta,
                    int n, float* S, float* out) {
  const RowKernels& K = row_kernels();
  const int hk = s.head_k, hv = s.head_v, kh = h % s.n_k_heads;
  float* Sh = S + static_cast<int64_t>(h) * hv * hk;
  for (int t = 0; t < n; ++t) {
    const float* row = qkv + t * ld;
    const float* q = row + static_cast<int64_t>(kh) * hk;
    const float* k = row + s.key_dim() + static_cast<int64_t>(kh) * hk;
    const float* v = row + 2 * s.key_dim() + static_cast<int64_t>(h) * hv;
    const float decay = std::exp(g[static_cast<int64_t>(t) * s.n_v_heads + h]);
    const float b = beta[static_cast<int64_t>(t) * s.n_v_heads + h];
    float* o = out + static_cast<int64_t>(t) * s.value_dim() + static_cast<int64_t>(h) * hv;
    for (int c = 0; c < hv; ++c) {
      float* Sr = Sh + static_cast<int64_t>(c) * hk;
      // S k after the decay is decay * (S k): one pass reads the old row,
      // the second writes the new one and reads q against it.
      const float d = b * (v[c] - decay * K.dot(Sr, k, hk));
      o[c] = K.update(Sr, k, q, decay, d, hk);
    }
  }
}

// One value head of the chunked form over n tokens (see delta_rule_chunked).
// Within a chunk of C tokens, with G_i the cumulative log decay up to token
// i of the chunk and S the state before it:
//   T = I + L,  L[i][j] = beta_i (k_i . k_j) exp(G_i - G_j)   (j < i)
//   U = T^-1 [beta_i v_i],  W = T^-1 [beta_i exp(G_i) k_i]    (forward substitution)
//   Vn_i = U_i - S W_i                       (the corrected values)
//   o_i  = exp(G_i) S q_i + sum_{j<=i} (q_i . k_j) exp(G_i - G_j) Vn_j
//   S'   = exp(G_C) S + sum_i Vn_i (exp(G_C - G_i) k_i)^T
// which unrolls the recurrence exactly (the WY form of the delta rule).
void head_chunked(const DeltaNetShape& s, int h, const float* qkv, int64_t ld, const float* g, const float* beta,
                  int n, float* S, float* out, int chunk) {
  const int hk = s.head_k, hv = s.head_v, kh = h % s.n_k_heads;
  const int64_t kd = s.key_dim();
  float* Sh = S + static_cast<int64_t>(h) * hv * hk;
  const RowKernels& K = row_kernels();
  std::vector<float> G(chunk), kk(static_cast<size_t>(chunk) * chunk), qk(static_cast<size_t>(chunk) * chunk);
  std::vector<float> U(static_cast<size_t>(chunk) * hv), W(static_cast<size_t>(chunk) * hk);
  std::vector<float> Vn(static_cast<size_t>(chunk) * hv), qg(hk), kg(static_cast<size_t>(chunk) * hk);
  for (int t0 = 0; t0 < n; t0 += chunk) {
    const int C = std::min(chunk, n - t0);
    auto q_of = [&](int i) { return qkv + (t0 + i) * ld + static_cast<int64_t>(kh) * hk; };
    auto k_of = [&](int i) { return qkv + (t0 + i) * ld + kd + static_cast<int64_t>(kh) * hk; };
    auto v_of = [&](int i) { return qkv + (t0 + i) * ld + 2 * kd + static_cast<int64_t>(h) * hv; };
    float acc = 0;
    for (int i = 0; i < C; ++i) {
      acc += g[static_cast<int64_t>(t0 + i) * s.n_v_heads + h];
      G[i] = acc;
    }
    // Pairwise products within the chunk (lower triangle incl. diagonal).
    for (int i = 0; i < C; ++i)
      for (int j = 0; j <= i; ++j) {
        kk[i * chunk + j] = K.dot(k_of(i), k_of(j), hk);
        qk[i * chunk + j] = K.dot(q_of(i), k_of(j), hk);
      }
    // U and W by forward substitution through T = I + L.
    for (int i = 0; i < C; ++i) {
      const float b = beta[static_cast<int64_t>(t0 + i) * s.n_v_heads + h];
      float* Ui = U.data() + static_cast<int64_t>(i) * hv;
      float* Wi = W.data() + static_cast<int64_t>(i) * hk;
      const float* vi = v_of(i);
      const float* ki = k_of(i);
      const float eg = std::exp(G[i]);
      for (int c = 0; c < hv; ++c) Ui[c] = b * vi[c];
      for (int c = 0; c < hk; ++c) Wi[c] = b * eg * ki[c];
      for (int j = 0; j < i; ++j) {
        const float l = b * kk[i * chunk + j] * std::exp(G[i] - G[j]);
        const float* Uj = U.data() + static_cast<int64_t>(j) * hv;
        const float* Wj = W.data() + static_cast<int64_t>(j) * hk;
        for (int c = 0; c < hv; ++c) Ui[c] -= l * Uj[c];
        for (int c = 0; c < hk; ++c) Wi[c] -= l * Wj[c];
      }
    }
    // Corrected values and the read of the old state: Vn_i = U_i - S W_i,
    // o_i = exp(G_i) S q_i (row c of S is what value channel c reads).
    for (int i = 0; i < C; ++i) {
      float* o = out + static_cast<int64_t>(t0 + i) * s.value_dim() + static_cast<int64_t>(h) * hv;
      const float* Wi = W.data() + static_cast<int64_t>(i) * hk;
      const float* qi = q_of(i);
      const float eg = std::exp(G[i]);
      float* Vi = Vn.data() + static_cast<int64_t>(i) * hv;
      for (int c = 0; c < hv; ++c) {
        const float* Sr = Sh + static_cast<int64_t>(c) * hk;
        Vi[c] = U[static_cast<size_t>(i) * hv + c] - K.dot(Sr, Wi, hk);
        o[c] = eg * K.dot(Sr, qi, hk);
      }
    }
    // Within the chunk: o_i += sum_{j<=i} (q_i . k_j) exp(G_i - G_j) Vn_j.
    for (int i = 0; i < C; ++i) {
      float* o = out + static_cast<int64_t>(t0 + i) * s.value_dim() + static_cast<int64_t>(h) * hv;
      for (int j = 0; j <= i; ++j) {
        const float a = qk[i * chunk + j] * std::exp(G[i] - G[j]);
        const float* Vj = Vn.data() + static_cast<int64_t>(j) * hv;
        for (int c = 0; c < hv; ++c) o[c] += a * Vj[c];
      }
    }
    // The state after the chunk.
    const float GC = G[C - 1], eC = std::exp(GC);
    for (int i = 0; i < C; ++i) {
      const float e = std::exp(GC - G[i]);
      const float* ki = k_of(i);
      for (int c = 0; c < hk; ++c) kg[static_cast<size_t>(i) * hk + c] = e * ki[c];
    }
    for (int c = 0; c < hv; ++c) {
      float* Sr = Sh + static_cast<int64_t>(c) * hk;
      for (int x = 0; x < hk; ++x) Sr[x] *= eC;
      for (int i = 0; i < C; ++i) {
        const float vn = Vn[static_cast<size_t>(i) * hv + c];
        const float* kgi = kg.data() + static_cast<size_t>(i) * hk;
        for (int x = 0; x < hk; ++x) Sr[x] += vn * kgi[x];
      }
    }
  }
}

void over_heads(ThreadPool* pool, int n_heads, const std::function<void(int)>& fn) {
  if (pool && n_heads > 1) {
    pool->parallel_for(n_heads, 1, [&](int64_t b, int64_t e) {
      for (int64_t h = b; h < e; ++h) fn(static_cast<int>(h));
    });
  } else {
    for (int h = 0; h < n_heads; ++h) fn(h);
  }
}

}  // namespace

// ---------------------------------------------------------------- conv

void conv1d_silu_ref(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, int taps, float* window,
                     float* out) {
  const int hist = taps - 1;
  // input(t) for t in [-hist, n): the window, then x.
  auto in = [&](int t, int64_t c) -> double {
    return t < 0 ? window[static_cast<int64_t>(t + hist) * channels + c] : x[t * ld_x + c];
  };
  for (int t = 0; t < n; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      double acc = 0;
      for (int j = 0; j < taps; ++j) acc += static_cast<double>(w[c * taps + j]) * in(t - hist + j, c);
      out[t * channels + c] = static_cast<float>(silu_d(acc));
    }
  // The new window: the last hist inputs (from the window when n < hist).
  std::vector<float> next(static_cast<size_t>(hist * channels));
  for (int r = 0; r < hist; ++r)
    for (int64_t c = 0; c < channels; ++c) next[static_cast<size_t>(r * channels + c)] = static_cast<float>(in(n - hist + r, c));
  std::copy(next.begin(), next.end(), window);
}

void conv1d_silu(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, int taps, float* window,
                 float* out) {
  const int hist = taps - 1;
  // Channel-innermost loops (contiguous in x, out and window); the weight of
  // channel c tap j is strided, so gather each tap once per call.
  std::vector<float> wt(static_cast<size_t>(taps * channels));
  for (int64_t c = 0; c < channels; ++c)
    for (int j = 0; j < taps; ++j) wt[static_cast<size_t>(j * channels + c)] = w[c * taps + j];
  for (int t = 0; t < n; ++t) {
    float* o = out + t * channels;
    std::fill(o, o + channels, 0.0f);
    for (int j = 0; j < taps; ++j) {
      const int src = t - hist + j;
      const float* in = src < 0 ? window + static_cast<int64_t>(src + hist) * channels : x + src * ld_x;
      const float* wj = wt.data() + static_cast<int64_t>(j) * channels;
      for (int64_t c = 0; c < channels; ++c) o[c] += wj[c] * in[c];
    }
    for (int64_t c = 0; c < channels; ++c) o[c] = silu_f(o[c]);
  }
  // Advance the window by n inputs.
  if (n >= hist) {
    for (int r = 0; r < hist; ++r) std::memcpy(window + r * channels, x + (n - hist + r) * ld_x, sizeof(float) * channels);
  } else {
    std::memmove(window, window + n * channels, sizeof(float) * (hist - n) * channels);
    for (int r = 0; r < n; ++r) std::memcpy(window + (hist - n + r) * channels, x + r * ld_x, sizeof(float) * channels);
  }
}

// ---------------------------------------------------------------- small per-head ops

void l2norm_scale_ref(float* x, int64_t n, float eps, float scale) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double f = scale / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * f);
}

void l2norm_scale(float* x, int64_t n, float eps, float scale) {
  const float ss = dot_scalar(x, x, static_cast<int>(n));
  const float f = scale / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= f;
}

void delta_gates_ref(const float* alpha, const float* b, const float* ssm_a, const float* dt_bias, int n_v, float* g,
                     float* beta) {
  for (int h = 0; h < n_v; ++h) {
    g[h] = static_cast<float>(static_cast<double>(ssm_a[h]) * softplus_d(static_cast<double>(alpha[h]) + dt_bias[h]));
    beta[h] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(b[h]))));
  }
}

void delta_gates(const float* alpha, const float* b, const float* ssm_a, const float* dt_bias, int n_v, float* g,
                 float* beta) {
  for (int h = 0; h < n_v; ++h) {
    g[h] = ssm_a[h] * softplus_f(alpha[h] + dt_bias[h]);
    beta[h] = 1.0f / (1.0f + std::exp(-b[h]));
  }
}

void gated_rmsnorm_ref(const float* x, const float* z, const float* w, float* out, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * r * w[i] * silu_d(z[i]));
}

void gated_rmsnorm(const float* x, const float* z, const float* w, float* out, int64_t n, float eps) {
  const float ss = dot_scalar(x, x, static_cast<int>(n));
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r * w[i] * silu_f(z[i]);
}

void delta_prepare_qk(const DeltaNetShape& s, float* row, float eps) {
  const float qscale = 1.0f / std::sqrt(static_cast<float>(s.head_k));
  for (int kh = 0; kh < s.n_k_heads; ++kh) {
    l2norm_scale(row + static_cast<int64_t>(kh) * s.head_k, s.head_k, eps, qscale);
    l2norm_scale(row + s.key_dim() + static_cast<int64_t>(kh) * s.head_k, s.head_k, eps, 1.0f);
  }
}

// ---------------------------------------------------------------- the delta rule

void delta_rule_ref(const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g, const float* beta, int n,
                    float* S, float* out) {
  check_shape(s);
  const int hk = s.head_k, hv = s.head_v;
  std::vector<double> Sd(static_cast<size_t>(s.state_elems()));
  for (size_t i = 0; i < Sd.size(); ++i) Sd[i] = S[i];
  for (int t = 0; t < n; ++t) {
    const float* row = qkv + t * ld;
    for (int h = 0; h < s.n_v_heads; ++h) {
      const int kh = h % s.n_k_heads;
      const float* q = row + static_cast<int64_t>(kh) * hk;
      const float* k = row + s.key_dim() + static_cast<int64_t>(kh) * hk;
      const float* v = row + 2 * s.key_dim() + static_cast<int64_t>(h) * hv;
      const double decay = std::exp(static_cast<double>(g[static_cast<int64_t>(t) * s.n_v_heads + h]));
      const double b = beta[static_cast<int64_t>(t) * s.n_v_heads + h];
      double* Sh = Sd.data() + static_cast<size_t>(h) * hv * hk;
      for (int c = 0; c < hv; ++c) {
        double* Sr = Sh + static_cast<size_t>(c) * hk;
        double sk = 0;
        for (int x = 0; x < hk; ++x) {
          Sr[x] *= decay;
          sk += Sr[x] * k[x];
        }
        const double d = b * (v[c] - sk);
        double o = 0;
        for (int x = 0; x < hk; ++x) {
          Sr[x] += d * k[x];
          o += Sr[x] * q[x];
        }
        out[static_cast<int64_t>(t) * s.value_dim() + static_cast<int64_t>(h) * hv + c] = static_cast<float>(o);
      }
    }
  }
  for (size_t i = 0; i < Sd.size(); ++i) S[i] = static_cast<float>(Sd[i]);
}

void delta_rule_recurrent(ThreadPool* pool, const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g,
                          const float* beta, int n, float* S, float* out) {
  check_shape(s);
  over_heads(pool, s.n_v_heads, [&](int h) { head_recurrent(s, h, qkv, ld, g, beta, n, S, out); });
}

void delta_rule_chunked(ThreadPool* pool, const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g,
                        const float* beta, int n, float* S, float* out, int chunk) {
  check_shape(s);
  if (chunk < 1) throw Error("delta rule: chunk must be >= 1");
  over_heads(pool, s.n_v_heads, [&](int h) { head_chunked(s, h, qkv, ld, g, beta, n, S, out, chunk); });
}

void delta_rule(ThreadPool* pool, const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g,
                const float* beta, int n, float* S, float* out) {
  if (n == 1) delta_rule_recurrent(pool, s, qkv, ld, g, beta, n, S, out);
  else delta_rule_chunked(pool, s, qkv, ld, g, beta, n, S, out);
}

}  // namespace ms
