// gpt-oss's routed experts on the GPU (cuda/expert_ffn.h with biases and the
// clamped SwiGLU) against the CPU reference (cpu/expert_ffn.h:
// expert_ffn_ref, the scalar definition) combined with the router weights,
// for one token (decode) and batches below and above the GEMM threshold,
// float and quantized (MXFP4 as gpt-oss ships, Q8_0) experts; outputs
// poisoned first. Also the row-bias op (cuda/gated_ops.h: add_row_bias).
// Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cpu/expert_ffn.h"
#include "cuda/expert_ffn.h"
#include "cuda/gated_ops.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

void run_case(DType t, int n_tokens) {
  std::mt19937 rng(77 + n_tokens);
  const int n_expert = 8, k = 4;
  const int64_t d_model = 256, d_ff = 128;
  const auto gate = random_weights(t, d_ff * n_expert, d_model, rng);
  const auto up = random_weights(t, d_ff * n_expert, d_model, rng);
  const auto down = random_weights(t, d_model * n_expert, d_ff, rng);
  // Biases of the size that moves pre-activations across the clamp at 7.
  const auto bg = random_floats(static_cast<size_t>(n_expert * d_ff), rng, -8.f, 8.f);
  const auto bu = random_floats(static_cast<size_t>(n_expert * d_ff), rng, -8.f, 8.f);
  const auto bd = random_floats(static_cast<size_t>(n_expert * d_model), rng);

  DeviceBuffer dg = upload(gate), du = upload(up), dd = upload(down);
  DeviceBuffer dbg = upload(bg), dbu = upload(bu), dbd = upload(bd);
  ExpertWeights w;
  w.n_expert = n_expert;
  w.gate = {t, d_ff, d_model};
  w.up = {t, d_ff, d_model};
  w.down = {t, d_model, d_ff};
  const int64_t gs = row_bytes(t, d_model) * d_ff, ds = row_bytes(t, d_ff) * d_model;
  w.gate.base = dg.get();
  w.up.base = du.get();
  w.down.base = dd.get();
  w.gate.stride = w.up.stride = gs;
  w.down.stride = ds;
  w.gate_bias = dbg.as<float>();
  w.up_bias = dbu.as<float>();
  w.down_bias = dbd.as<float>();
  w.clamped_swiglu = true;

  // The same experts for the CPU reference.
  std::vector<const uint8_t*> pg, pu, pd;
  for (int e = 0; e < n_expert; ++e) {
    pg.push_back(gate.data() + e * gs);
    pu.push_back(up.data() + e * gs);
    pd.push_back(down.data() + e * ds);
  }
  ExpertFfnWeights cw;
  cw.n_embd = d_model;
  cw.n_ff = d_ff;
  cw.gate_type = cw.up_type = cw.down_type = t;
  cw.gate = pg;
  cw.up = pu;
  cw.down = pd;
  cw.gate_bias = bg.data();
  cw.up_bias = bu.data();
  cw.down_bias = bd.data();
  cw.clamped_swiglu = true;

  // Inputs scaled so gate/up land around the clamp.
  const auto x = random_floats(static_cast<size_t>(n_tokens * d_model), rng, -0.2f, 0.2f);
  std::vector<int32_t> ids;
  std::vector<float> wts;
  for (int tk = 0; tk < n_tokens; ++tk) {
    std::vector<int> perm(n_expert);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) {
      ids.push_back(perm[static_cast<size_t>(j)]);
      wts.push_back(0.25f + 0.1f * static_cast<float>(j));
    }
  }
  Stream s;
  DeviceBuffer dx = upload(x), dids = upload(ids), dw = upload(wts);
  DeviceBuffer out = poisoned(x.size());
  const size_t sb = expert_ffn_scratch_bytes(w, n_tokens, k);
  DeviceBuffer scratch(sb);
  poison(scratch.get(), sb);
  expert_ffn(w, dx.as<float>(), nullptr, n_tokens, k, dids.as<int32_t>(), dw.as<float>(), nullptr, out.as<float>(),
             scratch.get(), sb, s);
  const auto got = download<float>(out.get(), x.size());

  // float weights: only float reassociation; quantized: the GPU rounds x and
  // h to int8 blocks, the reference does not.
  const double tol = t == DType::F32 ? 1e-4 : 5e-2;
  std::vector<float> y(static_cast<size_t>(d_model));
  for (int tk = 0; tk < n_tokens; ++tk) {
    std::vector<double> want(static_cast<size_t>(d_model), 0.0);
    for (int j = 0; j < k; ++j) {
      expert_ffn_ref(cw, ids[static_cast<size_t>(tk * k + j)], x.data() + tk * d_model, y.data());
      for (int64_t c = 0; c < d_model; ++c) want[static_cast<size_t>(c)] += wts[static_cast<size_t>(tk * k + j)] * y[static_cast<size_t>(c)];
    }
    double num = 0, den = 0;
    for (int64_t c = 0; c < d_model; ++c) {
      const double g = got[static_cast<size_t>(tk * d_model + c)], r = want[static_cast<size_t>(c)];
      ASSERT_TRUE(std::isfinite(g)) << "token " << tk << " col " << c;
      num += (g - r) * (g - r);
      den += r * r;
    }
    EXPECT_LT(std::sqrt(num / den), tol) << type_name(t) << " n_tokens " << n_tokens << " token " << tk;
  }
}

TEST(ExpertFfnBias, ClampedSwigluWithBiasesMatchesCpuReference) {
  MS_REQUIRE_GPU();
  for (DType t : {DType::F32, DType::Q8_0, DType::MXFP4})
    for (int n : {1, 5, 40}) run_case(t, n);
}

TEST(AddRowBias, EveryRowGetsTheBiasExactly) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(5);
  for (int64_t width : {1, 37, 300}) {
    const int n = 19;
    const auto x = random_floats(static_cast<size_t>(n * width), rng), b = random_floats(static_cast<size_t>(width), rng);
    DeviceBuffer dx = upload(x), db = upload(b);
    Stream s;
    add_row_bias(dx.as<float>(), db.as<float>(), n, width, s);
    MS_CUDA_CHECK(cudaStreamSynchronize(s));
    const auto got = download<float>(dx.get(), x.size());
    for (int t = 0; t < n; ++t)
      for (int64_t c = 0; c < width; ++c)
        ASSERT_EQ(got[static_cast<size_t>(t * width + c)], x[static_cast<size_t>(t * width + c)] + b[static_cast<size_t>(c)])
            << "row " << t << " col " << c << " width " << width;
  }
}

}  // namespace
}  // namespace ms::cuda::test
