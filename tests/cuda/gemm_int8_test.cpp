// Int8 tensor-core GEMM (matmul with Q8 activations) against the
// double-precision reference over the CPU dequantizer: expert groups from a
// slot table and from base + stride with x_div > 1, poisoned outputs, bad
// input. Dense matrices of every int8 format (odd row / vector counts past one
// tile, K not a multiple of 256, residual) are tests/backend_ops' (ops
// dot_q8_<type>, implementation cuda_matmul_int8). The kernel's integer
// products are exact, so the bound is the activation quantization error
// (ref_dot) plus float rounding.
#include <gtest/gtest.h>

#include "cuda/gemm.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

bool device_has_int8_mma() {
  const DeviceInfo info = device_info(0);
  return info.cc_major >= 8;
}

#define MS_REQUIRE_INT8_MMA()                                                  \
  do {                                                                         \
    MS_REQUIRE_GPU();                                                          \
    if (!device_has_int8_mma()) GTEST_SKIP() << "int8 mma needs sm_80+";       \
  } while (0)

// got[p*rows + r] vs W_{expert_of[p]} row r . x[p / x_div] (+ res[p*rows + r])
void check(const std::vector<float>& got, const std::vector<uint8_t>& w, DType t, int64_t rows, int64_t cols,
           const std::vector<float>& x, int x_div, const std::vector<int>& expert_of, const std::vector<float>* res,
           const std::string& what) {
  int bad = 0;
  const int n_vec = static_cast<int>(expert_of.size());
  for (int p = 0; p < n_vec; ++p)
    for (int64_t r = 0; r < rows; ++r) {
      const auto wrow = dequant_row(t, w, expert_of[p] * rows + r, cols);
      const RefDot d = ref_dot(wrow, x.data() + static_cast<int64_t>(p / x_div) * cols, cols, true);
      const double want = d.value + (res ? (*res)[p * rows + r] : 0.0);
      const float g = got[p * rows + r];
      if (!(std::fabs(g - want) <= d.bound))
        if (++bad <= 5)
          ADD_FAILURE() << what << ": vector " << p << " row " << r << " got " << g << " want " << want << " bound "
                        << d.bound;
    }
  EXPECT_EQ(bad, 0) << what;
}

// Groups of 70 / 1 / 19 / 0 vectors (scattered by a list) for experts 3, 1,
// 2 (one group beyond the device count), input vector p / 2.
void grouped_case(DType t, bool use_table, uint32_t seed) {
  std::mt19937 rng(seed);
  Stream s;
  const int64_t rows = 96, cols = 512;
  const int n_expert = 4, n_vec = 90, x_div = 2, n_in = (n_vec + x_div - 1) / x_div;
  const auto w = random_weights(t, rows * n_expert, cols, rng);
  const auto x = random_floats(static_cast<size_t>(n_in * cols), rng);
  std::vector<int32_t> expert = {3, 1, 2}, offsets = {0, 70, 71, 90}, list(n_vec), n_groups = {3};
  std::vector<int> expert_of(n_vec);
  for (int i = 0; i < n_vec; ++i) list[i] = (i * 7) % n_vec;
  for (int gi = 0; gi < 3; ++gi)
    for (int i = offsets[gi]; i < offsets[gi + 1]; ++i) expert_of[list[i]] = expert[gi];
  const int64_t mat_bytes = row_bytes(t, cols) * rows;
  DeviceBuffer dw = upload(w), dx = upload(x), dex = upload(expert), doff = upload(offsets), dl = upload(list),
               dng = upload(n_groups), y = poisoned(n_vec * rows);
  std::vector<const void*> tab;
  for (int e = 0; e < n_expert; ++e) tab.push_back(dw.as<uint8_t>() + e * mat_bytes);
  DeviceBuffer dtab = upload(tab);
  DeviceBuffer q8b(q8act_bytes(cols, n_in));
  MatvecInput in;
  in.q8 = q8act_view(q8b.get(), cols, n_in);
  quantize_q8act(dx.as<float>(), cols, n_in, in.q8, s);
  MatrixSet m;
  m.type = t;
  m.rows = rows;
  m.cols = cols;
  if (use_table) {
    m.table = dtab.as<const void* const>();
  } else {
    m.base = dw.get();
    m.stride = mat_bytes;
  }
  MatvecGroups g;
  g.max_groups = 4;  // one more than the device count
  g.per_group = 70;
  g.x_div = x_div;
  g.n_expert = n_expert;
  g.n_groups = dng.as<int32_t>();
  g.expert = dex.as<int32_t>();
  g.offsets = doff.as<int32_t>();
  g.list = dl.as<int32_t>();
  matmul(m, in, g, y.as<float>(), rows, nullptr, s);
  check(download<float>(y.get(), n_vec * rows), w, t, rows, cols, x, x_div, expert_of, nullptr,
        std::string("grouped int8 matmul ") + type_name(t) + (use_table ? " (table)" : " (stride)"));
}

TEST(CudaMatmulInt8, GroupedByExpert) {
  MS_REQUIRE_INT8_MMA();
  grouped_case(DType::Q4_K, true, 62);
  grouped_case(DType::Q6_K, false, 63);
  grouped_case(DType::Q8_0, true, 64);
  grouped_case(DType::Q2_K, true, 65);   // per-16 mins: the activation sums per 16
  grouped_case(DType::Q2_K, false, 66);
}

TEST(CudaMatmulInt8, RejectsBadInput) {
  MS_REQUIRE_INT8_MMA();
  Stream s;
  MatrixSet m;
  m.type = DType::Q4_K;
  m.rows = 8;
  m.cols = 256;
  m.base = reinterpret_cast<const void*>(256);
  DeviceBuffer q8b(q8act_bytes(512, 1));
  MatvecInput in;
  in.q8 = q8act_view(q8b.get(), 512, 1);  // n != cols
  MatvecGroups g;
  EXPECT_THROW(matmul(m, in, g, nullptr, 0, nullptr, s), Error);
}

}  // namespace
}  // namespace ms::cuda::test
