// The routed-expert FFN's grouping step on its own. The FFN itself (one token
// and batches, the grouped matvec and the int8 GEMM paths, expert tables and
// base + stride, x handed over quantized or not, float and quantized
// experts, residual) is checked against the scalar reference by
// tests/backend_ops (op expert_ffn_gpu_q8, implementations cuda,
// cuda_table_x_q8, cuda_gemm_from_2). The tiered step's grouped rows
// (grouped_rows_ffn) are checked here against that all-resident step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

#include "cuda/expert_ffn.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

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

// The tiered step's rows, grouped by expert on the host and cut into waves
// of consecutive positions (as MoeStep's row chunks: each wave's offsets from
// its first row, buffers holding one wave), through grouped_rows_ffn and the
// combine, give the all-resident step's result bit for bit: the same GEMM
// sums per element, the same SwiGLU + Q8, the same weighted sum.
TEST(CudaExpertFfn, GroupedRowsEqualTheAllResidentStepBitForBit) {
  MS_REQUIRE_GPU();
  for (DType t : {DType::Q4_K, DType::Q8_0, DType::Q6_K}) {
    std::mt19937 rng(7);
    const int E = 6, K = 2, n = 157;  // n: a vector tile of 32 / 64 cut in the middle
    const int64_t D = 256, F = 96;    // F: not a tile of 128 rows
    ExpertWeights w;
    w.n_expert = E;
    std::vector<uint8_t> gate, up, down;
    for (int e = 0; e < E; ++e) {
      for (auto* m : {&gate, &up}) {
        const auto b = random_weights(t, F, D, rng);
        m->insert(m->end(), b.begin(), b.end());
      }
    }
    // down's columns are F = 96: not a multiple of 256, so a 32-block type.
    const DType td = t == DType::Q8_0 ? DType::Q8_0 : DType::Q4_0;
    for (int e = 0; e < E; ++e) {
      const auto b = random_weights(td, D, F, rng);
      down.insert(down.end(), b.begin(), b.end());
    }
    DeviceBuffer dg = upload(gate), du = upload(up), dd = upload(down);
    w.gate = {t, F, D, nullptr, 0, dg.get(), static_cast<int64_t>(gate.size() / E)};
    w.up = {t, F, D, nullptr, 0, du.get(), static_cast<int64_t>(up.size() / E)};
    w.down = {td, D, F, nullptr, 0, dd.get(), static_cast<int64_t>(down.size() / E)};
    if (!grouped_rows_ffn_supported(w)) GTEST_SKIP() << "no int8 GEMM on this device";

    std::vector<int32_t> ids(n * K);
    std::vector<float> wts(n * K);
    for (int tk = 0; tk < n; ++tk) {
      const int a = static_cast<int>(rng() % E);
      ids[tk * K] = a;
      ids[tk * K + 1] = (a + 1 + static_cast<int>(rng() % (E - 1))) % E;
      wts[tk * K] = 0.25f + 0.5f * static_cast<float>(rng() % 100) / 100.f;
      wts[tk * K + 1] = 1.f - wts[tk * K];
    }
    const std::vector<float> x = random_floats(static_cast<size_t>(n) * D, rng);
    const std::vector<float> res = random_floats(static_cast<size_t>(n) * D, rng);
    Stream s;
    DeviceBuffer dx = upload(x), dres = upload(res), dids = upload(ids), dw = upload(wts);
    DeviceBuffer xq(q8act_bytes(D, n));
    const Q8Act xq8 = q8act_view(xq.get(), D, n);
    quantize_q8act(dx.as<float>(), D, n, xq8, s);

    // All resident (the int8 GEMM path: n >= 16 tokens).
    DeviceBuffer scratch(expert_ffn_scratch_bytes(w, n, K)), ref = poisoned(static_cast<size_t>(n) * D);
    expert_ffn(w, dx.as<float>(), &xq8, n, K, dids.as<int32_t>(), dw.as<float>(), dres.as<float>(), ref.as<float>(),
               scratch.get(), scratch.size(), s);

    // Rows grouped by expert (pair order within one), in two waves: experts
    // 0..2 and 3..5, the second wave's positions from 0 again.
    std::vector<int32_t> token_of, pair_of;
    std::vector<int32_t> offsets[2], experts[2];
    int max_rows[2] = {1, 1}, wave_first[2] = {0, 0};
    for (int wv = 0; wv < 2; ++wv) {
      wave_first[wv] = static_cast<int>(token_of.size());
      for (int e = 3 * wv; e < 3 * wv + 3; ++e) {
        offsets[wv].push_back(static_cast<int32_t>(token_of.size()) - wave_first[wv]);
        experts[wv].push_back(e);
        for (int p = 0; p < n * K; ++p)
          if (ids[p] == e) {
            token_of.push_back(p / K);
            pair_of.push_back(p);
          }
        max_rows[wv] = std::max(max_rows[wv], static_cast<int>(token_of.size()) - wave_first[wv] - offsets[wv].back());
      }
      offsets[wv].push_back(static_cast<int32_t>(token_of.size()) - wave_first[wv]);
    }
    const int P = n * K;
    DeviceBuffer dtok = upload(token_of), dpair = upload(pair_of);
    DeviceBuffer dh = poisoned(static_cast<size_t>(P) * F), dhu = poisoned(static_cast<size_t>(P) * F);
    DeviceBuffer hq(q8act_bytes(F, P)), y = poisoned(static_cast<size_t>(P) * D), out = poisoned(static_cast<size_t>(n) * D);
    poison(hq.get(), hq.size());
    for (int wv = 0; wv < 2; ++wv) {
      DeviceBuffer doff = upload(offsets[wv]), dex = upload(experts[wv]);
      GroupedRows gr;
      gr.groups.max_groups = 3;
      gr.groups.per_group = max_rows[wv];
      gr.groups.n_expert = E;
      gr.groups.expert = dex.as<int32_t>();
      gr.groups.offsets = doff.as<int32_t>();
      gr.first = 0;
      gr.rows = offsets[wv].back();
      gr.x = xq8;
      gr.token_of = dtok.as<int32_t>() + wave_first[wv];
      gr.out_of = dpair.as<int32_t>() + wave_first[wv];
      gr.h = dh.as<float>();
      gr.u = dhu.as<float>();
      gr.h_q8 = q8act_view(hq.get(), F, P);
      gr.y = y.as<float>();
      grouped_rows_ffn(w, gr, s);
      s.synchronize();  // the wave's buffers are reused by the next
    }
    moe_combine(y.as<float>(), dw.as<float>(), n, K, D, dres.as<float>(), out.as<float>(), s);
    s.synchronize();
    const auto a = download<float>(ref.get(), static_cast<size_t>(n) * D);
    const auto b = download<float>(out.get(), static_cast<size_t>(n) * D);
    int differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0) << type_name(t) << ": " << differ << " of " << a.size() << " outputs differ";
    EXPECT_TRUE(std::isfinite(b[0]) && std::isfinite(b.back()));
  }
}

}  // namespace
}  // namespace ms::cuda::test
