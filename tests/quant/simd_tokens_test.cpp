// The multi-token row dot (vec_dot_rows_tokens and its AVX-512 Q4_K/Q5_K
// kernels) against vec_dot_ref: random weights and activations, odd row and
// token counts, rows longer than the kernel's 16-super-block chunk, more
// tokens than one pointer batch, an act_index with repeats, padded row
// strides and output strides whose gaps must stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/half.h"
#include "quant/quant.h"
#include "quant/simd_kernels.h"

namespace ms {
namespace {

struct Case {
  DType t;
  int64_t n, rows, n_tok;
};

struct Data {
  int64_t stride, act_stride;
  std::vector<uint8_t> w, acts;
  std::vector<int32_t> index;
};

Data make_data(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.f, 1.f);
  const TypeInfo& info = type_info(c.t);
  Data d;
  d.stride = row_bytes(c.t, c.n) + 32;  // padded rows
  d.w.assign(static_cast<size_t>(d.stride * c.rows), 0xCD);
  for (int64_t r = 0; r < c.rows; ++r) {
    if (c.t == DType::F32) {
      for (int64_t i = 0; i < c.n; ++i) {
        const float v = normal(rng);
        std::memcpy(d.w.data() + r * d.stride + 4 * i, &v, 4);
      }
      continue;
    }
    for (int64_t b = 0; b < c.n / info.block_size; ++b) {
      uint8_t* blk = d.w.data() + r * d.stride + b * info.type_size;
      for (int64_t k = 0; k < info.type_size; ++k) blk[k] = static_cast<uint8_t>(byte(rng));
      // Finite, moderate f16 scales where the format has them.
      auto put = [&](int off) {
        const uint16_t h = f32_to_f16(0.01f * normal(rng));
        std::memcpy(blk + off, &h, 2);
      };
      if (c.t == DType::Q4_K || c.t == DType::Q5_K) put(0), put(2);
      if (c.t == DType::Q6_K) put(208);
      if (c.t == DType::Q8_0) put(0);
    }
  }
  // Fewer distinct activation rows than tokens: act_index repeats some.
  const int64_t n_act = std::max<int64_t>(1, c.n_tok - c.n_tok / 3);
  const DType at = type_info(c.t).vec_dot_type;
  d.act_stride = row_bytes(at, c.n);
  d.acts.resize(static_cast<size_t>(d.act_stride * n_act));
  std::vector<float> x(static_cast<size_t>(c.n));
  for (int64_t a = 0; a < n_act; ++a) {
    for (auto& v : x) v = normal(rng) * (a % 3 == 1 ? 50.f : 1.f);
    quantize_row_ref(at, x.data(), d.acts.data() + a * d.act_stride, c.n);
  }
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_act - 1));
  for (int64_t i = 0; i < c.n_tok; ++i) d.index.push_back(pick(rng));
  return d;
}

// Error scale of one dot: sum |w_i a_i| after dequantization.
double abs_scale(DType t, int64_t n, const uint8_t* w, const uint8_t* a) {
  std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
  dequantize_row_ref(t, w, wf.data(), n);
  dequantize_row_ref(type_info(t).vec_dot_type, a, af.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(wf[i]) * af[i]);
  return s;
}

// Runs `call(out, out_stride)` with a poisoned output (NaN in the cells it
// must write, a sentinel in the gaps) and checks every cell.
template <class Call>
void check(const Case& c, const Data& d, const std::string& what, Call call) {
  const int64_t out_stride = c.rows + 3;
  const float sentinel = 4242.f;
  std::vector<float> out(static_cast<size_t>(out_stride * c.n_tok), sentinel);
  for (int64_t i = 0; i < c.n_tok; ++i)
    for (int64_t r = 0; r < c.rows; ++r) out[static_cast<size_t>(i * out_stride + r)] = std::numeric_limits<float>::quiet_NaN();
  call(out.data(), out_stride);
  for (int64_t i = 0; i < c.n_tok; ++i) {
    const uint8_t* a = d.acts.data() + d.index[static_cast<size_t>(i)] * d.act_stride;
    for (int64_t r = 0; r < c.rows; ++r) {
      const uint8_t* w = d.w.data() + r * d.stride;
      const float ref = vec_dot_ref(c.t, c.n, w, a);
      const float got = out[static_cast<size_t>(i * out_stride + r)];
      const double tol = 2e-5 * abs_scale(c.t, c.n, w, a) + 1e-30;
      ASSERT_TRUE(std::isfinite(got)) << what << " token " << i << " row " << r << " not written";
      ASSERT_NEAR(got, ref, tol) << what << " token " << i << " row " << r;
    }
    for (int64_t r = c.rows; r < out_stride; ++r)
      ASSERT_EQ(out[static_cast<size_t>(i * out_stride + r)], sentinel) << what << " wrote into the gap";
  }
}

std::string describe(const Case& c) {
  return std::string(type_name(c.t)) + " n=" + std::to_string(c.n) + " rows=" + std::to_string(c.rows) +
         " tokens=" + std::to_string(c.n_tok);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (DType t : {DType::Q4_K, DType::Q5_K})
    for (int64_t n : {256, 768, 17 * 256})  // 17 super-blocks: two unpack chunks
      for (int64_t rows : {1, 2, 3, 4, 5, 7, 9})
        for (int64_t n_tok : {1, 2, 3, 5})
          v.push_back({t, n, rows, n_tok});
  v.push_back({DType::Q4_K, 512, 6, 70});  // more tokens than one pointer batch of 64
  v.push_back({DType::Q5_K, 256, 5, 67});
  // Types without a multi-token kernel take the per-token fallback.
  v.push_back({DType::Q6_K, 512, 5, 3});
  v.push_back({DType::Q8_0, 96, 3, 4});
  v.push_back({DType::F32, 33, 2, 3});
  return v;
}

TEST(SimdTokens, DispatchedMatchesReference) {
  uint32_t seed = 7;
  for (const Case& c : cases()) {
    const Data d = make_data(c, seed++);
    check(c, d, "dispatched " + describe(c), [&](float* out, int64_t os) {
      vec_dot_rows_tokens(c.t, c.n, d.w.data(), d.stride, c.rows, d.acts.data(), d.act_stride, d.index.data(), c.n_tok,
                          out, os);
    });
  }
}

TEST(SimdTokens, Avx512KernelsMatchReference) {
  if (!simd::cpu_supports_avx512()) GTEST_SKIP() << "this CPU lacks AVX-512 VNNI";
  uint32_t seed = 1000;
  for (const Case& c : cases()) {
    const simd::VecDotTokensFn fn = simd::vec_dot_tokens_kernel_avx512(c.t);
    if (!fn) continue;
    const Data d = make_data(c, seed++);
    check(c, d, "avx512 " + describe(c), [&](float* out, int64_t os) {
      std::vector<const void*> a;
      std::vector<float*> o;
      for (int64_t i = 0; i < c.n_tok; ++i) {
        a.push_back(d.acts.data() + d.index[static_cast<size_t>(i)] * d.act_stride);
        o.push_back(out + i * os);
      }
      fn(c.n, d.w.data(), d.stride, c.rows, a.data(), c.n_tok, o.data());
    });
  }
}

// Bit for bit what the single-token path gives each token: the engine's
// batched prefill must equal token-by-token decode exactly.
TEST(SimdTokens, EqualsSingleTokenPathExactly) {
  uint32_t seed = 500;
  for (const Case& c : cases()) {
    const Data d = make_data(c, seed++);
    std::vector<float> got(static_cast<size_t>(c.rows * c.n_tok)), one(static_cast<size_t>(c.rows));
    vec_dot_rows_tokens(c.t, c.n, d.w.data(), d.stride, c.rows, d.acts.data(), d.act_stride, d.index.data(), c.n_tok,
                        got.data(), c.rows);
    for (int64_t i = 0; i < c.n_tok; ++i) {
      vec_dot_rows(c.t, c.n, d.w.data(), d.stride, c.rows, d.acts.data() + d.index[static_cast<size_t>(i)] * d.act_stride,
                   one.data());
      for (int64_t r = 0; r < c.rows; ++r)
        ASSERT_EQ(got[static_cast<size_t>(i * c.rows + r)], one[static_cast<size_t>(r)])
            << describe(c) << " token " << i << " row " << r;
    }
  }
}

// Identity act_index (null) and one token (the decode path) go through too.
TEST(SimdTokens, NullIndexAndSingleToken) {
  for (int64_t n_tok : {1, 4}) {
    const Case c{DType::Q4_K, 512, 5, n_tok};
    Data d = make_data(c, 77);
    for (int64_t i = 0; i < n_tok; ++i) d.index[static_cast<size_t>(i)] = static_cast<int32_t>(std::min<int64_t>(i, d.acts.size() / d.act_stride - 1));
    // With a null index, token i reads activation row i: make them exist.
    d.acts.resize(static_cast<size_t>(d.act_stride * n_tok));
    std::vector<float> x(512, 0.5f);
    for (int64_t i = 0; i < n_tok; ++i) {
      x[static_cast<size_t>(i)] = -3.f;
      quantize_row_ref(DType::Q8_K, x.data(), d.acts.data() + i * d.act_stride, 512);
      d.index[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    }
    check(c, d, "null index " + describe(c), [&](float* out, int64_t os) {
      vec_dot_rows_tokens(c.t, c.n, d.w.data(), d.stride, c.rows, d.acts.data(), d.act_stride, nullptr, c.n_tok, out, os);
    });
  }
}

}  // namespace
}  // namespace ms
