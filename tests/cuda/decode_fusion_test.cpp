// The decode step's fused down + combine launch (matvec_combine, matvec.h)
// against the separate launches it replaces (matvec over the k expert slots,
// then moe_combine), bit for bit, and against the CPU reference; expert_ffn
// of one token with and without it (ExpertWeights::fused_decode). Weight
// types of every kernel family (K-quants, sub-block formats, IQ grids, a
// float type), row widths on both sides of the kernel's 16/32-lane split,
// row counts that are not a multiple of a block's rows, 1 to 8 slots;
// outputs poisoned with NaN first.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda/expert_ffn.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

// n_expert experts of `rows` x `cols` back to back, on the device.
struct Experts {
  std::vector<std::vector<uint8_t>> host;
  DeviceBuffer dev;
  MatrixSet set;
};
Experts make_experts(DType t, int64_t rows, int64_t cols, int n_expert, std::mt19937& rng) {
  Experts e;
  const int64_t mat = row_bytes(t, cols) * rows;
  std::vector<uint8_t> all;
  for (int i = 0; i < n_expert; ++i) {
    e.host.push_back(random_weights(t, rows, cols, rng));
    all.insert(all.end(), e.host.back().begin(), e.host.back().end());
  }
  e.dev = upload(all);
  e.set.type = t;
  e.set.rows = rows;
  e.set.cols = cols;
  e.set.base = e.dev.get();
  e.set.stride = mat;
  return e;
}

int count_bit_diffs(const std::vector<float>& a, const std::vector<float>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

const DType kTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                        DType::IQ4_XS, DType::IQ3_S, DType::IQ2_XXS, DType::MXFP4, DType::F16};

// Down of k slots (slot j reads h vector j) + the weighted sum, with and
// without a residual (aliasing the output, as the decode step has it).
TEST(DecodeFusion, CombineEqualsMatvecThenMoeCombine) {
  MS_REQUIRE_GPU();
  for (DType t : kTypes)
    for (int64_t cols : {int64_t{256}, int64_t{1536}})
      for (int k : {1, 3, 8})
        for (bool residual : {false, true}) {
          SCOPED_TRACE(std::string(type_name(t)) + " cols " + std::to_string(cols) + " k " + std::to_string(k) +
                       (residual ? " residual" : ""));
          std::mt19937 rng(static_cast<uint32_t>(cols * 3 + k * 11 + residual + static_cast<int>(t) * 97));
          const int64_t rows = 100;  // not a multiple of the 4 or 8 rows of a slice
          const int n_expert = 9;
          Experts down = make_experts(t, rows, cols, n_expert, rng);
          std::vector<int32_t> ids(static_cast<size_t>(k));
          for (int j = 0; j < k; ++j) ids[j] = (j * 5 + 3) % n_expert;
          if (k == 8) ids[6] = 40;  // out of range: clamped to the last expert, as matvec does
          const auto wts = random_floats(static_cast<size_t>(k), rng, 0.f, 1.f);
          DeviceBuffer dids = upload(ids), dw = upload(wts);
          Stream s;
          const auto h = random_floats(static_cast<size_t>(cols * k), rng);
          DevInput in = make_matvec_input(t, h, cols, k, s);
          const auto res = random_floats(static_cast<size_t>(rows), rng);
          // separate: y per slot, then moe_combine into out (residual in out)
          DeviceBuffer y = poisoned(static_cast<size_t>(rows * k));
          DeviceBuffer out_sep = residual ? upload(res) : poisoned(rows);
          DeviceBuffer out_fused = residual ? upload(res) : poisoned(rows);
          MatvecGroups g;
          g.max_groups = k;
          g.per_group = 1;
          g.n_expert = n_expert;
          g.expert = dids.as<int32_t>();
          matvec(down.set, in.in, g, y.as<float>(), rows, nullptr, s);
          moe_combine(y.as<float>(), dw.as<float>(), 1, k, rows, residual ? out_sep.as<float>() : nullptr,
                      out_sep.as<float>(), s);
          matvec_combine(down.set, in.in, k, dids.as<int32_t>(), n_expert, dw.as<float>(),
                         residual ? out_fused.as<float>() : nullptr, out_fused.as<float>(), s);
          const auto a = download<float>(out_sep.get(), rows), b = download<float>(out_fused.get(), rows);
          EXPECT_EQ(count_bit_diffs(a, b), 0);
          // and the CPU reference: sum_j w_j * (W_e x_j) (+ residual)
          const bool q8 = matvec_takes_q8(t);
          int bad = 0;
          for (int64_t r = 0; r < rows; ++r) {
            double want = residual ? res[r] : 0.0, bound = 1e-5;
            for (int j = 0; j < k; ++j) {
              const int e = std::min(ids[j], n_expert - 1);
              const RefDot d = ref_dot(dequant_row(t, down.host[e], r, cols), h.data() + j * cols, cols, q8);
              want += wts[j] * d.value;
              bound += wts[j] * d.bound;
            }
            if (!(std::fabs(b[r] - want) <= bound) && ++bad <= 3)
              ADD_FAILURE() << "row " << r << " got " << b[r] << " want " << want << " (bound " << bound << ")";
          }
          EXPECT_EQ(bad, 0);
        }
}

TEST(DecodeFusion, CombineRefusesMoreSlotsThanABlockHolds) {
  MS_REQUIRE_GPU();
  EXPECT_TRUE(matvec_combine_supported(8));
  EXPECT_FALSE(matvec_combine_supported(9));
  EXPECT_FALSE(matvec_combine_supported(0));
  std::mt19937 rng(3);
  Experts down = make_experts(DType::Q4_K, 64, 256, 10, rng);
  Stream s;
  DevInput in = make_matvec_input(DType::Q4_K, random_floats(256 * 9, rng), 256, 9, s);
  DeviceBuffer ids = upload(std::vector<int32_t>(9, 1)), w = upload(std::vector<float>(9, 0.1f)), out = poisoned(64);
  try {
    matvec_combine(down.set, in.in, 9, ids.as<int32_t>(), 10, w.as<float>(), nullptr, out.as<float>(), s);
    ADD_FAILURE() << "k = 9 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k = 9"), std::string::npos) << e.what();
  }
}

// The whole one-token expert FFN, fused (default) and not: the same bits,
// for a gate/down type pair as the quantizer's mixes have them.
TEST(DecodeFusion, OneTokenExpertFfnSameBitsFusedOrNot) {
  MS_REQUIRE_GPU();
  const std::pair<DType, DType> pairs[] = {{DType::Q4_K, DType::Q6_K}, {DType::IQ4_XS, DType::Q5_K},
                                           {DType::Q2_K, DType::Q3_K}, {DType::Q3_K, DType::Q4_K},
                                           {DType::F16, DType::F16}};
  for (auto [gt, dt] : pairs)
    for (int k : {2, 8}) {
      SCOPED_TRACE(std::string(type_name(gt)) + "/" + type_name(dt) + " k " + std::to_string(k));
      std::mt19937 rng(static_cast<uint32_t>(k * 1000 + static_cast<int>(gt)));
      const int64_t d_model = 512, d_ff = 256;
      const int n_expert = 12;
      Experts gate = make_experts(gt, d_ff, d_model, n_expert, rng);
      Experts up = make_experts(gt, d_ff, d_model, n_expert, rng);
      Experts down = make_experts(dt, d_model, d_ff, n_expert, rng);
      ExpertWeights w;
      w.gate = gate.set;
      w.up = up.set;
      w.down = down.set;
      w.n_expert = n_expert;
      std::vector<int32_t> ids(static_cast<size_t>(k));
      for (int j = 0; j < k; ++j) ids[j] = (j * 7 + 2) % n_expert;
      const auto wts = random_floats(static_cast<size_t>(k), rng, 0.f, 1.f);
      DeviceBuffer dids = upload(ids), dw = upload(wts);
      const auto x = random_floats(static_cast<size_t>(d_model), rng);
      const auto res = random_floats(static_cast<size_t>(d_model), rng);
      DeviceBuffer dx = upload(x);
      const size_t sb = expert_ffn_scratch_bytes(w, 1, k);
      DeviceBuffer scratch(sb + 256);
      std::vector<float> outs[2];
      for (int fused : {0, 1}) {
        w.fused_decode = fused == 1;
        DeviceBuffer out = upload(res);  // residual aliasing the output
        poison(scratch.get(), sb);
        Stream s;
        expert_ffn(w, dx.as<float>(), nullptr, 1, k, dids.as<int32_t>(), dw.as<float>(), out.as<float>(),
                   out.as<float>(), scratch.get(), sb, s);
        MS_CUDA_CHECK(cudaStreamSynchronize(s.get()));
        outs[fused] = download<float>(out.get(), static_cast<size_t>(d_model));
      }
      EXPECT_EQ(count_bit_diffs(outs[0], outs[1]), 0);
      for (float v : outs[1]) ASSERT_TRUE(std::isfinite(v));
    }
}

}  // namespace
}  // namespace ms::cuda::test
