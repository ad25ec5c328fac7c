#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "util/error.h"

namespace ms {

// ---------------------------------------------------------------- RMSNorm

void rmsnorm_ref(const float* x, const float* w, float* out, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps) {
  // Eight independent partial sums: lets the compiler keep them in vector
  // lanes (a single accumulator forces a serial chain).
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j] * x[i + j];
  float ss = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  if (w) {
    for (int64_t k = 0; k < n; ++k) out[k] = x[k] * scale * w[k];
  } else {
    for (int64_t k = 0; k < n; ++k) out[k] = x[k] * scale;
  }
}

// ---------------------------------------------------------------- RoPE

void rope_ref(float* x, int n_heads, int head_dim, int n_rot, int64_t pos, float theta_base,
              const RopeScaling& scaling, RopeMode mode) {
  const int half = n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const double freq = std::pow(static_cast<double>(theta_base), -2.0 * i / n_rot);
      const double angle = static_cast<double>(pos) * rope_pair_scale(scaling, i) * freq;
      const float c = static_cast<float>(std::cos(angle)) * scaling.mscale;
      const float s = static_cast<float>(std::sin(angle)) * scaling.mscale;
      const int a = mode == RopeMode::Normal ? 2 * i : i;
      const int b = mode == RopeMode::Normal ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void rope_table(float* cs, int n_rot, int64_t pos, float theta_base, const RopeScaling& scaling) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    // Angles in double: at position 100k a float angle loses ~3 digits.
    const double freq = std::pow(static_cast<double>(theta_base), -2.0 * i / n_rot);
    const double angle = static_cast<double>(pos) * rope_pair_scale(scaling, i) * freq;
    cs[2 * i] = static_cast<float>(std::cos(angle)) * scaling.mscale;
    cs[2 * i + 1] = static_cast<float>(std::sin(angle)) * scaling.mscale;
  }
}

void rope_apply(float* x, int n_heads, int head_dim, int n_rot, const float* cs, RopeMode mode) {
  const int half = n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (mode == RopeMode::Neox) {
      for (int i = 0; i < half; ++i) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    }
  }
}

// ---------------------------------------------------------------- softmax, SwiGLU

void softmax_ref(float* x, int64_t n) {
  if (n <= 0) return;
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max<double>(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx) / sum);
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_mul_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_oai_ref(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = std::min(static_cast<double>(gate[i]), static_cast<double>(limit));
    const double u = std::clamp(static_cast<double>(up[i]), -static_cast<double>(limit), static_cast<double>(limit));
    out[i] = static_cast<float>(g / (1.0 + std::exp(-static_cast<double>(alpha) * g)) * (u + 1.0));
  }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

// ---------------------------------------------------------------- router

void router_topk_ref(const float* logits, int n_expert, int k, RouterMode mode, bool renorm,
                     int32_t* ids, float* weights) {
  if (k <= 0 || k > n_expert)
    throw Error("router: top-k " + std::to_string(k) + " must be in 1.." + std::to_string(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  std::iota(order.begin(), order.end(), 0);
  // Stable order: larger logit first, lower id first on ties. Softmax is
  // monotonic, so the top-k of logits is the top-k of probabilities.
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const float mx = logits[order[0]];
  if (mode == RouterMode::SoftmaxTopK) {
    double total = 0;
    for (int e = 0; e < n_expert; ++e) total += std::exp(static_cast<double>(logits[e]) - mx);
    double kept = 0;
    for (int j = 0; j < k; ++j) kept += std::exp(static_cast<double>(logits[order[j]]) - mx);
    const double denom = renorm ? kept : total;
    for (int j = 0; j < k; ++j) {
      ids[j] = order[j];
      weights[j] = static_cast<float>(std::exp(static_cast<double>(logits[order[j]]) - mx) / denom);
    }
  } else {
    double kept = 0;
    for (int j = 0; j < k; ++j) kept += std::exp(static_cast<double>(logits[order[j]]) - mx);
    for (int j = 0; j < k; ++j) {
      ids[j] = order[j];
      weights[j] = static_cast<float>(std::exp(static_cast<double>(logits[order[j]]) - mx) / kept);
    }
  }
}

// ---------------------------------------------------------------- element-wise

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// ---------------------------------------------------------------- embedding

void embed_row(DType t, const void* table, int64_t n_rows, int64_t n, int32_t id, float* out) {
  if (id < 0 || id >= n_rows)
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                std::to_string(n_rows - 1) + ")");
  const int64_t rb = row_bytes(t, n);
  dequantize_row(t, static_cast<const uint8_t*>(table) + rb * id, out, n);
}

}  // namespace ms
