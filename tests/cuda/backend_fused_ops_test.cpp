// The CUDA backend's fused decode kernels (cuda/backend/decode_fused.h)
// against the separate ops of cuda/ops.h they replace (themselves tested
// against the CPU reference in ops_test), on random inputs, odd sizes and
// poisoned outputs.
#include <gtest/gtest.h>

#include "cuda/backend/decode_fused.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

TEST(CudaBackendFusedOps, RowRmsnormQ8MatchesRmsnorm) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(41);
  Stream s;
  for (int64_t n : {32, 96, 1024, 2048, 3104, 4096, 8192}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> x = random_floats(static_cast<size_t>(n), rng, -3.f, 3.f);
    const std::vector<float> w = random_floats(static_cast<size_t>(n), rng, 0.5f, 1.5f);
    DeviceBuffer dx = upload(x), dw = upload(w);
    DeviceBuffer want_out = poisoned(n), got_out = poisoned(n);
    DeviceBuffer want_q(q8act_bytes(n, 1)), got_q(q8act_bytes(n, 1));
    poison(want_q.get(), want_q.size());
    poison(got_q.get(), got_q.size());
    const Q8Act wq = q8act_view(want_q.get(), n, 1), gq = q8act_view(got_q.get(), n, 1);
    rmsnorm(dx.as<float>(), dw.as<float>(), want_out.as<float>(), 1, n, 1e-6f, s, &wq);
    rmsnorm_row_q8(dx.as<float>(), dw.as<float>(), got_out.as<float>(), n, 1e-6f, gq, s);
    s.synchronize();
    const auto a = download<float>(want_out.get(), n), b = download<float>(got_out.get(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(b[i], a[i], 1e-5f * (1.f + std::fabs(a[i]))) << i;
    const auto qa = download<int8_t>(wq.q, n), qb = download<int8_t>(gq.q, n);
    int q_off = 0;
    for (int64_t i = 0; i < n; ++i) q_off += std::abs(qa[i] - qb[i]) > 1 ? 100 : (qa[i] != qb[i]);
    EXPECT_LE(q_off, n / 256) << "quants differ beyond a rounding tie";
    const auto da = download<float>(wq.ds, n / 16), db = download<float>(gq.ds, n / 16);
    for (int64_t i = 0; i < n / 16; i += 2) ASSERT_NEAR(db[i], da[i], 1e-6f * (1.f + std::fabs(da[i]))) << i;
  }
  // In place (out aliases x), and no f32 output at all.
  const int64_t n = 256;
  const std::vector<float> x = random_floats(n, rng);
  DeviceBuffer dx = upload(x), dq(q8act_bytes(n, 1));
  const Q8Act q = q8act_view(dq.get(), n, 1);
  rmsnorm_row_q8(dx.as<float>(), nullptr, nullptr, n, 1e-6f, q, s);
  rmsnorm_row_q8(dx.as<float>(), nullptr, dx.as<float>(), n, 1e-6f, q, s);
  const auto y = download<float>(dx.get(), n);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i] * inv, 1e-5) << i;
  EXPECT_FALSE(rmsnorm_row_supported(8192 + 32));
  EXPECT_FALSE(rmsnorm_row_supported(100));
  EXPECT_THROW(rmsnorm_row_q8(dx.as<float>(), nullptr, nullptr, 100, 1e-6f, q, s), Error);
}

struct PrologueShape {
  int n_head, n_kv, hd, n_rot;
  RopeMode mode;
  bool norm;
};

TEST(CudaBackendFusedOps, QkPrologueMatchesSeparateOps) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(43);
  Stream s;
  const int64_t ctx = 37;
  for (const PrologueShape& p : {PrologueShape{32, 4, 128, 128, RopeMode::Neox, true},
                                 PrologueShape{4, 2, 64, 64, RopeMode::Normal, false},
                                 PrologueShape{6, 3, 80, 32, RopeMode::Neox, true},
                                 PrologueShape{8, 8, 256, 256, RopeMode::Normal, true}}) {
    SCOPED_TRACE("heads " + std::to_string(p.n_head) + "/" + std::to_string(p.n_kv) + " of " + std::to_string(p.hd));
    const int64_t qd = int64_t(p.n_head) * p.hd, kvd = int64_t(p.n_kv) * p.hd;
    const std::vector<float> qkv = random_floats(static_cast<size_t>(qd + 2 * kvd), rng, -2.f, 2.f);
    const std::vector<float> qn = random_floats(p.hd, rng, 0.5f, 1.5f), kn = random_floats(p.hd, rng, 0.5f, 1.5f);
    const std::vector<int32_t> pos = {29};
    DeviceBuffer a = upload(qkv), b = upload(qkv), dqn = upload(qn), dkn = upload(kn), dpos = upload(pos);
    const size_t cache = static_cast<size_t>(kvd * ctx);
    DeviceBuffer kc_a(cache * 2), vc_a(cache * 2), kc_b(cache * 2), vc_b(cache * 2);
    for (DeviceBuffer* c : {&kc_a, &vc_a, &kc_b, &vc_b}) device_fill(c->get(), 0x11, cache * 2);
    const float* qnorm = p.norm ? dqn.as<float>() : nullptr;
    const float* knorm = p.norm ? dkn.as<float>() : nullptr;
    float* qa = a.as<float>();
    // Separate ops.
    if (p.norm) {
      rmsnorm(qa, qnorm, qa, p.n_head, p.hd, 1e-6f, s);
      rmsnorm(qa + qd, knorm, qa + qd, p.n_kv, p.hd, 1e-6f, s);
    }
    rope(qa, 1, p.n_head + p.n_kv, p.hd, p.n_rot, dpos.as<int32_t>(), 1e6f, 1.f, p.mode, s);
    kv_append(qa + qd, qa + qd + kvd, 1, p.n_kv, p.hd, dpos.as<int32_t>(), kc_a.as<uint16_t>(), vc_a.as<uint16_t>(),
              ctx, s);
    // Fused.
    decode_qk_prologue(b.as<float>(), p.n_head, p.n_kv, p.hd, qnorm, knorm, 1e-6f, p.n_rot, dpos.as<int32_t>(), 1e6f,
                       1.f, p.mode, kc_b.as<uint16_t>(), vc_b.as<uint16_t>(), ctx, s);
    s.synchronize();
    const auto ra = download<float>(a.get(), qd + kvd), rb = download<float>(b.get(), qd + kvd);
    for (int64_t i = 0; i < qd + kvd; ++i) ASSERT_NEAR(rb[i], ra[i], 2e-5f * (1.f + std::fabs(ra[i]))) << i;
    for (auto [x, y] : {std::pair{&kc_a, &kc_b}, std::pair{&vc_a, &vc_b}})
      EXPECT_EQ(count_f16_mismatches(download<uint16_t>(x->get(), cache), download<uint16_t>(y->get(), cache), 1e-3f),
                0);
  }
}

// The same with an f32 cache: every cache element of the fused kernel within
// float reassociation of the separate ops', the rest left as poisoned.
TEST(CudaBackendFusedOps, QkPrologueF32CacheMatchesSeparateOps) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(44);
  Stream s;
  const int64_t ctx = 19;
  for (const PrologueShape& p : {PrologueShape{8, 2, 128, 128, RopeMode::Neox, true},
                                 PrologueShape{6, 3, 80, 32, RopeMode::Normal, false}}) {
    SCOPED_TRACE("heads " + std::to_string(p.n_head) + "/" + std::to_string(p.n_kv) + " of " + std::to_string(p.hd));
    const int64_t qd = int64_t(p.n_head) * p.hd, kvd = int64_t(p.n_kv) * p.hd;
    const std::vector<float> qkv = random_floats(static_cast<size_t>(qd + 2 * kvd), rng, -2.f, 2.f);
    const std::vector<float> qn = random_floats(p.hd, rng, 0.5f, 1.5f), kn = random_floats(p.hd, rng, 0.5f, 1.5f);
    const std::vector<int32_t> pos = {ctx - 1};
    DeviceBuffer a = upload(qkv), b = upload(qkv), dqn = upload(qn), dkn = upload(kn), dpos = upload(pos);
    const size_t cache = static_cast<size_t>(kvd * ctx);
    DeviceBuffer kc_a = poisoned(cache), vc_a = poisoned(cache), kc_b = poisoned(cache), vc_b = poisoned(cache);
    const float* qnorm = p.norm ? dqn.as<float>() : nullptr;
    const float* knorm = p.norm ? dkn.as<float>() : nullptr;
    float* qa = a.as<float>();
    if (p.norm) {
      rmsnorm(qa, qnorm, qa, p.n_head, p.hd, 1e-6f, s);
      rmsnorm(qa + qd, knorm, qa + qd, p.n_kv, p.hd, 1e-6f, s);
    }
    rope(qa, 1, p.n_head + p.n_kv, p.hd, p.n_rot, dpos.as<int32_t>(), 1e6f, 1.f, p.mode, s);
    kv_append(qa + qd, qa + qd + kvd, 1, p.n_kv, p.hd, dpos.as<int32_t>(), kc_a.as<float>(), vc_a.as<float>(), ctx, s);
    decode_qk_prologue(b.as<float>(), p.n_head, p.n_kv, p.hd, qnorm, knorm, 1e-6f, p.n_rot, dpos.as<int32_t>(), 1e6f,
                       1.f, p.mode, kc_b.as<float>(), vc_b.as<float>(), ctx, s);
    s.synchronize();
    const auto ra = download<float>(a.get(), qd + kvd), rb = download<float>(b.get(), qd + kvd);
    for (int64_t i = 0; i < qd + kvd; ++i) ASSERT_NEAR(rb[i], ra[i], 2e-5f * (1.f + std::fabs(ra[i]))) << i;
    for (auto [x, y] : {std::pair{&kc_a, &kc_b}, std::pair{&vc_a, &vc_b}}) {
      const auto ca = download<float>(x->get(), cache), cb = download<float>(y->get(), cache);
      int off = 0;
      for (size_t i = 0; i < cache; ++i) {
        const bool written = static_cast<int64_t>(i / p.hd) % ctx == ctx - 1;
        if (written ? !(std::fabs(ca[i] - cb[i]) <= 2e-5f * (1.f + std::fabs(ca[i]))) : !std::isnan(cb[i])) ++off;
      }
      EXPECT_EQ(off, 0);
    }
  }
}

struct RouterCase {
  int n_expert, k;
  int64_t n;
  RouterMode mode;
  bool renorm;
};

TEST(CudaBackendFusedOps, RouterDecodeMatchesMatvecAndTopK) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(47);
  Stream s;
  DeviceBuffer counter(4);
  device_fill(counter.get(), 0, 4);
  for (const RouterCase& r : {RouterCase{128, 8, 2048, RouterMode::SoftmaxTopK, true},
                              RouterCase{128, 8, 2048, RouterMode::SoftmaxTopK, false},
                              RouterCase{8, 2, 4096, RouterMode::TopKSoftmax, false},
                              RouterCase{60, 4, 100, RouterMode::SoftmaxTopK, true},
                              RouterCase{1024, 32, 256, RouterMode::TopKSoftmax, false}}) {
    SCOPED_TRACE("experts " + std::to_string(r.n_expert) + " k " + std::to_string(r.k));
    const std::vector<float> w = random_floats(static_cast<size_t>(r.n_expert * r.n), rng);
    DeviceBuffer dw = upload(w);
    for (int rep = 0; rep < 3; ++rep) {  // the counter must come back to zero every call
      const std::vector<float> x = random_floats(static_cast<size_t>(r.n), rng);
      DeviceBuffer dx = upload(x);
      DeviceBuffer la = poisoned(r.n_expert), lb = poisoned(r.n_expert);
      DeviceBuffer ia(4 * r.k), ib(4 * r.k), wa = poisoned(r.k), wb = poisoned(r.k);
      MatvecInput in;
      in.f32 = dx.as<float>();
      linear(DType::F32, dw.get(), r.n_expert, r.n, in, 1, la.as<float>(), nullptr, s);
      router_topk(la.as<float>(), 1, r.n_expert, r.k, r.mode, r.renorm, ia.as<int32_t>(), wa.as<float>(), s);
      router_decode_f32(dw.as<float>(), dx.as<float>(), r.n_expert, r.n, r.k, r.mode, r.renorm, lb.as<float>(),
                        ib.as<int32_t>(), wb.as<float>(), counter.as<uint32_t>(), s);
      s.synchronize();
      const auto l1 = download<float>(la.get(), r.n_expert), l2 = download<float>(lb.get(), r.n_expert);
      for (int e = 0; e < r.n_expert; ++e) ASSERT_NEAR(l2[e], l1[e], 1e-4f * (1.f + std::fabs(l1[e]))) << e;
      const auto i1 = download<int32_t>(ia.get(), r.k), i2 = download<int32_t>(ib.get(), r.k);
      const auto w1 = download<float>(wa.get(), r.k), w2 = download<float>(wb.get(), r.k);
      EXPECT_EQ(i1, i2);
      for (int j = 0; j < r.k; ++j) EXPECT_NEAR(w2[j], w1[j], 1e-5f) << j;
      EXPECT_EQ(download<uint32_t>(counter.get(), 1)[0], 0u);
    }
  }
  EXPECT_FALSE(router_decode_supported(DType::F16, 128, 2048, 8));
  EXPECT_FALSE(router_decode_supported(DType::F32, 2048, 2048, 8));
  EXPECT_FALSE(router_decode_supported(DType::F32, 128, 2046, 8));
}

}  // namespace
}  // namespace ms::cuda::test
