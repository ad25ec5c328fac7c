// The routed-expert FFN's grouping step on its own. The FFN itself (one token
// and batches, the grouped matvec and the int8 GEMM paths, expert tables and
// base + stride, x handed over quantized or not, float and quantized
// experts, residual) is checked against the scalar reference by
// tests/backend_ops (op expert_ffn_gpu_q8, implementations cuda,
// cuda_table_x_q8, cuda_gemm_from_2).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "cuda/expert_ffn.h"
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

}  // namespace
}  // namespace ms::cuda::test
