// The formats that the CUDA kernels read through sub-block decoders
// (cuda/quant_sub32*.cuh: Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, TQ1_0, TQ2_0 and the
// IQ formats) against the CPU reference (dequantize_row_ref, then a double
// dot) on random blocks: the decode matvec through expert tables (ids,
// residual, gated pair), the int8 GEMM, the dequantising f32 GEMM and the
// fused MoE decode kernels. Odd row counts, one and several blocks per row,
// outputs poisoned with NaN before each launch. The dense matvec and the
// embedding lookup of these formats are tests/backend_ops' (ops dot_q8_<type>,
// dequantize_<type>).
#include <gtest/gtest.h>

#include "cuda/gemm.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

const DType kTypes[] = {DType::Q4_1,   DType::Q5_0,   DType::Q5_1,  DType::Q2_K,    DType::Q3_K,  DType::TQ1_0,
                        DType::TQ2_0,  DType::IQ4_NL, DType::IQ4_XS, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,
                        DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S, DType::IQ1_M};

// Skips where the CPU side has no reference of t yet (it is the yardstick).
#define MS_REQUIRE_CPU_REFERENCE(t)                                                                     \
  do {                                                                                                  \
    if (!type_info(t).computable) GTEST_SKIP() << type_name(t) << ": no CPU reference to compare with"; \
  } while (0)

// Row widths: one block, and several (odd counts of blocks).
std::vector<int64_t> widths(DType t) {
  if (type_info(t).block_size == 32) return {32, 96, 1056};
  return {256, 768, 2304};
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& bound,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= bound[i]) && ++bad <= 5)  // NaN fails too
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i] << " (bound "
                    << bound[i] << ")";
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

struct Q8In {
  DeviceBuffer f32, q8;
  MatvecInput in;
};
Q8In q8_input(const std::vector<float>& x, int64_t cols, int64_t nvec, cudaStream_t s) {
  Q8In d;
  d.f32 = upload(x);
  d.in.f32 = d.f32.as<float>();
  d.q8 = DeviceBuffer(q8act_bytes(cols, nvec));
  d.in.q8 = q8act_view(d.q8.get(), cols, nvec);
  quantize_q8act(d.f32.as<float>(), cols, nvec, d.in.q8, s);
  return d;
}

class Sub32Format : public ::testing::TestWithParam<DType> {};

TEST_P(Sub32Format, KernelsAreSupported) {
  const DType t = GetParam();
  EXPECT_TRUE(matvec_supported(t));
  EXPECT_TRUE(matvec_takes_q8(t));
  EXPECT_TRUE(matmul_supported(t));
  EXPECT_TRUE(embed_supported(t));
  EXPECT_TRUE(matmul_int8_supported(t));
}

// Experts through a device table of slot pointers (offset inside each slot),
// ids on the device (one out of range: clamped), residual; and the gated pair.
TEST_P(Sub32Format, MatvecExpertTableAndGatedPair) {
  MS_REQUIRE_GPU();
  const DType t = GetParam();
  MS_REQUIRE_CPU_REFERENCE(t);
  std::mt19937 rng(600 + static_cast<int>(t));
  const int64_t rows = 45, cols = widths(t)[1];
  const int n_expert = 5, k = 4;
  const int64_t mat = row_bytes(t, cols) * rows, pad = 256;
  std::vector<std::vector<uint8_t>> gate, up;
  std::vector<uint8_t> slots(static_cast<size_t>((2 * mat + pad) * n_expert));
  for (int e = 0; e < n_expert; ++e) {
    gate.push_back(random_weights(t, rows, cols, rng));
    up.push_back(random_weights(t, rows, cols, rng));
    uint8_t* slot = &slots[(n_expert - 1 - e) * (2 * mat + pad)];  // slots reversed
    std::memcpy(slot + pad, gate.back().data(), mat);
    std::memcpy(slot + pad + mat, up.back().data(), mat);
  }
  DeviceBuffer dslots = upload(slots);
  std::vector<const void*> table(n_expert);
  for (int e = 0; e < n_expert; ++e) table[e] = dslots.as<uint8_t>() + (n_expert - 1 - e) * (2 * mat + pad);
  DeviceBuffer dtable = upload(table);
  std::vector<int32_t> ids = {3, 0, 4, 1};
  DeviceBuffer dids = upload(ids);
  Stream s;
  const auto x = random_floats(cols, rng);
  Q8In in = q8_input(x, cols, 1, s);
  const auto res = random_floats(static_cast<size_t>(rows * k), rng);
  DeviceBuffer dres = upload(res);
  MatrixSet mg, mu;
  mg.type = mu.type = t;
  mg.rows = mu.rows = rows;
  mg.cols = mu.cols = cols;
  mg.table = mu.table = dtable.as<const void* const>();
  mg.offset = pad;
  mu.offset = pad + mat;
  MatvecGroups g;
  g.max_groups = k;
  g.per_group = 1;
  g.x_div = k;
  g.n_expert = n_expert;
  g.expert = dids.as<int32_t>();
  DeviceBuffer y = poisoned(static_cast<size_t>(rows * k)), yg = poisoned(static_cast<size_t>(rows * k));
  matvec(mg, in.in, g, y.as<float>(), rows, dres.as<float>(), s);
  matvec_glu(mg, mu, in.in, g, yg.as<float>(), rows, s);
  const auto got = download<float>(y.get(), static_cast<size_t>(rows * k));
  const auto got_glu = download<float>(yg.get(), static_cast<size_t>(rows * k));
  std::vector<double> want, bound, want_glu, bound_glu;
  for (int j = 0; j < k; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      const RefDot a = ref_dot(dequant_row(t, gate[ids[j]], r, cols), x.data(), cols, true);
      const RefDot b = ref_dot(dequant_row(t, up[ids[j]], r, cols), x.data(), cols, true);
      want.push_back(a.value + res[j * rows + r]);
      bound.push_back(a.bound);
      const double sa = a.value / (1 + std::exp(-a.value));
      want_glu.push_back(sa * b.value);
      // |d(silu(a) b)| <= |b| * 1.1 |da| + |silu(a)| |db| (silu' is within [-0.1, 1.1])
      bound_glu.push_back(std::fabs(b.value) * 1.1 * a.bound + std::fabs(sa) * b.bound + a.bound * b.bound + 1e-6);
    }
  expect_close(got, want, bound, std::string("experts ") + type_name(t));
  expect_close(got_glu, want_glu, bound_glu, std::string("gated pair ") + type_name(t));
}

// matmul: the int8 tensor-core GEMM with Q8 activations and the dequantising
// f16 GEMM with f32 activations (every format).
TEST_P(Sub32Format, MatmulInt8AndDequantisingMatchReference) {
  MS_REQUIRE_GPU();
  const DType t = GetParam();
  MS_REQUIRE_CPU_REFERENCE(t);
  std::mt19937 rng(700 + static_cast<int>(t));
  Stream s;
  const bool mma = device_info(0).cc_major >= 8;
  struct C { int64_t rows, cols; int n; };
  const auto ws = widths(t);
  for (C c : {C{70, ws[0], 37}, C{131, ws[2], 65}, C{1, ws[1], 1}}) {
    const auto w = random_weights(t, c.rows, c.cols, rng);
    const auto x = random_floats(static_cast<size_t>(c.n * c.cols), rng);
    const auto res = random_floats(static_cast<size_t>(c.n * c.rows), rng);
    DeviceBuffer dw = upload(w), dres = upload(res);
    Q8In in = q8_input(x, c.cols, c.n, s);
    MatrixSet m;
    m.type = t;
    m.rows = c.rows;
    m.cols = c.cols;
    m.base = dw.get();
    MatvecGroups g;
    g.per_group = c.n;
    const std::string what = std::string(type_name(t)) + " " + std::to_string(c.rows) + "x" +
                             std::to_string(c.cols) + " n " + std::to_string(c.n);
    std::vector<double> want, bound_q8, bound_f16;
    for (int p = 0; p < c.n; ++p)
      for (int64_t r = 0; r < c.rows; ++r) {
        const auto wrow = dequant_row(t, w, r, c.cols);
        const float* xp = x.data() + p * c.cols;
        const RefDot d = ref_dot(wrow, xp, c.cols, true);
        double abs_sum = 0;
        for (int64_t i = 0; i < c.cols; ++i) abs_sum += std::fabs(static_cast<double>(wrow[i]) * xp[i]);
        want.push_back(d.value + res[p * c.rows + r]);
        bound_q8.push_back(d.bound);
        // f16 weights and activations: each product off by at most ~2 * 2^-11 relative
        bound_f16.push_back(1.1e-3 * abs_sum + 1e-5);
      }
    if (mma) {
      DeviceBuffer y = poisoned(static_cast<size_t>(c.n * c.rows));
      matmul(m, in.in, g, y.as<float>(), c.rows, dres.as<float>(), s);
      expect_close(download<float>(y.get(), static_cast<size_t>(c.n * c.rows)), want, bound_q8, "int8 " + what);
    }
    MatvecInput f32_only;
    f32_only.f32 = in.in.f32;
    DeviceBuffer y = poisoned(static_cast<size_t>(c.n * c.rows));
    matmul(m, f32_only, g, y.as<float>(), c.rows, dres.as<float>(), s);
    expect_close(download<float>(y.get(), static_cast<size_t>(c.n * c.rows)), want, bound_f16, "f16 " + what);
  }
}

// n experts of [rows][cols] back to back.
MatrixSet experts_at(const DeviceBuffer& b, DType t, int64_t rows, int64_t cols) {
  MatrixSet m;
  m.type = t;
  m.rows = rows;
  m.cols = cols;
  m.base = b.get();
  m.stride = row_bytes(t, cols) * rows;
  return m;
}

INSTANTIATE_TEST_SUITE_P(Formats, Sub32Format, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(type_name(i.param)); });

}  // namespace
}  // namespace ms::cuda::test
