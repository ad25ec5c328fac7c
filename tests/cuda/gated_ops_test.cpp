// The gated ops of hybrids (src/cuda/gated_ops.h) against plain host loops:
// splitting Wq's [q | gate] rows (with and without the stacked k|v rest), the
// attention output gate and the shared expert's row scale. Outputs start as
// NaN, so an element a kernel skips is caught.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/gated_ops.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

float sigmoid_ref(float x) { return 1.0f / (1.0f + std::exp(-x)); }

TEST(CudaGatedOps, SplitQGateMatchesPerHeadLayout) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(21);
  Stream s;
  const int n_head = 4, hd = 64;
  const int64_t qd = n_head * hd;
  for (int64_t rest : {int64_t{0}, int64_t{2 * 2 * 64}}) {
    for (int n : {1, 3}) {
      const int64_t src_w = 2 * qd + rest, dst_w = qd + rest;
      const auto src = random_floats(static_cast<size_t>(n * src_w), rng);
      std::vector<float> want_q(static_cast<size_t>(n * dst_w)), want_g(static_cast<size_t>(n * qd));
      for (int t = 0; t < n; ++t) {
        for (int h = 0; h < n_head; ++h)
          for (int j = 0; j < hd; ++j) {
            want_q[t * dst_w + h * hd + j] = src[t * src_w + h * 2 * hd + j];
            want_g[t * qd + h * hd + j] = src[t * src_w + h * 2 * hd + hd + j];
          }
        for (int64_t i = 0; i < rest; ++i) want_q[t * dst_w + qd + i] = src[t * src_w + 2 * qd + i];
      }
      DeviceBuffer dsrc = upload(src), dq = poisoned(want_q.size()), dg = poisoned(want_g.size());
      split_q_gate(dsrc.as<float>(), n, n_head, hd, rest, dq.as<float>(), dg.as<float>(), s);
      EXPECT_EQ(download<float>(dq.get(), want_q.size()), want_q) << "q rows, rest " << rest << ", n " << n;
      EXPECT_EQ(download<float>(dg.get(), want_g.size()), want_g) << "gates, rest " << rest << ", n " << n;
    }
  }
}

TEST(CudaGatedOps, SigmoidGateAndRowScaleMatchHostLoops) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(22);
  Stream s;
  const int n = 5;
  const int64_t width = 300;
  const auto x = random_floats(static_cast<size_t>(n * width), rng, -3.f, 3.f);
  const auto g = random_floats(x.size(), rng, -6.f, 6.f);
  const auto score = random_floats(static_cast<size_t>(n), rng, -6.f, 6.f);
  std::vector<float> want_gate(x.size()), want_scale(x.size());
  for (size_t i = 0; i < x.size(); ++i) want_gate[i] = x[i] * sigmoid_ref(g[i]);
  for (int t = 0; t < n; ++t)
    for (int64_t c = 0; c < width; ++c) want_scale[t * width + c] = x[t * width + c] * sigmoid_ref(score[t]);
  DeviceBuffer dx = upload(x), dg = upload(g), dx2 = upload(x), dscore = upload(score);
  mul_sigmoid(dx.as<float>(), dg.as<float>(), static_cast<int64_t>(x.size()), s);
  scale_rows_sigmoid(dx2.as<float>(), dscore.as<float>(), n, width, s);
  const auto got_gate = download<float>(dx.get(), x.size()), got_scale = download<float>(dx2.get(), x.size());
  double worst_gate = 0, worst_scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst_gate = std::max(worst_gate, double(std::fabs(got_gate[i] - want_gate[i])));
    worst_scale = std::max(worst_scale, double(std::fabs(got_scale[i] - want_scale[i])));
  }
  EXPECT_LT(worst_gate, 1e-5) << "mul_sigmoid: worst |gpu - host|";
  EXPECT_LT(worst_scale, 1e-5) << "scale_rows_sigmoid: worst |gpu - host|";
}

}  // namespace
}  // namespace ms::cuda::test
