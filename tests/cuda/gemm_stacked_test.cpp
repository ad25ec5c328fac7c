// matmul_stacked (one launch over stacked row blocks, each into its own
// output) against matmul of each block on its own: the same int8 kernel, so
// the results must be identical; odd block sizes that split a 128-row tile,
// poisoned outputs.
#include <gtest/gtest.h>

#include "cuda/gemm.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

TEST(CudaMatmulStacked, EqualsOneMatmulPerRowBlock) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(83);
  Stream s;
  struct C {
    DType t;
    int64_t cols;
    int n;
    std::vector<int64_t> rows;
  };
  for (const C& c : {C{DType::Q4_K, 512, 37, {256, 64, 64}}, C{DType::Q4_K, 256, 16, {100, 30, 70}},
                     C{DType::Q6_K, 256, 65, {128, 129}}, C{DType::Q8_0, 96, 20, {33, 1, 200}},
                     C{DType::Q4_0, 64, 17, {64}}}) {
    SCOPED_TRACE(std::string(type_name(c.t)) + " n " + std::to_string(c.n));
    int64_t total = 0;
    for (int64_t r : c.rows) total += r;
    const auto w = random_weights(c.t, total, c.cols, rng);
    const auto x = random_floats(static_cast<size_t>(c.n * c.cols), rng);
    DeviceBuffer dw = upload(w), dx = upload(x), q8b(q8act_bytes(c.cols, c.n));
    const Q8Act q8 = q8act_view(q8b.get(), c.cols, c.n);
    std::vector<DeviceBuffer> want, got;
    for (int64_t r : c.rows) {
      want.push_back(poisoned(c.n * r));
      got.push_back(poisoned(c.n * r));
    }
    MS_CUDA_CHECK(cudaDeviceSynchronize());  // uploads and poison fills ran on the legacy stream
    quantize_q8act(dx.as<float>(), c.cols, c.n, q8, s);
    MatvecInput in;
    in.f32 = dx.as<float>();
    in.q8 = q8;
    MatrixSet m;
    m.type = c.t;
    m.rows = total;
    m.cols = c.cols;
    m.base = dw.get();
    int64_t first = 0;
    for (size_t i = 0; i < c.rows.size(); ++i) {
      MatrixSet part = m;
      part.rows = c.rows[i];
      part.base = static_cast<const uint8_t*>(dw.get()) + first * row_bytes(c.t, c.cols);
      MatvecGroups g;
      g.per_group = c.n;
      matmul(part, in, g, want[i].as<float>(), c.rows[i], nullptr, s);
      first += c.rows[i];
    }
    float* outs[3] = {};
    for (size_t i = 0; i < c.rows.size(); ++i) outs[i] = got[i].as<float>();
    matmul_stacked(m, in, c.n, static_cast<int>(c.rows.size()), c.rows.data(), outs, s);
    s.synchronize();
    for (size_t i = 0; i < c.rows.size(); ++i) {
      const auto a = download<float>(want[i].get(), c.n * c.rows[i]), b = download<float>(got[i].get(), c.n * c.rows[i]);
      for (size_t j = 0; j < a.size(); ++j) ASSERT_EQ(a[j], b[j]) << "block " << i << " element " << j;
    }
  }
}

}  // namespace
}  // namespace ms::cuda::test
