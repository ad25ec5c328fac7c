// cuda::linear over a prompt's worth of vectors (matvec.cu spreads them over
// groups of 8 on grid.y, the last group taking the remainder): every vector's
// result is the one it gets in a call of a few vectors, bit for bit (gates
// such as a Gated DeltaNet layer's alpha/beta or the shared expert's score
// must not depend on the batch), matches the CPU reference, and the residual
// and f32 / Q8 inputs follow the vector offsets. Outputs are poisoned.
#include <gtest/gtest.h>

#include "cuda/matvec.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {


// Vectors [first, first + count) of `in` as an input of their own.
MatvecInput slice(const MatvecInput& in, int64_t cols, int64_t first) {
  MatvecInput s = in;
  s.f32 += first * cols;
  if (s.q8.q != nullptr) {
    s.q8.q += first * cols;
    s.q8.ds += first * (cols / 32) * 2;
  }
  return s;
}

TEST(CudaLinear, ManyVectorsEqualFewVectorsBitForBit) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(29);
  Stream s;
  struct Case {
    DType type;
    int64_t rows, cols;
  };
  // F32 32 x 2048: a 35B layer's alpha/beta; 1 row: the shared expert's gate.
  for (const Case c : {Case{DType::F32, 32, 2048}, Case{DType::F32, 1, 256}, Case{DType::Q8_0, 7, 96},
                       Case{DType::Q4_K, 5, 512}}) {
    const auto w = random_weights(c.type, c.rows, c.cols, rng);
    DeviceBuffer dw = upload(w);
    for (int n : {15, 16, 17, 23, 24, 1001}) {
      const auto x = random_floats(static_cast<size_t>(c.cols * n), rng);
      const auto res = random_floats(static_cast<size_t>(c.rows * n), rng);
      DevInput in = make_matvec_input(c.type, x, c.cols, n, s);
      const std::string what = std::string(type_name(c.type)) + " " + std::to_string(c.rows) + "x" +
                               std::to_string(c.cols) + " n=" + std::to_string(n);
      // All n at once, with and without a residual.
      DeviceBuffer all = poisoned(static_cast<size_t>(c.rows * n));
      linear(c.type, dw.get(), c.rows, c.cols, in.in, n, all.as<float>(), nullptr, s);
      DeviceBuffer with_res = upload(res);
      linear(c.type, dw.get(), c.rows, c.cols, in.in, n, with_res.as<float>(), with_res.as<float>(), s);
      // The same vectors in calls of 2 or 3 (one group each: no split inside).
      DeviceBuffer few = poisoned(static_cast<size_t>(c.rows * n));
      for (int first = 0; first < n;) {
        const int count = n - first == 3 ? 3 : 2;
        linear(c.type, dw.get(), c.rows, c.cols, slice(in.in, c.cols, first), count, few.as<float>() + first * c.rows,
               nullptr, s);
        first += count;
      }
      const auto got = download<float>(all.get(), static_cast<size_t>(c.rows * n));
      const auto want = download<float>(few.get(), got.size());
      const auto got_res = download<float>(with_res.get(), got.size());
      int bad = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (!(got[i] == want[i]) && ++bad <= 3) ADD_FAILURE() << what << ": element " << i << " " << got[i] << " vs " << want[i];
        if (!(got_res[i] == res[i] + got[i]) && ++bad <= 3) ADD_FAILURE() << what << ": residual element " << i;
      }
      EXPECT_EQ(bad, 0) << what;
      // And the CPU reference, within the kernel's bounds.
      const bool q8 = matvec_takes_q8(c.type);
      for (int v : {0, n / 2, n - 1})
        for (int64_t r = 0; r < c.rows; ++r) {
          const RefDot d = ref_dot(dequant_row(c.type, w, r, c.cols), x.data() + v * c.cols, c.cols, q8);
          EXPECT_NEAR(got[v * c.rows + r], d.value, d.bound) << what << " vector " << v << " row " << r;
        }
    }
  }
}

}  // namespace
}  // namespace ms::cuda::test
