// The tiered step's expert-bias ops (cuda/expert_bias.h) against a scalar CPU
// reference (the biases added by hand, cpu/ops.h's swiglu_oai_ref for the
// clamped SwiGLU): rows addressed through a pair index or directly, ids out of
// range clamped, each bias present or absent, both activations, odd sizes;
// rows past n_rows are poisoned and must stay untouched. Skips without a
// device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu/ops.h"
#include "cuda/expert_bias.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

constexpr int kExperts = 5;
constexpr int kGuardRows = 2;  // poisoned rows after the n_rows the op is given

struct Setup {
  int n_rows = 0, n_pairs = 0;
  int64_t d_ff = 0, d_model = 0;
  std::vector<int32_t> ids, pair_of_row;  // pair_of_row empty: row r is pair r
  std::vector<float> bg, bu, bd;

  int expert_of(int r) const {
    const int p = pair_of_row.empty() ? r : pair_of_row[static_cast<size_t>(r)];
    return std::clamp(ids[static_cast<size_t>(p)], 0, kExperts - 1);
  }
};

Setup make_setup(int n_rows, int64_t d_ff, int64_t d_model, bool through_pairs, std::mt19937& rng) {
  Setup s;
  s.n_rows = n_rows;
  s.n_pairs = n_rows + 13;
  s.d_ff = d_ff;
  s.d_model = d_model;
  for (int p = 0; p < s.n_pairs; ++p) s.ids.push_back(static_cast<int32_t>(rng() % kExperts));
  s.ids[1] = -3;            // out of range both ways: clamped as the expert kernels clamp
  s.ids[2] = kExperts + 4;
  if (through_pairs) {
    std::vector<int32_t> perm(static_cast<size_t>(s.n_pairs));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    s.pair_of_row.assign(perm.begin(), perm.begin() + n_rows);
    // the clamped ids must be read through the index too
    s.pair_of_row[0] = 1;
    s.pair_of_row[static_cast<size_t>(n_rows) - 1] = 2;
  }
  // Biases that move pre-activations across the clamp at 7.
  s.bg = random_floats(static_cast<size_t>(kExperts * d_ff), rng, -8.f, 8.f);
  s.bu = random_floats(static_cast<size_t>(kExperts * d_ff), rng, -8.f, 8.f);
  s.bd = random_floats(static_cast<size_t>(kExperts * d_model), rng);
  return s;
}

ExpertWeights shape(const Setup& s) {
  ExpertWeights w;
  w.n_expert = kExperts;
  w.gate = {DType::F32, s.d_ff, s.d_model};
  w.up = {DType::F32, s.d_ff, s.d_model};
  w.down = {DType::F32, s.d_model, s.d_ff};
  return w;
}

bool is_poison(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b == 0xffffffffu;
}

void check_act(int n_rows, int64_t d_ff, bool through_pairs, bool with_gate_bias, bool with_up_bias, bool clamped) {
  std::mt19937 rng(static_cast<uint32_t>(n_rows * 131 + d_ff * 7 + through_pairs * 3 + with_gate_bias * 5 +
                                         with_up_bias * 11 + clamped));
  const Setup s = make_setup(n_rows, d_ff, 24, through_pairs, rng);
  const size_t n = static_cast<size_t>(n_rows * d_ff);
  std::vector<float> gate = random_floats(n, rng, -9.f, 9.f), up = random_floats(n, rng, -9.f, 9.f);

  DeviceBuffer dids = upload(s.ids), dpairs = upload(s.pair_of_row), dbg = upload(s.bg), dbu = upload(s.bu);
  DeviceBuffer dgate(sizeof(float) * (n + kGuardRows * d_ff), "gate rows");
  poison(dgate.get(), sizeof(float) * (n + kGuardRows * d_ff));
  MS_CUDA_CHECK(cudaMemcpy(dgate.get(), gate.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
  DeviceBuffer dup = upload(up);

  ExpertWeights w = shape(s);
  ExpertBias b;
  b.gate = with_gate_bias ? dbg.as<float>() : nullptr;
  b.up = with_up_bias ? dbu.as<float>() : nullptr;
  b.clamped_swiglu = clamped;
  b.alpha = 1.702f;
  b.limit = 7.f;
  b.apply_to(w);
  const ExpertRows rows{dids.as<int32_t>(), through_pairs ? dpairs.as<int32_t>() : nullptr, n_rows};
  Stream stream;
  expert_rows_act(w, dgate.as<float>(), dup.as<float>(), rows, stream.get());
  MS_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  const auto got = download<float>(dgate.get(), n + kGuardRows * d_ff);

  std::vector<float> g(static_cast<size_t>(d_ff)), u(static_cast<size_t>(d_ff)), want(static_cast<size_t>(d_ff));
  const std::string what = "rows " + std::to_string(n_rows) + " d_ff " + std::to_string(d_ff) +
                           (through_pairs ? " via pairs" : " direct") + (with_gate_bias ? " +bg" : "") +
                           (with_up_bias ? " +bu" : "") + (clamped ? " clamped" : " silu");
  int bad = 0;
  for (int r = 0; r < n_rows; ++r) {
    const int e = s.expert_of(r);
    for (int64_t c = 0; c < d_ff; ++c) {
      const size_t i = static_cast<size_t>(r * d_ff + c);
      g[static_cast<size_t>(c)] = gate[i] + (with_gate_bias ? s.bg[static_cast<size_t>(e * d_ff + c)] : 0.f);
      u[static_cast<size_t>(c)] = up[i] + (with_up_bias ? s.bu[static_cast<size_t>(e * d_ff + c)] : 0.f);
    }
    if (clamped) {
      swiglu_oai_ref(g.data(), u.data(), want.data(), d_ff, 1.702f, 7.f);
    } else {
      for (int64_t c = 0; c < d_ff; ++c) {
        const double x = g[static_cast<size_t>(c)];
        want[static_cast<size_t>(c)] = static_cast<float>(x / (1.0 + std::exp(-x)) * u[static_cast<size_t>(c)]);
      }
    }
    for (int64_t c = 0; c < d_ff; ++c) {
      const float v = got[static_cast<size_t>(r * d_ff + c)], ref = want[static_cast<size_t>(c)];
      if (!(std::fabs(v - ref) <= 1e-5f * (1.f + std::fabs(ref))) && bad++ < 5)
        ADD_FAILURE() << what << ": row " << r << " col " << c << " got " << v << " want " << ref;
    }
  }
  EXPECT_EQ(bad, 0) << what;
  for (size_t i = n; i < got.size(); ++i) ASSERT_TRUE(is_poison(got[i])) << what << ": wrote past its rows at " << i;
}

TEST(ExpertBias, RowsActMatchesCpu) {
  MS_REQUIRE_GPU();
  for (bool pairs : {false, true})
    for (bool clamped : {true, false}) {
      check_act(37, 45, pairs, true, true, clamped);  // odd sizes
      check_act(8, 64, pairs, true, true, clamped);
    }
  check_act(19, 32, true, true, false, true);  // one bias of the two
  check_act(19, 32, true, false, true, true);
  check_act(19, 32, true, false, false, true);  // the activation alone
}

void check_down_bias(int n_rows, int64_t d_model, bool through_pairs) {
  std::mt19937 rng(static_cast<uint32_t>(n_rows * 17 + d_model + through_pairs));
  const Setup s = make_setup(n_rows, 32, d_model, through_pairs, rng);
  const size_t n = static_cast<size_t>(n_rows * d_model);
  const std::vector<float> y = random_floats(n, rng);
  DeviceBuffer dids = upload(s.ids), dpairs = upload(s.pair_of_row), dbd = upload(s.bd);
  DeviceBuffer dy(sizeof(float) * (n + kGuardRows * d_model), "down rows");
  poison(dy.get(), sizeof(float) * (n + kGuardRows * d_model));
  MS_CUDA_CHECK(cudaMemcpy(dy.get(), y.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
  ExpertWeights w = shape(s);
  ExpertBias b;
  b.down = dbd.as<float>();
  b.apply_to(w);
  const ExpertRows rows{dids.as<int32_t>(), through_pairs ? dpairs.as<int32_t>() : nullptr, n_rows};
  Stream stream;
  expert_rows_down_bias(w, dy.as<float>(), rows, stream.get());
  MS_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  const auto got = download<float>(dy.get(), n + kGuardRows * d_model);
  for (int r = 0; r < n_rows; ++r) {
    const int e = s.expert_of(r);
    for (int64_t c = 0; c < d_model; ++c) {
      const size_t i = static_cast<size_t>(r * d_model + c);
      ASSERT_EQ(got[i], y[i] + s.bd[static_cast<size_t>(e * d_model + c)]) << "row " << r << " col " << c;
    }
  }
  for (size_t i = n; i < got.size(); ++i) ASSERT_TRUE(is_poison(got[i])) << "wrote past its rows at " << i;

  // No down bias: nothing changes.
  ExpertWeights plain = shape(s);
  expert_rows_down_bias(plain, dy.as<float>(), rows, stream.get());
  MS_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  EXPECT_EQ(0, std::memcmp(download<float>(dy.get(), n).data(), got.data(), n * sizeof(float)));
}

TEST(ExpertBias, RowsDownBiasMatchesCpu) {
  MS_REQUIRE_GPU();
  for (bool pairs : {false, true}) {
    check_down_bias(37, 29, pairs);
    check_down_bias(5, 256, pairs);
  }
}

TEST(ExpertBias, NoIdsIsAClearError) {
  MS_REQUIRE_GPU();
  ExpertWeights w;
  w.n_expert = 4;
  w.gate = {DType::F32, 32, 16};
  DeviceBuffer buf(4096, "rows");
  try {
    expert_rows_act(w, buf.as<float>(), buf.as<float>(), ExpertRows{nullptr, nullptr, 2}, nullptr);
    ADD_FAILURE() << "no ids was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert_rows_act"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ms::cuda::test
