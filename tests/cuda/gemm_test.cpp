// Prompt-batch matmul against the double-precision reference, dense and
// grouped by expert, with odd row / vector counts and poisoned outputs. The
// every-format test allows the f16 rounding of the tensor-core fallback
// (relative to sum |w x|); float weights get their own f32-tight test.
#include <gtest/gtest.h>

#include "cuda/gemm.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

void check(const std::vector<float>& got, const std::vector<uint8_t>& w, DType t, int64_t cols,
           const std::vector<float>& x, const std::vector<int>& row_of_vec_expert, int64_t rows,
           const std::vector<float>* res, const std::string& what) {
  int bad = 0;
  const int n_vec = static_cast<int>(got.size() / rows);
  for (int p = 0; p < n_vec; ++p)
    for (int64_t r = 0; r < rows; ++r) {
      const auto wrow = dequant_row(t, w, row_of_vec_expert[p] * rows + r, cols);
      double want = res ? (*res)[p * rows + r] : 0.0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        want += double(wrow[c]) * x[p * cols + c];
        mag += std::fabs(double(wrow[c]) * x[p * cols + c]);
      }
      const float g = got[p * rows + r];
      if (!(std::fabs(g - want) <= 1.2e-3 * mag + 1e-5))
        if (++bad <= 5) ADD_FAILURE() << what << ": vector " << p << " row " << r << " got " << g << " want " << want;
    }
  EXPECT_EQ(bad, 0) << what;
}

TEST(CudaMatmul, DenseEveryFormatOddSizes) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(51);
  Stream s;
  struct C { DType t; int64_t rows, cols; int n; };
  for (C c : {C{DType::Q4_K, 70, 512, 37}, C{DType::Q4_K, 128, 2048, 130}, C{DType::Q5_K, 65, 256, 64},
              C{DType::Q6_K, 100, 768, 9}, C{DType::Q8_0, 33, 96, 65}, C{DType::Q4_0, 64, 160, 1},
              C{DType::MXFP4, 80, 64, 20}, C{DType::F16, 50, 40, 70}, C{DType::BF16, 17, 1000, 3},
              C{DType::F32, 64, 7, 5}}) {
    const auto w = random_weights(c.t, c.rows, c.cols, rng);
    const auto x = random_floats(static_cast<size_t>(c.n * c.cols), rng);
    const auto res = random_floats(static_cast<size_t>(c.n * c.rows), rng);
    DeviceBuffer dw = upload(w), dx = upload(x), dres = upload(res), y = poisoned(c.n * c.rows);
    MatrixSet m;
    m.type = c.t;
    m.rows = c.rows;
    m.cols = c.cols;
    m.base = dw.get();
    MatvecGroups g;
    g.per_group = c.n;
    MatvecInput in;
    in.f32 = dx.as<float>();
    matmul(m, in, g, y.as<float>(), c.rows, dres.as<float>(), s);
    check(download<float>(y.get(), c.n * c.rows), w, c.t, c.cols, x, std::vector<int>(c.n, 0), c.rows, &res,
          std::string("matmul ") + type_name(c.t) + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols) +
              " n " + std::to_string(c.n));
  }
}

// Float weights run in f32 (gemm_float.cu): within f32 summation error of the
// double reference, 2e-6 of sum |w x|, which the f16-rounded activations of
// the tensor-core path (~1e-4 relative per product) would exceed. Dense with
// residual (aliasing the output) and grouped by expert through a list.
TEST(CudaMatmul, FloatWeightsKeepF32Accuracy) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(53);
  Stream s;
  struct C { DType t; int64_t rows, cols; int n; };
  for (C c : {C{DType::F32, 67, 517, 70}, C{DType::F32, 64, 7, 5}, C{DType::F16, 130, 1000, 33},
              C{DType::BF16, 5, 2048, 129}, C{DType::F32, 1, 16, 1}}) {
    const auto w = random_weights(c.t, c.rows, c.cols, rng);
    const auto x = random_floats(static_cast<size_t>(c.n * c.cols), rng, -3.f, 3.f);
    const auto res = random_floats(static_cast<size_t>(c.n * c.rows), rng);
    DeviceBuffer dw = upload(w), dx = upload(x), y = upload(res);  // y holds the residual: in place
    MatrixSet m;
    m.type = c.t;
    m.rows = c.rows;
    m.cols = c.cols;
    m.base = dw.get();
    MatvecGroups g;
    g.per_group = c.n;
    MatvecInput in;
    in.f32 = dx.as<float>();
    matmul(m, in, g, y.as<float>(), c.rows, y.as<float>(), s);
    const auto got = download<float>(y.get(), c.n * c.rows);
    int bad = 0;
    for (int p = 0; p < c.n; ++p)
      for (int64_t r = 0; r < c.rows; ++r) {
        const auto wrow = dequant_row(c.t, w, r, c.cols);
        double want = res[p * c.rows + r], mag = std::fabs(want);
        for (int64_t k = 0; k < c.cols; ++k) {
          want += double(wrow[k]) * x[p * c.cols + k];
          mag += std::fabs(double(wrow[k]) * x[p * c.cols + k]);
        }
        if (!(std::fabs(got[p * c.rows + r] - want) <= 2e-6 * mag + 1e-7))
          if (++bad <= 5)
            ADD_FAILURE() << type_name(c.t) << " " << c.rows << "x" << c.cols << " n " << c.n << ": vector " << p
                          << " row " << r << " got " << got[p * c.rows + r] << " want " << want;
      }
    EXPECT_EQ(bad, 0) << type_name(c.t) << " " << c.rows << "x" << c.cols;
  }
  // Grouped: 3 experts of F16, vectors scattered over groups by a list, one
  // group over the 64-vector tile, an empty launch group.
  const int64_t rows = 70, cols = 96;
  const int n_expert = 3, n_vec = 75;
  const auto w = random_weights(DType::F16, rows * n_expert, cols, rng);
  const auto x = random_floats(static_cast<size_t>(n_vec * cols), rng);
  const std::vector<int32_t> expert = {2, 0, 1}, offsets = {0, 66, 67, 75}, n_groups = {3};
  std::vector<int32_t> list(n_vec);
  for (int i = 0; i < n_vec; ++i) list[i] = (i * 11) % n_vec;
  std::vector<int> expert_of(n_vec);
  for (int gi = 0; gi < 3; ++gi)
    for (int i = offsets[gi]; i < offsets[gi + 1]; ++i) expert_of[list[i]] = expert[gi];
  DeviceBuffer dw = upload(w), dx = upload(x), dex = upload(expert), doff = upload(offsets), dl = upload(list),
               dng = upload(n_groups), y = poisoned(n_vec * rows);
  MatrixSet m;
  m.type = DType::F16;
  m.rows = rows;
  m.cols = cols;
  m.base = dw.get();
  m.stride = row_bytes(DType::F16, cols) * rows;
  MatvecGroups g;
  g.max_groups = 4;
  g.per_group = 66;
  g.n_groups = dng.as<int32_t>();
  g.expert = dex.as<int32_t>();
  g.offsets = doff.as<int32_t>();
  g.list = dl.as<int32_t>();
  MatvecInput in;
  in.f32 = dx.as<float>();
  matmul(m, in, g, y.as<float>(), rows, nullptr, s);
  const auto got = download<float>(y.get(), n_vec * rows);
  int bad = 0;
  for (int p = 0; p < n_vec; ++p)
    for (int64_t r = 0; r < rows; ++r) {
      const auto wrow = dequant_row(DType::F16, w, expert_of[p] * rows + r, cols);
      double want = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        want += double(wrow[k]) * x[p * cols + k];
        mag += std::fabs(double(wrow[k]) * x[p * cols + k]);
      }
      if (!(std::fabs(got[p * rows + r] - want) <= 2e-6 * mag + 1e-7))
        if (++bad <= 5) ADD_FAILURE() << "grouped f16: vector " << p << " row " << r << " got " << got[p * rows + r];
    }
  EXPECT_EQ(bad, 0);
}

TEST(CudaMatmul, GroupedByExpert) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(52);
  Stream s;
  const DType t = DType::Q4_K;
  const int64_t rows = 96, cols = 256;
  const int n_expert = 4, n_vec = 90;
  const auto w = random_weights(t, rows * n_expert, cols, rng);
  const auto x = random_floats(static_cast<size_t>(n_vec * cols), rng);
  // vectors 0..89 (scattered by list) in three groups of 70 / 1 / 19 for experts 3, 1, 2 (one over 64)
  std::vector<int32_t> expert = {3, 1, 0}, offsets = {0, 70, 71, 90}, list(n_vec), n_groups = {3};
  std::vector<int> expert_of(n_vec);
  for (int i = 0; i < n_vec; ++i) list[i] = (i * 7) % n_vec;
  expert[2] = 2;
  for (int gi = 0; gi < 3; ++gi)
    for (int i = offsets[gi]; i < offsets[gi + 1]; ++i) expert_of[list[i]] = expert[gi];
  DeviceBuffer dw = upload(w), dx = upload(x), dex = upload(expert), doff = upload(offsets), dl = upload(list),
               dng = upload(n_groups), y = poisoned(n_vec * rows);
  MatrixSet m;
  m.type = t;
  m.rows = rows;
  m.cols = cols;
  m.base = dw.get();
  m.stride = row_bytes(t, cols) * rows;
  MatvecGroups g;
  g.max_groups = 4;  // one more than the device count
  g.per_group = 70;
  g.n_groups = dng.as<int32_t>();
  g.expert = dex.as<int32_t>();
  g.offsets = doff.as<int32_t>();
  g.list = dl.as<int32_t>();
  MatvecInput in;
  in.f32 = dx.as<float>();
  matmul(m, in, g, y.as<float>(), rows, nullptr, s);
  check(download<float>(y.get(), n_vec * rows), w, t, cols, x, expert_of, rows, nullptr, "grouped matmul");
}

}  // namespace
}  // namespace ms::cuda::test
