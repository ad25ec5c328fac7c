// matmul_many: several matrices of different types and shapes, indexed
// inputs, in one region, against a per-row reference dot.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/matvec.h"
#include "cpu/matvec_many.h"
#include "cpu/thread_pool.h"
#include "quant/quant.h"

namespace ms {
namespace {

std::vector<uint8_t> random_matrix(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes(t, cols)));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row_ref(t, row.data(), out.data() + r * row_bytes(t, cols), cols);
  }
  return out;
}

TEST(MatmulMany, MixedJobsMatchReferenceDots) {
  ThreadPool pool(2);
  struct Spec {
    DType t;
    int64_t rows, cols, n_tokens;
  };
  const Spec specs[] = {{DType::Q4_K, 37, 512, 3}, {DType::Q6_K, 5, 256, 1}, {DType::Q8_0, 130, 96, 4},
                        {DType::F32, 9, 40, 2},    {DType::F16, 1, 64, 5},   {DType::Q4_K, 0, 256, 2}};
  const int64_t n_inputs = 6;
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<std::vector<uint8_t>> W, acts;
  std::vector<std::vector<float>> X, Y;
  std::vector<std::vector<int32_t>> index;
  std::vector<MatmulJob> jobs;
  for (size_t j = 0; j < std::size(specs); ++j) {
    const Spec& s = specs[j];
    W.push_back(random_matrix(s.t, s.rows, s.cols, static_cast<uint32_t>(j)));
    X.emplace_back(static_cast<size_t>(n_inputs * s.cols));
    for (float& v : X.back()) v = dist(rng);
    acts.emplace_back(static_cast<size_t>(n_inputs * act_row_bytes(s.t, s.cols)));
    quantize_activations(s.t, X.back().data(), s.cols, n_inputs, acts.back().data());
    index.emplace_back();
    for (int64_t i = 0; i < s.n_tokens; ++i) index.back().push_back(static_cast<int32_t>((i * 5 + j) % n_inputs));
    Y.emplace_back(static_cast<size_t>(s.n_tokens * s.rows), NAN);
  }
  for (size_t j = 0; j < std::size(specs); ++j)
    jobs.push_back({specs[j].t, W[j].data(), specs[j].rows, specs[j].cols, acts[j].data(),
                    j % 2 ? index[j].data() : nullptr, specs[j].n_tokens, Y[j].data()});
  matmul_many(pool, jobs.data(), static_cast<int>(jobs.size()));
  for (size_t j = 0; j < std::size(specs); ++j) {
    const Spec& s = specs[j];
    const int64_t ab = act_row_bytes(s.t, s.cols), wb = row_bytes(s.t, s.cols);
    for (int64_t i = 0; i < s.n_tokens; ++i) {
      const int64_t a = j % 2 ? index[j][static_cast<size_t>(i)] : i;
      for (int64_t r = 0; r < s.rows; ++r) {
        const float ref = vec_dot_ref(s.t, s.cols, W[j].data() + r * wb, acts[j].data() + a * ab);
        ASSERT_NEAR(Y[j][static_cast<size_t>(i * s.rows + r)], ref, 1e-3f * (1 + std::fabs(ref)))
            << "job " << j << " token " << i << " row " << r;
      }
    }
  }
}

TEST(MatmulMany, QuantizeRowsMatchesPerRow) {
  ThreadPool pool(2);
  std::vector<float> x(20 * 256);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (float& v : x) v = dist(rng);
  const int64_t ab = act_row_bytes(DType::Q4_K, 256);
  std::vector<uint8_t> a(20 * ab), b(20 * ab);
  quantize_rows(pool, DType::Q4_K, x.data(), 20, 256, a.data());
  quantize_activations(DType::Q4_K, x.data(), 256, 20, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace ms
