// CUDA matvec kernels against the CPU reference (dequantize_row_ref, then a
// double dot): expert tables, grouped lists, SwiGLU pairs and residuals, and
// bad inputs. Dense matrices of every format (odd rows and widths, 1 to 65
// vectors, residual) are tests/backend_ops' ops dot_q8_<type> / vec_dot_<type>
// (implementation cuda_matvec). Outputs are poisoned with NaN before each launch.
#include <gtest/gtest.h>

#include "cuda/matvec.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

struct Case {
  DType type;
  int64_t rows, cols;
};

std::string case_name(const Case& c) {
  return std::string(type_name(c.type)) + "_" + std::to_string(c.rows) + "x" + std::to_string(c.cols);
}


void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& bound,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= bound[i])) {  // NaN fails too
      if (++bad <= 5)
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i] << " (bound "
                      << bound[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

// Experts addressed through a device table of slot pointers (with an offset
// inside each slot), ids on the device, one x shared by all selected experts,
// plus the residual.
TEST(MatvecExperts, TableOfSlotsWithIdsAndResidual) {
  MS_REQUIRE_GPU();
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::BF16}) {
    std::mt19937 rng(77);
    const int64_t rows = 96, cols = 512;
    const int n_expert = 6, k = 4;
    const int64_t rb = row_bytes(t, cols), mat = rb * rows, pad = 256;
    std::vector<std::vector<uint8_t>> ws;
    std::vector<uint8_t> slots(static_cast<size_t>((mat + pad) * n_expert));
    for (int e = 0; e < n_expert; ++e) {
      ws.push_back(random_weights(t, rows, cols, rng));
      std::memcpy(&slots[(n_expert - 1 - e) * (mat + pad) + pad], ws.back().data(), mat);  // slots reversed
    }
    DeviceBuffer dslots = upload(slots);
    std::vector<const void*> table(n_expert);
    for (int e = 0; e < n_expert; ++e) table[e] = dslots.as<uint8_t>() + (n_expert - 1 - e) * (mat + pad);
    DeviceBuffer dtable = upload(table);
    const std::vector<int32_t> ids = {4, 0, 5, 2};
    DeviceBuffer dids = upload(ids);
    Stream s;
    const auto x = random_floats(cols, rng);
    DevInput in = make_matvec_input(t, x, cols, 1, s);
    const auto res = random_floats(static_cast<size_t>(rows * k), rng);
    DeviceBuffer dres = upload(res);

    MatrixSet m;
    m.type = t;
    m.rows = rows;
    m.cols = cols;
    m.table = dtable.as<const void* const>();
    m.offset = pad;
    MatvecGroups g;
    g.max_groups = k;
    g.per_group = 1;
    g.x_div = k;
    g.expert = dids.as<int32_t>();
    DeviceBuffer y = poisoned(static_cast<size_t>(rows * k));
    matvec(m, in.in, g, y.as<float>(), rows, dres.as<float>(), s);
    const auto got = download<float>(y.get(), static_cast<size_t>(rows * k));
    std::vector<double> want, bound;
    for (int j = 0; j < k; ++j)
      for (int64_t r = 0; r < rows; ++r) {
        const RefDot d = ref_dot(dequant_row(t, ws[ids[j]], r, cols), x.data(), cols, matvec_takes_q8(t));
        want.push_back(d.value + res[j * rows + r]);
        bound.push_back(d.bound);
      }
    expect_close(got, want, bound, std::string("experts ") + type_name(t));
  }
}

// Grouped layout (as the expert FFN uses for many tokens): base + stride
// addressing, explicit offsets/list, a device group count smaller than the
// launch, and the SwiGLU pair.
TEST(MatvecExperts, GroupedListsAndGatedPair) {
  MS_REQUIRE_GPU();
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::MXFP4, DType::F16}) {
    std::mt19937 rng(99);
    const int64_t rows = 40, cols = 768;
    const int n_expert = 3;
    const int64_t mat = row_bytes(t, cols) * rows;
    const auto gate = random_weights(t, rows * n_expert, cols, rng);
    const auto up = random_weights(t, rows * n_expert, cols, rng);
    DeviceBuffer dgate = upload(gate), dup = upload(up);
    // 7 output vectors; vector p reads input p / x_div with x_div = 1 here.
    const int n_vec = 7;
    const auto x = random_floats(static_cast<size_t>(cols * n_vec), rng);
    Stream s;
    DevInput in = make_matvec_input(t, x, cols, n_vec, s);
    // groups: expert 2 -> {5, 0, 3}, expert 0 -> {6}, expert 1 -> {1, 2, 4}; launch 5 groups, 3 real
    const std::vector<int32_t> n_groups = {3}, expert = {2, 0, 1, 0, 0}, offsets = {0, 3, 4, 7, 7, 7},
                               list = {5, 0, 3, 6, 1, 2, 4};
    DeviceBuffer dng = upload(n_groups), dex = upload(expert), doff = upload(offsets), dlist = upload(list);
    MatrixSet mg, mu;
    mg.type = mu.type = t;
    mg.rows = mu.rows = rows;
    mg.cols = mu.cols = cols;
    mg.base = dgate.get();
    mu.base = dup.get();
    mg.stride = mu.stride = mat;
    MatvecGroups g;
    g.max_groups = 5;
    g.per_group = 3;
    g.n_groups = dng.as<int32_t>();
    g.expert = dex.as<int32_t>();
    g.offsets = doff.as<int32_t>();
    g.list = dlist.as<int32_t>();
    // typical_per_group 1: the one-vector kernel walks each group's vectors
    // (decode batches spread over many experts); 0: the multi-vector kernel.
    for (int typical : {0, 1}) {
      g.typical_per_group = typical;
      const std::string kernel = typical == 1 ? " (one-vector kernel)" : "";
      DeviceBuffer y = poisoned(static_cast<size_t>(rows * n_vec));
      DeviceBuffer yg = poisoned(static_cast<size_t>(rows * n_vec));
      matvec(mg, in.in, g, y.as<float>(), rows, nullptr, s);
      matvec_glu(mg, mu, in.in, g, yg.as<float>(), rows, s);
      const auto got = download<float>(y.get(), static_cast<size_t>(rows * n_vec));
      const auto got_glu = download<float>(yg.get(), static_cast<size_t>(rows * n_vec));
      std::vector<int> expert_of(n_vec);
      for (int gi = 0; gi < 3; ++gi)
        for (int i = offsets[gi]; i < offsets[gi + 1]; ++i) expert_of[list[i]] = expert[gi];
      std::vector<double> want, bound, want_glu, bound_glu;
      const bool q8 = matvec_takes_q8(t);
      for (int p = 0; p < n_vec; ++p)
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t row = expert_of[p] * rows + r;
          const RefDot a = ref_dot(dequant_row(t, gate, row, cols), x.data() + p * cols, cols, q8);
          const RefDot b = ref_dot(dequant_row(t, up, row, cols), x.data() + p * cols, cols, q8);
          want.push_back(a.value);
          bound.push_back(a.bound);
          const double sa = a.value / (1 + std::exp(-a.value));
          want_glu.push_back(sa * b.value);
          // |d(silu(a) b)| <= |b| * 1.1 |da| + |silu(a)| |db| (silu' is within [-0.1, 1.1])
          bound_glu.push_back(std::fabs(b.value) * 1.1 * a.bound + std::fabs(sa) * b.bound + a.bound * b.bound + 1e-6);
        }
      expect_close(got, want, bound, std::string("grouped ") + type_name(t) + kernel);
      expect_close(got_glu, want_glu, bound_glu, std::string("grouped glu ") + type_name(t) + kernel);
    }
  }
}

TEST(MatvecErrors, RejectsBadShapesAndInputs) {
  MS_REQUIRE_GPU();
  DeviceBuffer w(4096);
  MatvecInput none;
  EXPECT_THROW(linear(DType::Q4_K, w.get(), 4, 100, none, 1, nullptr, nullptr, nullptr), Error);  // partial block
  EXPECT_THROW(linear(DType::Q4_K, w.get(), 4, 256, none, 1, nullptr, nullptr, nullptr), Error);  // no q8 input
  EXPECT_THROW(linear(DType::F16, w.get(), 4, 256, none, 1, nullptr, nullptr, nullptr), Error);   // no f32 input
  EXPECT_THROW(linear(DType::Q8_K, w.get(), 4, 256, none, 1, nullptr, nullptr, nullptr), Error);  // unsupported
}

}  // namespace
}  // namespace ms::cuda::test
