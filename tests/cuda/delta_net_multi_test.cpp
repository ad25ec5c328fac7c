// Gated DeltaNet decode steps over several sequences (src/cuda/delta_net_multi.h):
// each row a single token of its own slot's state. Checked against the CPU
// references (conv1d_silu_ref, delta_rule_ref on the slot's state) and the
// single-sequence kernels (conv1d_silu, delta_rule with n = 1 on the slot:
// the same bits), over several steps in a row (the states carry), rows in
// shuffled slots with spare slots that must stay as they were, and a row with
// a slot out of range (skipped: its output row keeps its poison).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu/delta_net.h"
#include "cuda/delta_net.h"
#include "cuda/delta_net_multi.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

double max_rel(const float* got, const float* want, size_t n) {
  double mx = 0, scale = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return mx / scale;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// n rows in distinct shuffled slots of n + 2; the last row of n >= 3 gets
// slot n + 2 (out of range).
std::vector<int32_t> row_slots(int n, std::mt19937& rng) {
  std::vector<int32_t> p(n + 2);
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  p.resize(n);
  if (n >= 3) p[n - 1] = n + 2;
  return p;
}

TEST(CudaDeltaNetMulti, ConvRowsEqualSingleConvAndReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(51);
  Stream s;
  const int64_t C = 300, ld = C + 7;
  for (int taps : {2, 4, 16})
    for (int n : {1, 5, 33}) {
      const int n_slots = n + 2;
      const int64_t wstride = (taps - 1) * C + 13;  // slots not packed back to back
      const auto w = random_floats(static_cast<size_t>(C * taps), rng);
      auto win = random_floats(static_cast<size_t>(n_slots * wstride), rng);
      DeviceBuffer dw = upload(w), dmulti = upload(win), dsingle = upload(win);
      const auto slots = row_slots(n, rng);
      DeviceBuffer dslots = upload(slots);
      for (int step = 0; step < 3; ++step) {  // the windows carry from step to step
        const auto x = random_floats(static_cast<size_t>(n * ld), rng, -2.f, 2.f);
        DeviceBuffer dx = upload(x), out = poisoned(static_cast<size_t>(n * C)), out1 = poisoned(static_cast<size_t>(C));
        conv1d_silu_multi(dx.as<float>(), ld, n, C, dw.as<float>(), taps, dmulti.as<float>(), wstride, n_slots,
                          dslots.as<int32_t>(), out.as<float>(), s);
        const auto got = download<float>(out.get(), static_cast<size_t>(n * C));
        for (int t = 0; t < n; ++t) {
          const std::string what = "taps " + std::to_string(taps) + " n " + std::to_string(n) + " step " +
                                   std::to_string(step) + " row " + std::to_string(t);
          if (slots[t] >= n_slots) {
            for (int64_t c = 0; c < C; ++c) ASSERT_TRUE(std::isnan(got[t * C + c])) << what << ": written";
            continue;
          }
          float* hw = win.data() + slots[t] * wstride;
          std::vector<float> want(static_cast<size_t>(C));
          ms::conv1d_silu_ref(x.data() + t * ld, ld, 1, C, w.data(), taps, hw, want.data());
          EXPECT_LT(max_rel(got.data() + t * C, want.data(), want.size()), 1e-5) << what;
          conv1d_silu(dx.as<float>() + t * ld, ld, 1, C, dw.as<float>(), taps, dsingle.as<float>() + slots[t] * wstride,
                      out1.as<float>(), s);
          const auto one = download<float>(out1.get(), static_cast<size_t>(C));
          EXPECT_EQ(0, std::memcmp(one.data(), got.data() + t * C, C * sizeof(float))) << what << ": not conv1d_silu's bits";
        }
        // every slot's window (spares unchanged) equals the single kernel's and the reference's
        const auto wm = download<float>(dmulti.get(), win.size()), ws = download<float>(dsingle.get(), win.size());
        EXPECT_TRUE(same_bits(wm, ws)) << "windows, taps " << taps << " n " << n;
        EXPECT_LT(max_rel(wm.data(), win.data(), win.size()), 1e-6) << "windows vs reference";
      }
    }
}

const ms::DeltaNetShape kShapes[] = {{2, 4, 32, 32}, {16, 32, 128, 128}, {1, 3, 40, 8}, {2, 2, 256, 64}};

TEST(CudaDeltaNetMulti, RecurrenceRowsEqualSingleKernelAndReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(52);
  Stream s;
  for (const ms::DeltaNetShape& sh : kShapes)
    for (int n : {1, 4, 33}) {
      if (n == 33 && sh.head_k == 128) continue;  // 35 states of 2 MB: the CPU reference takes long
      const int n_slots = n + 2;
      const int64_t stride = sh.state_elems() + 5;
      auto S = random_floats(static_cast<size_t>(n_slots * stride), rng, -0.3f, 0.3f);
      DeviceBuffer dmulti = upload(S), dsingle = upload(S);
      const auto slots = row_slots(n, rng);
      DeviceBuffer dslots = upload(slots);
      const int64_t ld = sh.conv_dim() + 3, vd = sh.value_dim();
      for (int step = 0; step < 2; ++step) {
        auto qkv = random_floats(static_cast<size_t>(n * ld), rng);
        for (int t = 0; t < n; ++t) ms::delta_prepare_qk(sh, qkv.data() + t * ld, 1e-6f);
        const auto g = random_floats(static_cast<size_t>(n * sh.n_v_heads), rng, -3.f, 0.f);
        const auto beta = random_floats(g.size(), rng, 0.f, 1.f);
        DeviceBuffer dq = upload(qkv), dg = upload(g), db = upload(beta);
        DeviceBuffer out = poisoned(static_cast<size_t>(n * vd)), out1 = poisoned(static_cast<size_t>(vd));
        delta_rule_multi(dq.as<float>(), ld, dg.as<float>(), db.as<float>(), n, sh, dmulti.as<float>(), stride, n_slots,
                         dslots.as<int32_t>(), out.as<float>(), s);
        const auto got = download<float>(out.get(), static_cast<size_t>(n * vd));
        for (int t = 0; t < n; ++t) {
          const std::string what = "head_k " + std::to_string(sh.head_k) + " n " + std::to_string(n) + " step " +
                                   std::to_string(step) + " row " + std::to_string(t);
          if (slots[t] >= n_slots) {
            for (int64_t i = 0; i < vd; ++i) ASSERT_TRUE(std::isnan(got[t * vd + i])) << what << ": written";
            continue;
          }
          std::vector<float> want(static_cast<size_t>(vd));
          ms::delta_rule_ref(sh, qkv.data() + t * ld, ld, g.data() + t * sh.n_v_heads, beta.data() + t * sh.n_v_heads, 1,
                             S.data() + slots[t] * stride, want.data());
          EXPECT_LT(max_rel(got.data() + t * vd, want.data(), want.size()), 2e-5) << what;
          delta_rule(dq.as<float>() + t * ld, ld, dg.as<float>() + t * sh.n_v_heads, db.as<float>() + t * sh.n_v_heads, 1,
                     sh, dsingle.as<float>() + slots[t] * stride, out1.as<float>(), s);
          const auto one = download<float>(out1.get(), static_cast<size_t>(vd));
          EXPECT_EQ(0, std::memcmp(one.data(), got.data() + t * vd, vd * sizeof(float))) << what << ": not delta_rule's bits";
        }
        const auto sm = download<float>(dmulti.get(), S.size()), ss = download<float>(dsingle.get(), S.size());
        EXPECT_TRUE(same_bits(sm, ss)) << "states, head_k " << sh.head_k << " n " << n;
        EXPECT_LT(max_rel(sm.data(), S.data(), S.size()), 2e-5) << "states vs reference";
      }
    }
}

TEST(CudaDeltaNetMulti, BadArgumentsAreRefused) {
  MS_REQUIRE_GPU();
  Stream s;
  DeviceBuffer buf(4096);
  EXPECT_THROW(conv1d_silu_multi(buf.as<float>(), 4, 1, 4, buf.as<float>(), 17, buf.as<float>(), 64, 1,
                                 buf.as<int32_t>(), buf.as<float>(), s),
               Error);
  EXPECT_THROW(delta_rule_multi(buf.as<float>(), 4, buf.as<float>(), buf.as<float>(), 1, ms::DeltaNetShape{1, 1, 512, 4},
                                buf.as<float>(), 64, 1, buf.as<int32_t>(), buf.as<float>(), s),
               Error);
  EXPECT_THROW(delta_rule_multi(buf.as<float>(), 4, buf.as<float>(), buf.as<float>(), 1, ms::DeltaNetShape{1, 1, 32, 4},
                                buf.as<float>(), 64, 0, buf.as<int32_t>(), buf.as<float>(), s),
               Error);
}

}  // namespace
}  // namespace ms::cuda::test
