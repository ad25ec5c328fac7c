// matvec / matmul against a scalar reference (dequantized weights times the
// dequantized quantized activations, summed in double) on 1, 2 and 4 threads,
// with poisoned outputs, odd row counts and every type with a fast kernel.
#include "cpu/matvec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "util/error.h"

namespace ms {
namespace {

// (Not Q4_1/Q5_1: their dots take the activations' sum from Q8_1's f16
// d*sum, which the dequantized reference here cannot see; test_quant's
// RefDot bounds that term.)
const DType kTypes[] = {DType::Q4_K,  DType::Q5_K,    DType::Q6_K,   DType::Q8_0,    DType::Q4_0,   DType::MXFP4,
                        DType::BF16,  DType::F16,     DType::F32,    DType::Q5_0,    DType::Q2_K,   DType::Q3_K,
                        DType::TQ1_0, DType::TQ2_0,   DType::IQ1_S,  DType::IQ1_M,   DType::IQ2_XXS, DType::IQ2_XS,
                        DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,  DType::IQ4_NL,  DType::IQ4_XS};

struct Matrix {
  DType t;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // rows x cols, dequantized
};

Matrix make_matrix(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  Matrix m{t, rows, cols, std::vector<uint8_t>(static_cast<size_t>(rows * row_bytes(t, cols))),
           std::vector<float>(static_cast<size_t>(rows * cols))};
  std::vector<float> src(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp(nd(rng));  // rows of different magnitude
    for (float& v : src) v = nd(rng) * row_scale;
    uint8_t* row = m.bytes.data() + r * row_bytes(t, cols);
    quantize_row_ref(t, src.data(), row, cols);
    dequantize_row_ref(t, row, m.deq.data() + r * cols, cols);
  }
  return m;
}

std::vector<float> make_x(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  return x;
}

// The activations as the kernels see them: quantized, then dequantized.
std::vector<float> seen_activations(DType wtype, const float* x, int64_t cols) {
  const DType at = type_info(wtype).vec_dot_type;
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(at, cols)));
  quantize_row_ref(at, x, q.data(), cols);
  std::vector<float> a(cols);
  dequantize_row_ref(at, q.data(), a.data(), cols);
  return a;
}

// y[r] vs sum_i w[r,i] a[i] in double, tolerance relative to sum |w a|.
void expect_matches(const Matrix& m, const float* x, const float* y, const std::string& what) {
  const std::vector<float> a = seen_activations(m.t, x, m.cols);
  for (int64_t r = 0; r < m.rows; ++r) {
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < m.cols; ++i) {
      const double p = static_cast<double>(m.deq[r * m.cols + i]) * a[i];
      ref += p;
      mag += std::fabs(p);
    }
    ASSERT_TRUE(std::isfinite(y[r])) << what << " row " << r << " not written: " << y[r];
    ASSERT_NEAR(y[r], ref, 2e-5 * mag + 1e-30) << what << " row " << r;
  }
}

int64_t block_cols(DType t, int64_t k) { return type_info(t).block_size == 1 ? 64 * k + 3 : type_info(t).block_size * k; }

class MatvecTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatvecTest, MatchesReferenceOnAnyThreadCount) {
  const DType t = GetParam();
  struct Shape { int64_t rows, cols; };
  const Shape shapes[] = {{1, block_cols(t, 1)}, {7, block_cols(t, 3)}, {33, block_cols(t, 9)}, {130, block_cols(t, 2)}};
  uint32_t seed = 10;
  for (const Shape& s : shapes) {
    const Matrix m = make_matrix(t, s.rows, s.cols, seed++);
    const std::vector<float> x = make_x(s.cols, seed++);
    for (int threads : {1, 2, 4}) {
      ThreadPool pool(threads);
      std::vector<float> y(s.rows + 1, std::numeric_limits<float>::quiet_NaN());
      y[s.rows] = -7.f;
      matvec(pool, t, m.bytes.data(), s.rows, s.cols, x.data(), y.data());
      const std::string what = std::string(type_name(t)) + " " + std::to_string(s.rows) + "x" +
                               std::to_string(s.cols) + " threads=" + std::to_string(threads);
      expect_matches(m, x.data(), y.data(), what);
      EXPECT_EQ(y[s.rows], -7.f) << what << ": wrote past the last row";
    }
  }
}

TEST_P(MatvecTest, MatmulMatchesMatvecPerToken) {
  const DType t = GetParam();
  const int64_t rows = 37, cols = block_cols(t, 4);
  const Matrix m = make_matrix(t, rows, cols, 77);
  for (int64_t n_tokens : {1, 3, 5}) {
    std::vector<float> X;
    for (int64_t k = 0; k < n_tokens; ++k) {
      const std::vector<float> x = make_x(cols, 100 + static_cast<uint32_t>(k));
      X.insert(X.end(), x.begin(), x.end());
    }
    for (int threads : {1, 2, 4}) {
      ThreadPool pool(threads);
      std::vector<float> Y(n_tokens * rows, std::numeric_limits<float>::quiet_NaN());
      matmul(pool, t, m.bytes.data(), rows, cols, X.data(), n_tokens, Y.data());
      for (int64_t k = 0; k < n_tokens; ++k) {
        const std::string what = std::string(type_name(t)) + " token " + std::to_string(k) + "/" +
                                 std::to_string(n_tokens) + " threads=" + std::to_string(threads);
        expect_matches(m, X.data() + k * cols, Y.data() + k * rows, what);
        std::vector<float> y(rows);
        matvec(pool, t, m.bytes.data(), rows, cols, X.data() + k * cols, y.data());
        for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(Y[k * rows + r], y[r]) << what << " row " << r;
      }
    }
  }
}

TEST_P(MatvecTest, PreQuantizedActivationsGiveTheSameResult) {
  const DType t = GetParam();
  const int64_t rows = 9, cols = block_cols(t, 2);
  const Matrix m = make_matrix(t, rows, cols, 5);
  const std::vector<float> x = make_x(2 * cols, 6);
  ThreadPool pool(2);
  std::vector<uint8_t> acts(static_cast<size_t>(2 * act_row_bytes(t, cols)));
  quantize_activations(t, x.data(), cols, 2, acts.data());
  std::vector<float> y1(rows), y2(rows), Y(2 * rows);
  matvec(pool, t, m.bytes.data(), rows, cols, x.data() + cols, y1.data());
  matvec_quantized(pool, t, m.bytes.data(), rows, cols, acts.data() + act_row_bytes(t, cols), y2.data());
  matmul_quantized(pool, t, m.bytes.data(), rows, cols, acts.data(), 2, Y.data());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(y1[r], y2[r]);
    EXPECT_EQ(y1[r], Y[rows + r]);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatvecTest, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// Jobs of different types and shapes in one batch give, bit for bit, what
// each gives alone, and every output is written.
TEST(Matvec, BatchMatchesSingleMatvecs) {
  const DType types[] = {DType::Q4_K, DType::Q8_0, DType::BF16, DType::Q6_K, DType::MXFP4};
  std::vector<Matrix> mats;
  std::vector<std::vector<uint8_t>> acts;
  std::vector<std::vector<float>> ys, want;
  uint32_t seed = 300;
  for (int j = 0; j < 5; ++j) {
    const DType t = types[j];
    const int64_t rows = 1 + 13 * j, cols = block_cols(t, 1 + j);
    mats.push_back(make_matrix(t, rows, cols, seed++));
    const std::vector<float> x = make_x(cols, seed++);
    acts.emplace_back(static_cast<size_t>(act_row_bytes(t, cols)));
    quantize_activations(t, x.data(), cols, 1, acts.back().data());
    ys.emplace_back(rows, std::numeric_limits<float>::quiet_NaN());
    want.emplace_back(rows);
    ThreadPool one(1);
    matvec_quantized(one, t, mats.back().bytes.data(), rows, cols, acts.back().data(), want.back().data());
  }
  std::vector<MatvecJob> jobs;
  for (int j = 0; j < 5; ++j)
    jobs.push_back({mats[j].t, mats[j].bytes.data(), mats[j].rows, mats[j].cols, acts[j].data(), ys[j].data()});
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (auto& y : ys) std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
    matvec_batch(pool, jobs.data(), static_cast<int64_t>(jobs.size()));
    for (int j = 0; j < 5; ++j)
      for (int64_t r = 0; r < mats[j].rows; ++r)
        EXPECT_EQ(ys[j][r], want[j][r]) << "job " << j << " row " << r << " threads " << threads;
  }
}

TEST(Matvec, RejectsUnsupportedTypesAndShapes) {
  ThreadPool pool(1);
  std::vector<uint8_t> w(1 << 16);
  std::vector<float> x(1024, 1.f), y(16);
  EXPECT_THROW(matvec(pool, DType::I16, w.data(), 2, 256, x.data(), y.data()), Error);
  EXPECT_THROW(matvec(pool, DType::Q4_K, w.data(), 2, 100, x.data(), y.data()), Error);
  EXPECT_THROW(matmul(pool, DType::Q8_0, w.data(), 2, 33, x.data(), 1, y.data()), Error);
  EXPECT_THROW(matvec(pool, DType::Q8_0, w.data(), -1, 32, x.data(), y.data()), Error);
}

TEST(Matvec, EmptyShapesWriteNothing) {
  ThreadPool pool(2);
  std::vector<uint8_t> w(1024);
  std::vector<float> x(256, 1.f), y(4, -1.f);
  matvec(pool, DType::Q4_K, w.data(), 0, 256, x.data(), y.data());
  matmul(pool, DType::Q4_K, w.data(), 4, 256, x.data(), 0, y.data());
  for (float v : y) EXPECT_EQ(v, -1.f);
}

}  // namespace
}  // namespace ms
