// The fused MoE decode kernels (cuda/backend/decode_moe.h) against the
// separate ops they replace (rmsnorm + f32 matvec + router_topk; matvec_glu +
// quantize_q8act; matvec + moe_combine + rmsnorm), on random inputs of every
// quantized expert type, odd sizes and poisoned outputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>
#include <unistd.h>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/decode_moe.h"
#include "cuda/backend/prefill_fused.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "engine/loaded_model.h"
#include "engine/sampler.h"
#include "engine/synthetic_model.h"

namespace ms::cuda::test {
namespace {

// Quants of two Q8 vectors agree up to rounding ties (|diff| <= 1, rarely).
void expect_q8_close(const Q8Act& a, const Q8Act& b, int64_t n, int64_t nvec) {
  const auto qa = download<int8_t>(a.q, n * nvec), qb = download<int8_t>(b.q, n * nvec);
  int off = 0;
  for (int64_t i = 0; i < n * nvec; ++i) off += std::abs(qa[i] - qb[i]) > 1 ? 100 : (qa[i] != qb[i]);
  EXPECT_LE(off, 1 + n * nvec / 256) << "quants differ beyond rounding ties";
  const auto da = download<float>(a.ds, n * nvec / 16), db = download<float>(b.ds, n * nvec / 16);
  for (int64_t i = 0; i < n * nvec / 16; i += 2)
    ASSERT_NEAR(db[i], da[i], 1e-5f * (1.f + std::fabs(da[i]))) << "scale of block " << i / 2;
}

struct RouterNormCase {
  int n_expert, k;
  int64_t n;
  RouterMode mode;
  bool renorm, weighted;
};

TEST(CudaDecodeMoe, RouterNormMatchesRmsnormMatvecTopK) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(71);
  Stream s;
  DeviceBuffer counter(4);
  device_fill(counter.get(), 0, 4);
  for (const RouterNormCase& r : {RouterNormCase{128, 8, 2048, RouterMode::SoftmaxTopK, true, true},
                                  RouterNormCase{128, 8, 2048, RouterMode::SoftmaxTopK, false, false},
                                  RouterNormCase{8, 2, 4096, RouterMode::TopKSoftmax, false, true},
                                  RouterNormCase{60, 4, 96, RouterMode::SoftmaxTopK, true, true},
                                  RouterNormCase{16, 3, 8192, RouterMode::SoftmaxTopK, true, true},
                                  RouterNormCase{1024, 32, 544, RouterMode::TopKSoftmax, false, true}}) {
    SCOPED_TRACE("experts " + std::to_string(r.n_expert) + " k " + std::to_string(r.k) + " n " + std::to_string(r.n));
    ASSERT_TRUE(router_norm_decode_supported(DType::F32, r.n_expert, r.n, r.k));
    const std::vector<float> w = random_floats(static_cast<size_t>(r.n_expert * r.n), rng);
    const std::vector<float> nw = random_floats(static_cast<size_t>(r.n), rng, 0.5f, 1.5f);
    DeviceBuffer dw = upload(w), dnw = upload(nw);
    const float* norm_w = r.weighted ? dnw.as<float>() : nullptr;
    for (int rep = 0; rep < 3; ++rep) {  // the counter must come back to zero every call
      const std::vector<float> h = random_floats(static_cast<size_t>(r.n), rng, -3.f, 3.f);
      DeviceBuffer dh = upload(h);
      DeviceBuffer xa = poisoned(r.n), xb = poisoned(r.n), la = poisoned(r.n_expert), lb = poisoned(r.n_expert);
      DeviceBuffer qa_buf(q8act_bytes(r.n, 1)), qb_buf(q8act_bytes(r.n, 1));
      poison(qa_buf.get(), qa_buf.size());
      poison(qb_buf.get(), qb_buf.size());
      const Q8Act qa = q8act_view(qa_buf.get(), r.n, 1), qb = q8act_view(qb_buf.get(), r.n, 1);
      DeviceBuffer ia(4 * r.k), ib(4 * r.k), wa = poisoned(r.k), wb = poisoned(r.k);
      MS_CUDA_CHECK(cudaDeviceSynchronize());  // uploads and poison fills ran on the legacy stream
      // Separate ops.
      rmsnorm(dh.as<float>(), norm_w, xa.as<float>(), 1, r.n, 1e-6f, s, &qa);
      MatvecInput in;
      in.f32 = xa.as<float>();
      linear(DType::F32, dw.get(), r.n_expert, r.n, in, 1, la.as<float>(), nullptr, s);
      router_topk(la.as<float>(), 1, r.n_expert, r.k, r.mode, r.renorm, ia.as<int32_t>(), wa.as<float>(), s);
      // Fused.
      router_norm_decode(dh.as<float>(), norm_w, 1e-6f, dw.as<float>(), r.n_expert, r.n, r.k, r.mode, r.renorm,
                         xb.as<float>(), qb, lb.as<float>(), ib.as<int32_t>(), wb.as<float>(), counter.as<uint32_t>(),
                         s);
      s.synchronize();
      const auto x1 = download<float>(xa.get(), r.n), x2 = download<float>(xb.get(), r.n);
      for (int64_t i = 0; i < r.n; ++i) ASSERT_NEAR(x2[i], x1[i], 1e-5f * (1.f + std::fabs(x1[i]))) << i;
      expect_q8_close(qa, qb, r.n, 1);
      const auto l1 = download<float>(la.get(), r.n_expert), l2 = download<float>(lb.get(), r.n_expert);
      for (int e = 0; e < r.n_expert; ++e) ASSERT_NEAR(l2[e], l1[e], 1e-4f * (1.f + std::fabs(l1[e]))) << e;
      EXPECT_EQ(download<int32_t>(ia.get(), r.k), download<int32_t>(ib.get(), r.k));
      const auto w1 = download<float>(wa.get(), r.k), w2 = download<float>(wb.get(), r.k);
      for (int j = 0; j < r.k; ++j) EXPECT_NEAR(w2[j], w1[j], 1e-5f) << j;
      EXPECT_EQ(download<uint32_t>(counter.get(), 1)[0], 0u);
    }
  }
  EXPECT_FALSE(router_norm_decode_supported(DType::F16, 128, 2048, 8));
  EXPECT_FALSE(router_norm_decode_supported(DType::F32, 2048, 2048, 8));
  EXPECT_FALSE(router_norm_decode_supported(DType::F32, 128, 2050, 8));
  EXPECT_FALSE(router_norm_decode_supported(DType::F32, 128, 8192 + 32, 8));
}

struct ExpertCase {
  DType type;
  int64_t d_model, d_ff;
  int n_expert, k;
};

// n_expert experts of [rows][cols] stored back to back.
struct DevExperts {
  DeviceBuffer buf;
  MatrixSet set;
};
DevExperts make_experts(DType t, int64_t rows, int64_t cols, int n_expert, std::mt19937& rng) {
  DevExperts d;
  d.buf = upload(random_weights(t, rows * n_expert, cols, rng));
  d.set.type = t;
  d.set.rows = rows;
  d.set.cols = cols;
  d.set.base = d.buf.get();
  d.set.stride = row_bytes(t, cols) * rows;
  return d;
}

const ExpertCase kExpertCases[] = {
    {DType::Q4_K, 2048, 768, 12, 8}, {DType::Q4_K, 256, 96, 5, 3}, {DType::Q5_K, 512, 64, 4, 2},
    {DType::Q6_K, 256, 128, 6, 4},   {DType::Q8_0, 96, 64, 5, 3},  {DType::Q4_0, 160, 32, 3, 3},
    {DType::MXFP4, 64, 96, 4, 1},
};
// down's rows are d_model and its columns d_ff: whole blocks of the type.
const ExpertCase kDownCases[] = {
    {DType::Q4_K, 2048, 768, 12, 8}, {DType::Q4_K, 96, 256, 5, 3}, {DType::Q5_K, 64, 512, 4, 2},
    {DType::Q6_K, 128, 256, 6, 4},   {DType::Q8_0, 96, 64, 5, 3},  {DType::Q4_0, 160, 32, 3, 3},
    {DType::MXFP4, 64, 96, 4, 1},
};

TEST(CudaDecodeMoe, GateUpQ8MatchesMatvecGluAndQuantize) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(73);
  Stream s;
  for (const ExpertCase& c : kExpertCases) {
    SCOPED_TRACE(std::string(type_name(c.type)) + " " + std::to_string(c.d_model) + "x" + std::to_string(c.d_ff));
    ExpertWeights w;
    w.n_expert = c.n_expert;
    DevExperts g = make_experts(c.type, c.d_ff, c.d_model, c.n_expert, rng);
    DevExperts u = make_experts(c.type, c.d_ff, c.d_model, c.n_expert, rng);
    w.gate = g.set;
    w.up = u.set;
    ASSERT_TRUE(gate_up_q8_decode_supported(w));
    const std::vector<float> x = random_floats(static_cast<size_t>(c.d_model), rng, -2.f, 2.f);
    std::vector<int32_t> ids;
    for (int j = 0; j < c.k; ++j) ids.push_back((j * 5 + 1) % c.n_expert);
    ids[0] = c.n_expert + 3;  // out of range: clamped like the matvec does
    DeviceBuffer dx = upload(x), dids = upload(ids), xq_buf(q8act_bytes(c.d_model, 1));
    const Q8Act xq = q8act_view(xq_buf.get(), c.d_model, 1);
    DeviceBuffer ha = poisoned(c.k * c.d_ff), hb = poisoned(c.k * c.d_ff);
    DeviceBuffer qa_buf(q8act_bytes(c.d_ff, c.k)), qb_buf(q8act_bytes(c.d_ff, c.k));
    poison(qa_buf.get(), qa_buf.size());
    poison(qb_buf.get(), qb_buf.size());
    const Q8Act qa = q8act_view(qa_buf.get(), c.d_ff, c.k), qb = q8act_view(qb_buf.get(), c.d_ff, c.k);
    MS_CUDA_CHECK(cudaDeviceSynchronize());
    quantize_q8act(dx.as<float>(), c.d_model, 1, xq, s);
    // Separate ops, as expert_ffn does for one token.
    MatvecInput in;
    in.f32 = dx.as<float>();
    in.q8 = xq;
    MatvecGroups grp;
    grp.max_groups = c.k;
    grp.per_group = 1;
    grp.x_div = c.k;
    grp.n_expert = c.n_expert;
    grp.expert = dids.as<int32_t>();
    matvec_glu(w.gate, w.up, in, grp, ha.as<float>(), c.d_ff, s);
    quantize_q8act(ha.as<float>(), c.d_ff, c.k, qa, s);
    // Fused.
    gate_up_q8_decode(w, xq, dids.as<int32_t>(), c.k, qb, hb.as<float>(), s);
    s.synchronize();
    const auto h1 = download<float>(ha.get(), c.k * c.d_ff), h2 = download<float>(hb.get(), c.k * c.d_ff);
    for (int64_t i = 0; i < c.k * c.d_ff; ++i) ASSERT_NEAR(h2[i], h1[i], 1e-5f * (1.f + std::fabs(h1[i]))) << i;
    expect_q8_close(qa, qb, c.d_ff, c.k);
    // Without the f32 output.
    poison(qb_buf.get(), qb_buf.size());
    gate_up_q8_decode(w, xq, dids.as<int32_t>(), c.k, qb, nullptr, s);
    s.synchronize();
    expect_q8_close(qa, qb, c.d_ff, c.k);
  }
}

TEST(CudaDecodeMoe, DownCombineMatchesMatvecCombineAndNorm) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(79);
  Stream s;
  DeviceBuffer counter(4);
  device_fill(counter.get(), 0, 4);
  for (const ExpertCase& c : kDownCases) {
    SCOPED_TRACE(std::string(type_name(c.type)) + " " + std::to_string(c.d_model) + "x" + std::to_string(c.d_ff));
    ExpertWeights w;
    w.n_expert = c.n_expert;
    DevExperts d = make_experts(c.type, c.d_model, c.d_ff, c.n_expert, rng);
    w.down = d.set;
    ASSERT_TRUE(down_combine_decode_supported(w));
    const std::vector<float> hid = random_floats(static_cast<size_t>(c.k * c.d_ff), rng, -2.f, 2.f);
    const std::vector<float> res = random_floats(static_cast<size_t>(c.d_model), rng);
    const std::vector<float> nw = random_floats(static_cast<size_t>(c.d_model), rng, 0.5f, 1.5f);
    std::vector<float> wts = random_floats(static_cast<size_t>(c.k), rng, 0.f, 1.f);
    std::vector<int32_t> ids;
    for (int j = 0; j < c.k; ++j) ids.push_back((j * 3 + 2) % c.n_expert);
    DeviceBuffer dh = upload(hid), dres = upload(res), dnw = upload(nw), dw = upload(wts), dids = upload(ids);
    DeviceBuffer hq_buf(q8act_bytes(c.d_ff, c.k));
    const Q8Act hq = q8act_view(hq_buf.get(), c.d_ff, c.k);
    for (bool with_norm : {false, true}) {
      for (bool alias : {false, true}) {
        SCOPED_TRACE(std::string(with_norm ? "next norm" : "no norm") + (alias ? ", out = residual" : ""));
        DeviceBuffer ya = poisoned(c.k * c.d_model), oa = poisoned(c.d_model), ob = upload(res);
        DeviceBuffer xa = poisoned(c.d_model), xb = poisoned(c.d_model);
        DeviceBuffer qa_buf(q8act_bytes(c.d_model, 1)), qb_buf(q8act_bytes(c.d_model, 1));
        poison(qa_buf.get(), qa_buf.size());
        poison(qb_buf.get(), qb_buf.size());
        if (!alias) poison(ob.get(), ob.size());
        const Q8Act qa = q8act_view(qa_buf.get(), c.d_model, 1), qb = q8act_view(qb_buf.get(), c.d_model, 1);
        MS_CUDA_CHECK(cudaDeviceSynchronize());
        quantize_q8act(dh.as<float>(), c.d_ff, c.k, hq, s);
        // Separate ops.
        MatvecInput in;
        in.f32 = dh.as<float>();
        in.q8 = hq;
        MatvecGroups grp;
        grp.max_groups = c.k;
        grp.per_group = 1;
        grp.n_expert = c.n_expert;
        grp.expert = dids.as<int32_t>();
        matvec(w.down, in, grp, ya.as<float>(), c.d_model, nullptr, s);
        moe_combine(ya.as<float>(), dw.as<float>(), 1, c.k, c.d_model, dres.as<float>(), oa.as<float>(), s);
        if (with_norm) rmsnorm(oa.as<float>(), dnw.as<float>(), xa.as<float>(), 1, c.d_model, 1e-6f, s, &qa);
        // Fused.
        NextNorm next;
        next.w = dnw.as<float>();
        next.eps = 1e-6f;
        next.x_out = xb.as<float>();
        next.x_q8 = qb;
        next.counter = counter.as<uint32_t>();
        const float* residual = alias ? ob.as<float>() : dres.as<float>();
        down_combine_decode(w, hq, dids.as<int32_t>(), dw.as<float>(), c.k, residual, ob.as<float>(),
                            with_norm ? &next : nullptr, s);
        s.synchronize();
        const auto o1 = download<float>(oa.get(), c.d_model), o2 = download<float>(ob.get(), c.d_model);
        double scale = 0;
        for (float v : o1) scale = std::max(scale, static_cast<double>(std::fabs(v)));
        for (int64_t i = 0; i < c.d_model; ++i) ASSERT_NEAR(o2[i], o1[i], 1e-5 * (1 + scale)) << i;
        if (with_norm) {
          const auto x1 = download<float>(xa.get(), c.d_model), x2 = download<float>(xb.get(), c.d_model);
          for (int64_t i = 0; i < c.d_model; ++i) ASSERT_NEAR(x2[i], x1[i], 1e-4f * (1.f + std::fabs(x1[i]))) << i;
          expect_q8_close(qa, qb, c.d_model, 1);
        }
        EXPECT_EQ(download<uint32_t>(counter.get(), 1)[0], 0u);
      }
    }
  }
}

// The whole decode step with the three-launch MoE (Options::fused_moe_decode)
// against the default six launches: the kernels compute the same sums in the
// same order, so the logits agree to float contraction differences.
TEST(CudaDecodeMoe, BackendFusedMoeMatchesDefault) {
  MS_REQUIRE_GPU();
  ThreadPool pool(2);
  const auto path = std::filesystem::temp_directory_path() / ("ms_decode_moe_" + std::to_string(getpid()) + ".gguf");
  GenOptions o;
  o.arch = "qwen3moe";
  o.preset = "tiny";
  o.quant = "q4_k";
  o.router_skew = 0.5;
  generate_model(o, path.string(), pool);
  auto m = LoadedModel::open(path.string());
  std::filesystem::remove(path);
  CudaBackend fused(m->weights, CudaBackend::Options{.ctx = 128, .fused_moe_decode = true});
  CudaBackend plain(m->weights, CudaBackend::Options{.ctx = 128});
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(7);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % 500);
  KvCache ka = fused.make_cache(128), kb = plain.make_cache(128);
  std::vector<float> la, lb;
  fused.forward(ka, prompt, la);
  plain.forward(kb, prompt, lb);
  const int32_t V = static_cast<int32_t>(m->weights.cfg.n_vocab);
  double worst = 0;
  for (int i = 0; i < 40; ++i) {
    const int32_t next = argmax(lb.data(), V);
    fused.forward(ka, std::span<const int32_t>(&next, 1), la);
    plain.forward(kb, std::span<const int32_t>(&next, 1), lb);
    double ss = 0, mx = 0;
    for (int32_t v = 0; v < V; ++v) {
      ss += double(lb[v]) * lb[v];
      mx = std::max(mx, std::fabs(double(la[v]) - lb[v]));
    }
    worst = std::max(worst, mx / std::sqrt(ss / V));
  }
  std::printf("fused MoE vs default decode: worst rel %.2e\n", worst);
  EXPECT_LE(worst, 2e-3);
}

struct BatchPrologueShape {
  int n, n_head, n_kv, hd, n_rot;
  RopeMode mode;
  bool norm;
};

// The two caches, as the separate ops and the fused kernel left them.
template <class T>
struct PrologueCaches {
  std::vector<T> k_ops, v_ops, k_fused, v_fused;
};

// batch_qk_prologue (prefill_fused.h) against rmsnorm + rope + kv_append on
// the same random q, k, v for positions pos0.. (the last ones may fall
// outside the cache, which must skip them): q and k must agree to float
// reassociation here; the caches (poisoned first) are returned for the
// caller's check. T: the cache element (uint16_t: f16, or float).
template <class T>
PrologueCaches<T> run_both_prologues(const BatchPrologueShape& p, int64_t ctx, int pos0, std::mt19937& rng,
                                     Stream& s) {
  const int64_t qn = int64_t(p.n) * p.n_head * p.hd, kn = int64_t(p.n) * p.n_kv * p.hd;
  const auto q = random_floats(static_cast<size_t>(qn), rng, -2.f, 2.f);
  const auto k = random_floats(static_cast<size_t>(kn), rng, -2.f, 2.f);
  const auto v = random_floats(static_cast<size_t>(kn), rng, -2.f, 2.f);
  const auto qnw = random_floats(p.hd, rng, 0.5f, 1.5f), knw = random_floats(p.hd, rng, 0.5f, 1.5f);
  std::vector<int32_t> pos(static_cast<size_t>(p.n));
  for (int t = 0; t < p.n; ++t) pos[t] = pos0 + t;
  DeviceBuffer qa = upload(q), qb = upload(q), ka = upload(k), kb = upload(k), dv = upload(v);
  DeviceBuffer dqn = upload(qnw), dkn = upload(knw), dpos = upload(pos);
  const size_t cache = static_cast<size_t>(int64_t(p.n_kv) * p.hd * ctx);
  DeviceBuffer kc_a(cache * sizeof(T)), vc_a(cache * sizeof(T)), kc_b(cache * sizeof(T)), vc_b(cache * sizeof(T));
  for (DeviceBuffer* c : {&kc_a, &vc_a, &kc_b, &vc_b}) poison(c->get(), cache * sizeof(T));
  const float* qnorm = p.norm ? dqn.as<float>() : nullptr;
  const float* knorm = p.norm ? dkn.as<float>() : nullptr;
  if (p.norm) {
    rmsnorm(qa.as<float>(), qnorm, qa.as<float>(), int64_t(p.n) * p.n_head, p.hd, 1e-6f, s);
    rmsnorm(ka.as<float>(), knorm, ka.as<float>(), int64_t(p.n) * p.n_kv, p.hd, 1e-6f, s);
  }
  rope(qa.as<float>(), p.n, p.n_head, p.hd, p.n_rot, dpos.as<int32_t>(), 1e6f, 1.f, p.mode, s);
  rope(ka.as<float>(), p.n, p.n_kv, p.hd, p.n_rot, dpos.as<int32_t>(), 1e6f, 1.f, p.mode, s);
  kv_append(ka.as<float>(), dv.as<float>(), p.n, p.n_kv, p.hd, dpos.as<int32_t>(), kc_a.as<T>(), vc_a.as<T>(), ctx, s);
  batch_qk_prologue(qb.as<float>(), kb.as<float>(), dv.as<float>(), p.n, p.n_head, p.n_kv, p.hd, qnorm, knorm, 1e-6f,
                    p.n_rot, dpos.as<int32_t>(), 1e6f, 1.f, p.mode, kc_b.as<T>(), vc_b.as<T>(), ctx, s);
  s.synchronize();
  for (auto [a, b, n] : {std::tuple{&qa, &qb, qn}, std::tuple{&ka, &kb, kn}}) {
    const auto ra = download<float>(a->get(), n), rb = download<float>(b->get(), n);
    int off = 0;
    for (int64_t i = 0; i < n; ++i)
      if (!(std::fabs(rb[i] - ra[i]) <= 2e-5f * (1.f + std::fabs(ra[i]))) && ++off <= 3)
        ADD_FAILURE() << (a == &qa ? "q" : "k") << "[" << i << "]: fused " << rb[i] << ", separate ops " << ra[i];
    EXPECT_EQ(off, 0);
  }
  return {download<T>(kc_a.get(), cache), download<T>(vc_a.get(), cache), download<T>(kc_b.get(), cache),
          download<T>(vc_b.get(), cache)};
}

std::string prologue_trace(const BatchPrologueShape& p) {
  return "n " + std::to_string(p.n) + " heads " + std::to_string(p.n_head) + "/" + std::to_string(p.n_kv) + " of " +
         std::to_string(p.hd);
}

// f16 cache: each element within f16 rounding of the separate ops' (the
// poison of skipped positions and unwritten rows is the same bits in both).
TEST(CudaPrefillFused, BatchQkPrologueMatchesSeparateOps) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(89);
  Stream s;
  const int64_t ctx = 300;
  for (const BatchPrologueShape& p : {BatchPrologueShape{37, 32, 4, 128, 128, RopeMode::Neox, true},
                                      BatchPrologueShape{5, 4, 2, 64, 64, RopeMode::Normal, false},
                                      BatchPrologueShape{16, 6, 3, 80, 32, RopeMode::Neox, true},
                                      BatchPrologueShape{3, 8, 8, 256, 256, RopeMode::Normal, true}}) {
    SCOPED_TRACE(prologue_trace(p));
    const PrologueCaches<uint16_t> c = run_both_prologues<uint16_t>(p, ctx, 250, rng, s);
    EXPECT_EQ(count_f16_mismatches(c.k_ops, c.k_fused, 1e-3f), 0);
    EXPECT_EQ(count_f16_mismatches(c.v_ops, c.v_fused, 1e-3f), 0);
  }
}

// f32 cache: every element the fused kernel writes within float
// reassociation of the separate ops'; positions outside the cache and
// unwritten rows keep their poison.
TEST(CudaPrefillFused, BatchQkPrologueF32CacheMatchesSeparateOps) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(90);
  Stream s;
  const int64_t ctx = 40;
  const int pos0 = 33;
  for (const BatchPrologueShape& p : {BatchPrologueShape{9, 8, 2, 128, 128, RopeMode::Neox, true},
                                      BatchPrologueShape{4, 6, 3, 80, 32, RopeMode::Normal, false}}) {
    SCOPED_TRACE(prologue_trace(p));
    const PrologueCaches<float> c = run_both_prologues<float>(p, ctx, pos0, rng, s);
    for (auto [a, b] : {std::pair{&c.k_ops, &c.k_fused}, std::pair{&c.v_ops, &c.v_fused}}) {
      int off = 0;
      for (size_t i = 0; i < a->size(); ++i) {
        const int64_t row_pos = static_cast<int64_t>(i / p.hd) % ctx;
        const bool written = row_pos >= pos0 && row_pos < pos0 + p.n;
        const float x = (*a)[i], y = (*b)[i];
        if (written ? !(std::fabs(x - y) <= 2e-5f * (1.f + std::fabs(x))) : !std::isnan(y)) ++off;
      }
      EXPECT_EQ(off, 0);
    }
  }
}

}  // namespace
}  // namespace ms::cuda::test
