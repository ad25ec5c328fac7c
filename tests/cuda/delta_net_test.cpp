// The Gated DeltaNet kernels of src/cuda/delta_net.h against the CPU's scalar
// references (src/cpu/delta_net.h) on random inputs: the conv with its window
// (several calls carrying it), q/k preparation, the gates, the recurrence
// over prompts of 1, 63, 64, 65 tokens with a carried state, the gated norm.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cpu/delta_net.h"
#include "cuda/delta_net.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

double max_rel(const std::vector<float>& got, const std::vector<float>& want) {
  double mx = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return mx / scale;
}

const ms::DeltaNetShape kShapes[] = {{2, 4, 32, 32}, {16, 32, 128, 128}, {1, 3, 40, 8}};

TEST(CudaDeltaNet, ConvCarriesItsWindowLikeTheReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(3);
  Stream s;
  const int64_t C = 300;
  for (int taps : {2, 4}) {
    const auto w = random_floats(static_cast<size_t>(C * taps), rng);
    auto win = random_floats(static_cast<size_t>((taps - 1) * C), rng);
    DeviceBuffer dw = upload(w), dwin = upload(win);
    for (int n : {1, 2, 17, 1}) {  // calls in a row: the window carries over
      const auto x = random_floats(static_cast<size_t>(n * C), rng, -2.f, 2.f);
      std::vector<float> want(static_cast<size_t>(n * C));
      ms::conv1d_silu_ref(x.data(), C, n, C, w.data(), taps, win.data(), want.data());
      DeviceBuffer dx = upload(x), out = poisoned(want.size());
      conv1d_silu(dx.as<float>(), C, n, C, dw.as<float>(), taps, dwin.as<float>(), out.as<float>(), s);
      EXPECT_LT(max_rel(download<float>(out.get(), want.size()), want), 1e-5) << taps << " " << n;
      EXPECT_LT(max_rel(download<float>(dwin.get(), win.size()), win), 1e-6) << "window " << taps << " " << n;
    }
  }
}

TEST(CudaDeltaNet, PrepareGatesAndGatedNormMatchReferences) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(4);
  Stream s;
  for (const ms::DeltaNetShape& sh : kShapes) {
    const int n = 5;
    const auto qkv = random_floats(static_cast<size_t>(n * sh.conv_dim()), rng, -2.f, 2.f);
    auto want = qkv;
    for (int t = 0; t < n; ++t) {
      float* row = want.data() + t * sh.conv_dim();
      for (int h = 0; h < sh.n_k_heads; ++h) {
        ms::l2norm_scale_ref(row + h * sh.head_k, sh.head_k, 1e-6f, 1.0f / std::sqrt(float(sh.head_k)));
        ms::l2norm_scale_ref(row + sh.key_dim() + h * sh.head_k, sh.head_k, 1e-6f, 1.0f);
      }
    }
    DeviceBuffer d = upload(qkv);
    delta_prepare_qk(d.as<float>(), sh.conv_dim(), n, sh, 1e-6f, s);
    EXPECT_LT(max_rel(download<float>(d.get(), qkv.size()), want), 1e-5);

    const int nv = sh.n_v_heads;
    const auto a = random_floats(static_cast<size_t>(n * nv), rng, -4.f, 4.f), b = random_floats(a.size(), rng, -4.f, 4.f);
    const auto A = random_floats(static_cast<size_t>(nv), rng, -4.f, -0.05f), dt = random_floats(A.size(), rng);
    std::vector<float> gw(a.size()), bw(a.size());
    for (int t = 0; t < n; ++t)
      ms::delta_gates_ref(a.data() + t * nv, b.data() + t * nv, A.data(), dt.data(), nv, gw.data() + t * nv,
                          bw.data() + t * nv);
    DeviceBuffer da = upload(a), db = upload(b), dA = upload(A), ddt = upload(dt), g = poisoned(a.size()),
                 be = poisoned(a.size());
    delta_gates(da.as<float>(), db.as<float>(), dA.as<float>(), ddt.as<float>(), n, nv, g.as<float>(), be.as<float>(), s);
    EXPECT_LT(max_rel(download<float>(g.get(), a.size()), gw), 1e-5);
    EXPECT_LT(max_rel(download<float>(be.get(), a.size()), bw), 1e-5);

    const int64_t rows = int64_t{n} * nv;
    const auto x = random_floats(static_cast<size_t>(rows * sh.head_v), rng, -3.f, 3.f);
    const auto z = random_floats(x.size(), rng, -3.f, 3.f), wn = random_floats(static_cast<size_t>(sh.head_v), rng, 0.5f, 1.5f);
    std::vector<float> nw(x.size());
    for (int64_t r = 0; r < rows; ++r)
      ms::gated_rmsnorm_ref(x.data() + r * sh.head_v, z.data() + r * sh.head_v, wn.data(), nw.data() + r * sh.head_v,
                            sh.head_v, 1e-6f);
    DeviceBuffer dx = upload(x), dz = upload(z), dwn = upload(wn), o = poisoned(x.size());
    gated_rmsnorm(dx.as<float>(), dz.as<float>(), dwn.as<float>(), o.as<float>(), rows, sh.head_v, 1e-6f, s);
    EXPECT_LT(max_rel(download<float>(o.get(), x.size()), nw), 1e-5);
  }
}

TEST(CudaDeltaNet, RecurrenceMatchesReferenceAcrossChunkEdges) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(5);
  Stream s;
  for (const ms::DeltaNetShape& sh : kShapes) {
    auto S = random_floats(static_cast<size_t>(sh.state_elems()), rng, -0.3f, 0.3f);
    DeviceBuffer dS = upload(S);
    for (int n : {1, 63, 64, 65}) {  // one sequence: the state carries from call to call
      auto qkv = random_floats(static_cast<size_t>(n * sh.conv_dim()), rng, -1.f, 1.f);
      for (int t = 0; t < n; ++t) ms::delta_prepare_qk(sh, qkv.data() + t * sh.conv_dim(), 1e-6f);
      const auto g = random_floats(static_cast<size_t>(n * sh.n_v_heads), rng, -3.f, 0.f);
      const auto beta = random_floats(g.size(), rng, 0.f, 1.f);
      std::vector<float> want(static_cast<size_t>(n * sh.value_dim()));
      ms::delta_rule_ref(sh, qkv.data(), sh.conv_dim(), g.data(), beta.data(), n, S.data(), want.data());
      DeviceBuffer dq = upload(qkv), dg = upload(g), db = upload(beta), out = poisoned(want.size());
      delta_rule(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, dS.as<float>(), out.as<float>(), s);
      EXPECT_LT(max_rel(download<float>(out.get(), want.size()), want), 2e-5) << sh.head_k << " n " << n;
      EXPECT_LT(max_rel(download<float>(dS.get(), S.size()), S), 2e-5) << sh.head_k << " n " << n;
    }
  }
}

TEST(CudaDeltaNet, UnsupportedShapesAreErrors) {
  MS_REQUIRE_GPU();
  Stream s;
  EXPECT_THROW(delta_rule(nullptr, 1, nullptr, nullptr, 1, {1, 1, 512, 4}, nullptr, nullptr, s), Error);
  EXPECT_THROW(conv1d_silu(nullptr, 1, 1, 1, nullptr, 17, nullptr, nullptr, s), Error);
}

}  // namespace
}  // namespace ms::cuda::test
