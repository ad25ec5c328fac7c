// Routed-expert FFN (device-side ids and weights) against a double-precision
// reference built from the CPU dequantizer, for one token and for batches
// (grouped by expert), and the grouping step on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "cuda/expert_ffn.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

struct Ffn {
  DType gate_t, down_t;
  int n_expert;
  int64_t d_model, d_ff;
  std::vector<uint8_t> gate, up, down;  // all experts back to back
};

Ffn make_ffn(DType gt, DType dt, int n_expert, int64_t d_model, int64_t d_ff, std::mt19937& rng) {
  Ffn f{gt, dt, n_expert, d_model, d_ff, {}, {}, {}};
  f.gate = random_weights(gt, d_ff * n_expert, d_model, rng);
  f.up = random_weights(gt, d_ff * n_expert, d_model, rng);
  f.down = random_weights(dt, d_model * n_expert, d_ff, rng);
  return f;
}

// Reference output of one token and an error bound for a GPU path that
// quantizes x and h to int8 blocks of 32 (when the formats take Q8).
void ref_token(const Ffn& f, const float* x, const int32_t* ids, const float* w, int k, const float* res,
               std::vector<double>& out, std::vector<double>& bound) {
  out.assign(f.d_model, 0.0);
  bound.assign(f.d_model, 0.0);
  for (int64_t c = 0; c < f.d_model; ++c) out[c] = res ? res[c] : 0.0;
  const bool gq = matvec_takes_q8(f.gate_t), dq = matvec_takes_q8(f.down_t);
  for (int j = 0; j < k; ++j) {
    const int e = ids[j];
    std::vector<double> h(f.d_ff), dh(f.d_ff);
    for (int64_t r = 0; r < f.d_ff; ++r) {
      const RefDot g = ref_dot(dequant_row(f.gate_t, f.gate, e * f.d_ff + r, f.d_model), x, f.d_model, gq);
      const RefDot u = ref_dot(dequant_row(f.gate_t, f.up, e * f.d_ff + r, f.d_model), x, f.d_model, gq);
      const double sg = g.value / (1 + std::exp(-g.value));
      h[r] = sg * u.value;
      dh[r] = std::fabs(u.value) * 1.1 * g.bound + std::fabs(sg) * u.bound + g.bound * u.bound;
    }
    // half quantization step of each block of h (taking the GPU's h within dh)
    std::vector<double> step(f.d_ff, 0.0);
    if (dq)
      for (int64_t b = 0; b < f.d_ff; b += 32) {
        double amax = 0;
        for (int64_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(h[i]) + dh[i]);
        for (int64_t i = b; i < b + 32; ++i) step[i] = amax / 127.0 / 2.0;
      }
    for (int64_t r = 0; r < f.d_model; ++r) {
      const auto wrow = dequant_row(f.down_t, f.down, e * f.d_model + r, f.d_ff);
      double y = 0, err = 0, abs_sum = 0;
      for (int64_t i = 0; i < f.d_ff; ++i) {
        y += wrow[i] * h[i];
        err += std::fabs(wrow[i]) * (dh[i] + step[i]);
        abs_sum += std::fabs(wrow[i] * h[i]);
      }
      out[r] += w[j] * y;
      bound[r] += std::fabs(w[j]) * (err * 1.01 + 3e-4 * abs_sum) + 1e-6;
    }
  }
}

void run_case(DType gt, DType dt, int n_tokens, bool use_table, bool pass_q8) {
  std::mt19937 rng(31 + n_tokens);
  const int n_expert = 8, k = 4;
  const int64_t d_model = 512, d_ff = 256;
  const Ffn f = make_ffn(gt, dt, n_expert, d_model, d_ff, rng);
  DeviceBuffer dg = upload(f.gate), du = upload(f.up), dd = upload(f.down);
  ExpertWeights w;
  w.n_expert = n_expert;
  w.gate = {gt, d_ff, d_model};
  w.up = {gt, d_ff, d_model};
  w.down = {dt, d_model, d_ff};
  const int64_t gs = row_bytes(gt, d_model) * d_ff, ds = row_bytes(dt, d_ff) * d_model;
  std::vector<const void*> tg, tu, td;
  for (int e = 0; e < n_expert; ++e) {
    tg.push_back(dg.as<uint8_t>() + e * gs);
    tu.push_back(du.as<uint8_t>() + e * gs);
    td.push_back(dd.as<uint8_t>() + e * ds);
  }
  DeviceBuffer dtg = upload(tg), dtu = upload(tu), dtd = upload(td);
  if (use_table) {
    w.gate.table = dtg.as<const void* const>();
    w.up.table = dtu.as<const void* const>();
    w.down.table = dtd.as<const void* const>();
  } else {
    w.gate.base = dg.get();
    w.up.base = du.get();
    w.down.base = dd.get();
    w.gate.stride = w.up.stride = gs;
    w.down.stride = ds;
  }

  const auto x = random_floats(static_cast<size_t>(n_tokens * d_model), rng);
  const auto res = random_floats(static_cast<size_t>(n_tokens * d_model), rng);
  std::vector<int32_t> ids;
  std::vector<float> wts;
  std::uniform_real_distribution<float> uw(0.05f, 1.f);
  for (int t = 0; t < n_tokens; ++t) {
    std::vector<int> perm(n_expert);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) {
      ids.push_back(perm[j]);
      wts.push_back(uw(rng));
    }
  }
  Stream s;
  DeviceBuffer dx = upload(x), dres = upload(res), dids = upload(ids), dw = upload(wts);
  DeviceBuffer out = poisoned(x.size());
  DeviceBuffer q8buf;
  Q8Act q8;
  if (pass_q8) {
    q8buf = DeviceBuffer(q8act_bytes(d_model, n_tokens));
    q8 = q8act_view(q8buf.get(), d_model, n_tokens);
    quantize_q8act(dx.as<float>(), d_model, n_tokens, q8, s);
  }
  const size_t sb = expert_ffn_scratch_bytes(w, n_tokens, k);
  DeviceBuffer scratch(sb);
  poison(scratch.get(), sb);
  expert_ffn(w, dx.as<float>(), pass_q8 ? &q8 : nullptr, n_tokens, k, dids.as<int32_t>(), dw.as<float>(),
             dres.as<float>(), out.as<float>(), scratch.get(), sb, s);
  const auto got = download<float>(out.get(), x.size());
  int bad = 0;
  for (int t = 0; t < n_tokens; ++t) {
    std::vector<double> want, bound;
    ref_token(f, x.data() + t * d_model, ids.data() + t * k, wts.data() + t * k, k, res.data() + t * d_model, want,
              bound);
    for (int64_t c = 0; c < d_model; ++c) {
      const float g = got[t * d_model + c];
      if (!(std::fabs(g - want[c]) <= bound[c]))
        if (++bad <= 5)
          ADD_FAILURE() << type_name(gt) << "/" << type_name(dt) << " tokens " << n_tokens << ": token " << t
                        << " [" << c << "] got " << g << " want " << want[c] << " bound " << bound[c];
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(CudaExpertFfn, OneTokenQ4KGateUpQ6KDown) {
  MS_REQUIRE_GPU();
  run_case(DType::Q4_K, DType::Q6_K, 1, true, true);
  run_case(DType::Q4_K, DType::Q6_K, 1, false, false);
}

TEST(CudaExpertFfn, BatchesGroupedByExpert) {
  MS_REQUIRE_GPU();
  for (int n : {2, 5, 13}) run_case(DType::Q4_K, DType::Q4_K, n, true, false);
  run_case(DType::Q5_K, DType::Q8_0, 6, false, true);
}

// The int8 tensor-core GEMM path (batches from expert_ffn_gemm_min_tokens()):
// forced on for small batches too, restored afterwards.
TEST(CudaExpertFfn, BatchesThroughInt8Gemm) {
  MS_REQUIRE_GPU();
  if (device_info(0).cc_major < 8) GTEST_SKIP() << "int8 mma needs sm_80+";
  const int saved = expert_ffn_gemm_min_tokens();
  expert_ffn_set_gemm_min_tokens(2);
  run_case(DType::Q4_K, DType::Q4_K, 2, true, false);
  run_case(DType::Q4_K, DType::Q6_K, 17, false, true);
  run_case(DType::Q5_K, DType::Q8_0, 40, true, true);
  run_case(DType::Q6_K, DType::Q4_0, 9, false, false);
  run_case(DType::Q8_0, DType::F16, 5, true, false);  // down falls back to the matvec
  run_case(DType::Q4_K, DType::Q5_K, 100, false, true);  // 50 pairs per expert: 64-vector tiles
  expert_ffn_set_gemm_min_tokens(saved);
}

TEST(CudaExpertFfn, FloatExperts) {
  MS_REQUIRE_GPU();
  run_case(DType::BF16, DType::BF16, 1, true, false);
  run_case(DType::F16, DType::Q4_0, 3, false, false);
}

TEST(CudaExpertFfn, GroupByExpertCoversEveryPairOnce) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(41);
  Stream s;
  for (auto [n_pairs, n_expert] : {std::pair{1, 1}, std::pair{8, 128}, std::pair{4096, 128}, std::pair{777, 4096},
                                   std::pair{3000, 3}}) {
    std::uniform_int_distribution<int> ue(0, n_expert - 1);
    std::vector<int32_t> ids(n_pairs);
    for (auto& i : ids) i = ue(rng) % std::max(1, n_expert / 2) * 2 % n_expert;  // leave some experts empty
    DeviceBuffer dids = upload(ids), ng(4), ge(4 * n_pairs), off(4 * (n_pairs + 1)), list(4 * n_pairs);
    poison(ge.get(), ge.size());
    poison(off.get(), off.size());
    poison(list.get(), list.size());
    moe_group_by_expert(dids.as<int32_t>(), n_pairs, n_expert, ng.as<int32_t>(), ge.as<int32_t>(),
                        off.as<int32_t>(), list.as<int32_t>(), s);
    const int n_groups = download<int32_t>(ng.get(), 1)[0];
    const auto g_e = download<int32_t>(ge.get(), n_pairs);
    const auto g_off = download<int32_t>(off.get(), n_pairs + 1);
    const auto g_list = download<int32_t>(list.get(), n_pairs);
    const std::set<int32_t> distinct(ids.begin(), ids.end());
    ASSERT_EQ(n_groups, static_cast<int>(distinct.size()));
    ASSERT_EQ(g_off[0], 0);
    ASSERT_EQ(g_off[n_groups], n_pairs);
    std::vector<int> seen(n_pairs, 0);
    for (int g = 0; g < n_groups; ++g) {
      if (g > 0) EXPECT_LT(g_e[g - 1], g_e[g]);
      ASSERT_LT(g_off[g], g_off[g + 1]);
      for (int i = g_off[g]; i < g_off[g + 1]; ++i) {
        ASSERT_GE(g_list[i], 0);
        ASSERT_LT(g_list[i], n_pairs);
        EXPECT_EQ(ids[g_list[i]], g_e[g]);
        ++seen[g_list[i]];
      }
    }
    for (int p = 0; p < n_pairs; ++p) ASSERT_EQ(seen[p], 1) << "pair " << p;
  }
}

}  // namespace
}  // namespace ms::cuda::test
