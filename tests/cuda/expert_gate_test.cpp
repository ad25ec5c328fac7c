// The gated decode step's kernels (cuda/expert_gate.h): the combine with the
// host's rows against a scalar reference; the residency check's mailbox and
// gate on a hit and on a miss; the gate's wait, opened from another stream
// and timing out when nobody opens it; the combine's gate, opened by the
// host through the mailbox (its rows copied) or by the check (nothing
// copied), ignoring a stale open word and timing out.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "cuda/device.h"
#include "cuda/expert_gate.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

TEST(ExpertGate, CombineWithHostRowsMatchesTheScalarReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (int k : {1, 3, 8, 32})
    for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{1000}, int64_t{2051}}) {
      const uint32_t mask = static_cast<uint32_t>(rng()) & (k == 32 ? 0xffffffffu : ((1u << k) - 1));
      const std::vector<float> y = random_floats(static_cast<size_t>(k * n), rng);
      const std::vector<float> hy = random_floats(static_cast<size_t>(k * n), rng);
      const std::vector<float> w = random_floats(static_cast<size_t>(k), rng, 0.f, 1.f);
      const std::vector<float> res = random_floats(static_cast<size_t>(n), rng);
      DeviceBuffer dy = upload(y), dhy = upload(hy), dw = upload(w), dres = upload(res);
      DeviceBuffer dmask = upload(std::vector<uint32_t>{mask});
      DeviceBuffer out = poisoned(static_cast<size_t>(n));
      Stream s;
      moe_combine_host_rows(dy.as<float>(), dhy.as<float>(), dmask.as<uint32_t>(), dw.as<float>(), k, n,
                            dres.as<float>(), out.as<float>(), s.get());
      MS_CUDA_CHECK(cudaStreamSynchronize(s.get()));
      const std::vector<float> got = download<float>(out.get(), static_cast<size_t>(n));
      for (int64_t c = 0; c < n; ++c) {
        double want = 0;
        for (int j = 0; j < k; ++j) want += double(w[j]) * ((mask >> j) & 1u ? hy : y)[static_cast<size_t>(j * n + c)];
        want += res[static_cast<size_t>(c)];
        ASSERT_NEAR(got[static_cast<size_t>(c)], want, 1e-5 * (1 + std::fabs(want))) << "k " << k << " n " << n << " c " << c;
      }
    }
}

struct GateRig {
  static constexpr int kExperts = 70, kK = 4;
  int64_t width;  // the FFN input's width: odd (scalar paths) or a multiple of 4 (vector paths)
  PinnedBuffer box;
  DeviceBuffer words{4 * sizeof(uint32_t), "gate words"};  // seq, two gates, host_mask
  DeviceBuffer resident;
  DeviceBuffer x;
  std::vector<float> xh;
  explicit GateRig(int64_t d = 99) : width(d), box(GateMailbox::bytes(d, kK), true) {
    std::memset(box.get(), 0, box.size());
    std::vector<uint32_t> bits(3, 0);
    for (int e : {1, 5, 33, 64, 69}) bits[static_cast<size_t>(e / 32)] |= 1u << (e % 32);
    resident = upload(bits);
    std::mt19937 rng(9);
    xh = random_floats(width, rng);
    x = upload(xh);
    const std::vector<uint32_t> w{41, 0, 0, 0xffffffffu};
    MS_CUDA_CHECK(cudaMemcpy(words.get(), w.data(), w.size() * 4, cudaMemcpyHostToDevice));
  }
  uint32_t* seq() { return words.as<uint32_t>(); }
  uint32_t* gate() { return words.as<uint32_t>() + 1; }
  uint32_t* host_mask() { return words.as<uint32_t>() + 3; }
  GateMailbox* mail() { return box.as<GateMailbox>(); }
  void check(const std::vector<int32_t>& ids, const std::vector<int32_t>& pred, const uint32_t* staged = nullptr) {
    DeviceBuffer dids = upload(ids), dpred = upload(pred);
    GateCheck c;
    c.resident = resident.as<uint32_t>();
    c.staged = staged;
    c.ids = dids.as<int32_t>();
    c.k = static_cast<int>(ids.size());
    c.n_expert = kExperts;
    c.pred = dpred.as<int32_t>();
    c.n_pred = static_cast<int>(pred.size());
    c.x = x.as<float>();
    c.d = width;
    c.seq = seq();
    c.gate = gate();
    c.host_mask = host_mask();
    c.box = static_cast<GateMailbox*>(box.device_ptr());
    Stream s;
    gate_check(c, s.get());
    MS_CUDA_CHECK(cudaStreamSynchronize(s.get()));
  }
};

TEST(ExpertGate, CheckOpensTheGateWhenEveryExpertIsResident) {
  MS_REQUIRE_GPU();
  GateRig r;
  r.check({5, 69, 1, 33}, {2, 3, 4, 5});
  const GateMailbox& m = *r.mail();
  EXPECT_EQ(m.seq, 41u);
  EXPECT_EQ(m.hit, 1u);
  EXPECT_EQ(std::vector<int32_t>(m.ids, m.ids + 4), (std::vector<int32_t>{5, 69, 1, 33}));
  EXPECT_EQ(std::vector<int32_t>(m.pred, m.pred + 4), (std::vector<int32_t>{2, 3, 4, 5}));
  const std::vector<uint32_t> w = download<uint32_t>(r.words.get(), 4);
  EXPECT_EQ(w[1], 41u) << "the experts' gate opens on a hit";
  EXPECT_EQ(w[2], 41u) << "the combine's gate opens on a hit";
  EXPECT_EQ(w[3], 0u) << "the host rows' mask is cleared";
}

TEST(ExpertGate, CheckLeavesTheGateShutAndPostsTheInputOnAMiss) {
  MS_REQUIRE_GPU();
  for (const std::vector<int32_t>& ids : {std::vector<int32_t>{5, 69, 2, 33}, std::vector<int32_t>{5, 70, 1, 33},
                                          std::vector<int32_t>{-1, 5, 1, 33}}) {
    GateRig r;
    r.check(ids, {});
    const GateMailbox& m = *r.mail();
    EXPECT_EQ(m.seq, 41u);
    EXPECT_EQ(m.hit, 0u) << "an expert out of range or not resident is a miss";
    EXPECT_EQ(std::vector<int32_t>(m.ids, m.ids + 4), ids);
    const float* x = GateMailbox::x_of(r.mail());
    for (int64_t i = 0; i < r.width; ++i) ASSERT_EQ(x[i], r.xh[static_cast<size_t>(i)]) << i;
    const std::vector<uint32_t> w = download<uint32_t>(r.words.get(), 4);
    EXPECT_EQ(w[1], 0u) << "the gates stay shut on a miss";
    EXPECT_EQ(w[2], 0u);
    EXPECT_EQ(w[3], 0u);
  }
}

// Staging stamps: an expert whose stamp is this step's (41) counts as
// present; a stamp of another step does not. A step with every expert
// resident or staged opens both gates and says "staged" (2) in the mailbox.
TEST(ExpertGate, CheckTakesExpertsStagedThisStepAsPresent) {
  MS_REQUIRE_GPU();
  std::vector<uint32_t> stamps(static_cast<size_t>(GateRig::kExperts), 40);
  stamps[2] = 41;
  stamps[68] = 41;
  stamps[3] = 42;
  DeviceBuffer staged = upload(stamps);
  {
    GateRig r;
    r.check({5, 2, 68, 33}, {}, staged.as<uint32_t>());
    EXPECT_EQ(r.mail()->hit, 2u);
    const std::vector<uint32_t> w = download<uint32_t>(r.words.get(), 4);
    EXPECT_EQ(w[1], 41u);
    EXPECT_EQ(w[2], 41u);
  }
  {
    GateRig r;
    r.check({5, 69, 1, 33}, {}, staged.as<uint32_t>());
    EXPECT_EQ(r.mail()->hit, 1u) << "every expert resident: no staging used";
  }
  for (const std::vector<int32_t>& ids : {std::vector<int32_t>{5, 2, 3, 33}, std::vector<int32_t>{5, 2, 4, 33}}) {
    GateRig r;
    r.check(ids, {}, staged.as<uint32_t>());
    EXPECT_EQ(r.mail()->hit, 0u) << "a stamp of another step, or none, is a miss";
    EXPECT_EQ(download<uint32_t>(r.words.get(), 4)[1], 0u);
  }
}

TEST(ExpertGate, WaitPassesOnceAnotherStreamOpensTheGate) {
  MS_REQUIRE_GPU();
  GateRig r;
  PinnedBuffer flag(sizeof(uint32_t), true), src(sizeof(uint32_t));
  *flag.as<uint32_t>() = 0;
  *src.as<uint32_t>() = 41;
  Stream compute, copy;
  gate_wait(r.seq(), r.gate(), static_cast<uint32_t*>(flag.device_ptr()), 20000, compute.get());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaStreamQuery(compute.get()), cudaErrorNotReady) << "the gate is shut: the kernel waits";
  MS_CUDA_CHECK(cudaMemcpyAsync(r.gate(), src.get(), sizeof(uint32_t), cudaMemcpyHostToDevice, copy.get()));
  MS_CUDA_CHECK(cudaStreamSynchronize(compute.get()));
  EXPECT_EQ(*flag.as<uint32_t>(), 0u);
}

TEST(ExpertGate, WaitGivesUpAfterItsTimeout) {
  MS_REQUIRE_GPU();
  GateRig r;
  PinnedBuffer flag(sizeof(uint32_t), true);
  *flag.as<uint32_t>() = 0;
  Stream compute;
  gate_wait(r.seq(), r.gate(), static_cast<uint32_t*>(flag.device_ptr()), 50, compute.get());
  MS_CUDA_CHECK(cudaStreamSynchronize(compute.get()));
  EXPECT_EQ(*flag.as<uint32_t>(), 1u);
}

struct RowsRig : GateRig {
  DeviceBuffer y;
  PinnedBuffer flag{sizeof(uint32_t), true};
  Stream compute;
  explicit RowsRig(int64_t d = 99) : GateRig(d), y(poisoned(static_cast<size_t>(kK * d))) { *flag.as<uint32_t>() = 0; }
  uint32_t* combine_gate() { return words.as<uint32_t>() + 2; }
  void launch(uint32_t timeout_ms) {
    GateRows g;
    g.seq = seq();
    g.gate = combine_gate();
    g.box = static_cast<const GateMailbox*>(box.device_ptr());
    g.k = kK;
    g.d = width;
    g.y = y.as<float>();
    g.mask = host_mask();
    g.timed_out = static_cast<uint32_t*>(flag.device_ptr());
    g.timeout_ms = timeout_ms;
    gate_wait_rows(g, compute.get());
  }
  std::vector<float> rows() { return download<float>(y.get(), static_cast<size_t>(kK * width)); }
  uint32_t mask_word() { return download<uint32_t>(words.get(), 4)[3]; }
};

TEST(ExpertGate, CombineGateCopiesTheRowsTheHostPublishes) {
  MS_REQUIRE_GPU();
  for (int64_t d : {int64_t{99}, int64_t{2048}, int64_t{4100}})
    for (uint32_t mask : {0b1010u, 0b1111u, 0b0001u, 0u}) {
      RowsRig r(d);
      const std::vector<float> before = r.rows();
      r.mail()->open = 40;  // the previous step's: must not let this one pass
      r.launch(20000);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_EQ(cudaStreamQuery(r.compute.get()), cudaErrorNotReady) << "no rows yet: the kernel waits";
      std::mt19937 rng(4);
      const std::vector<float> hy = random_floats(static_cast<size_t>(GateRig::kK * d), rng);
      std::memcpy(GateMailbox::y_of(r.mail(), d), hy.data(), hy.size() * sizeof(float));
      open_host_rows(r.mail(), mask, 41);
      MS_CUDA_CHECK(cudaStreamSynchronize(r.compute.get()));
      EXPECT_EQ(*r.flag.as<uint32_t>(), 0u);
      EXPECT_EQ(r.mask_word(), mask);
      const std::vector<float> got = r.rows();
      for (int j = 0; j < GateRig::kK; ++j)
        for (int64_t i = 0; i < d; ++i) {
          const size_t at = static_cast<size_t>(j * d + i);
          const float want = (mask >> j) & 1u ? hy[at] : before[at];
          ASSERT_EQ(std::memcmp(&got[at], &want, sizeof(float)), 0) << "d " << d << " mask " << mask << " row " << j
                                                                      << " col " << i;
        }
    }
}

TEST(ExpertGate, CombineGateOpenedByTheCheckCopiesNothing) {
  MS_REQUIRE_GPU();
  RowsRig r;
  const std::vector<float> before = r.rows();
  r.check({5, 69, 1, 33}, {});  // a hit: opens both gates, clears the mask
  r.mail()->mask = 0xf;         // stale host words the gate must ignore
  r.mail()->open = 41;
  MS_CUDA_CHECK(cudaMemset(r.host_mask(), 0, sizeof(uint32_t)));
  r.launch(20000);
  MS_CUDA_CHECK(cudaStreamSynchronize(r.compute.get()));
  EXPECT_EQ(*r.flag.as<uint32_t>(), 0u);
  EXPECT_EQ(r.mask_word(), 0u);
  const std::vector<float> got = r.rows();
  EXPECT_EQ(std::memcmp(got.data(), before.data(), got.size() * sizeof(float)), 0);
}

TEST(ExpertGate, CombineGateGivesUpAfterItsTimeout) {
  MS_REQUIRE_GPU();
  RowsRig r;
  const std::vector<float> before = r.rows();
  r.mail()->open = 40;
  r.launch(50);
  MS_CUDA_CHECK(cudaStreamSynchronize(r.compute.get()));
  EXPECT_EQ(*r.flag.as<uint32_t>(), 1u);
  const std::vector<float> got = r.rows();
  EXPECT_EQ(std::memcmp(got.data(), before.data(), got.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace ms::cuda::test
