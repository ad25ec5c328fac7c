// The AVX2 and AVX-512 row-dot kernels beyond their comparison with
// vec_dot_ref on random and extreme blocks (tests/backend_ops, ops
// vec_dot_<type>): one row at a time equals the multi-row path bit for bit,
// and the dispatched vec_dot / vec_dot_rows (path names, the reference for
// types without a kernel, partial blocks rejected).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/simd_kernels.h"
#include "util/error.h"

namespace ms {
namespace {

enum class Fill { Random, Zero, Extreme };

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Offsets of the f16 scale fields in a block (the rest of the bytes are
// quants and packed scales: any bit pattern is a valid block).
std::vector<int> f16_fields(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q8_0: case DType::Q5_0: case DType::IQ4_NL: return {0};
    case DType::Q4_K: case DType::Q5_K: case DType::Q4_1: case DType::Q5_1: return {0, 2};
    case DType::Q6_K: return {208};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::TQ1_0: return {52};
    case DType::TQ2_0: return {64};
    case DType::IQ1_S: case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS:
    case DType::IQ3_S: case DType::IQ4_XS: return {0};
    default: return {};  // IQ1_M: see set_iq1m_scale
  }
}

// IQ1_M keeps its f16 scale in the top nibbles of the 4 u16 words at byte 48.
void set_iq1m_scale(uint8_t* blk, float v) {
  const uint16_t h = f32_to_f16(v);
  uint16_t sc[4];
  std::memcpy(sc, blk + 48, 8);
  for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>((sc[k] & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12));
  std::memcpy(blk + 48, sc, 8);
}

// One weight row of n elements of type t.
void fill_row(DType t, int64_t n, Fill fill, std::mt19937& rng, uint8_t* row) {
  const TypeInfo& info = type_info(t);
  const int64_t bytes = row_bytes(t, n);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.f, 1.f);
  if (fill == Fill::Zero) {
    std::memset(row, 0, bytes);
    return;
  }
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      float v = fill == Fill::Random ? normal(rng) : (i % 2 ? -60000.f : 60000.f);
      if (t == DType::F32) std::memcpy(row + 4 * i, &v, 4);
      if (t == DType::F16) put_f16(row + 2 * i, v);
      if (t == DType::BF16) {
        const uint16_t h = f32_to_bf16(v);
        std::memcpy(row + 2 * i, &h, 2);
      }
    }
    return;
  }
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (int64_t b = 0; b < n / info.block_size; ++b) {
    uint8_t* blk = row + b * info.type_size;
    for (int64_t k = 0; k < info.type_size; ++k) {
      if (fill == Fill::Random) {
        blk[k] = static_cast<uint8_t>(byte(rng));
      } else if (t == DType::Q8_0) {
        blk[k] = (k % 2) ? 0x80 : 0x7F;  // -128 and 127
      } else if (t == DType::Q6_K && k >= 192) {
        blk[k] = 0x7F;  // int8 scales at their max
      } else {
        blk[k] = 0xFF;  // every quant and 6-bit scale at its max
      }
    }
    for (int off : f16_fields(t)) put_f16(blk + off, fill == Fill::Random ? scale(rng) : 1000.f);
    if (t == DType::MXFP4) blk[0] = fill == Fill::Random ? static_cast<uint8_t>(112 + byte(rng) % 24) : 1;
    if (t == DType::IQ1_M) set_iq1m_scale(blk, fill == Fill::Random ? scale(rng) : 1000.f);
  }
}

// Activations: normal floats with some blocks scaled up, some zero, some
// constant (every quant at +-127 / -128 after quantization).
std::vector<float> make_x(int64_t n, Fill fill, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = normal(rng);
  if (fill == Fill::Extreme) {
    for (int64_t i = 0; i < n; ++i) x[i] = (i / 32) % 3 == 0 ? 0.f : ((i / 32) % 3 == 1 ? 7.5f : -7.5f);
  } else if (fill == Fill::Random) {
    for (int64_t i = 0; i < n; ++i)
      if ((i / 32) % 5 == 1) x[i] *= 1000.f;
  }
  return x;
}

struct Problem {
  DType t;
  int64_t n, rows, stride;
  std::vector<uint8_t> w;
  std::vector<float> x;
  std::vector<uint8_t> act;     // x in vec_dot_type
  std::vector<double> ref_abs;  // sum |w_i * a_i| per row, the error scale
  std::vector<float> ref;       // vec_dot_ref per row
};

Problem make_problem(DType t, int64_t n, int64_t rows, Fill fill, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p{t, n, rows, row_bytes(t, n) + (rows % 2 ? 0 : 64), {}, {}, {}, {}, {}};
  p.w.assign(static_cast<size_t>(p.stride * rows), 0xCD);
  for (int64_t r = 0; r < rows; ++r) fill_row(t, n, fill, rng, p.w.data() + r * p.stride);
  p.x = make_x(n, fill, rng);
  const DType at = type_info(t).vec_dot_type;
  p.act.resize(static_cast<size_t>(row_bytes(at, n)));
  quantize_row_ref(at, p.x.data(), p.act.data(), n);
  std::vector<float> a(n), wr(n);
  dequantize_row_ref(at, p.act.data(), a.data(), n);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row_ref(t, p.w.data() + r * p.stride, wr.data(), n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(wr[i]) * a[i]);
    p.ref_abs.push_back(s);
    p.ref.push_back(vec_dot_ref(t, n, p.w.data() + r * p.stride, p.act.data()));
  }
  return p;
}

// Runs fn on p, output poisoned with NaN and a guard after the last row.
std::vector<float> run_rows(const Problem& p, simd::VecDotRowsFn fn) {
  std::vector<float> out(p.rows + 1, std::numeric_limits<float>::quiet_NaN());
  out[p.rows] = 12345.f;
  fn(p.n, p.w.data(), p.stride, p.rows, p.act.data(), out.data());
  EXPECT_EQ(out[p.rows], 12345.f) << "kernel wrote past the last row";
  out.pop_back();
  return out;
}

void expect_close(const Problem& p, const std::vector<float>& got, const std::string& what) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const double tol = 2e-5 * p.ref_abs[r] + 1e-30;
    ASSERT_TRUE(std::isfinite(got[r])) << what << " row " << r << " not written / not finite: " << got[r];
    ASSERT_NEAR(got[r], p.ref[r], tol) << what << " row " << r << " (sum|w*a| = " << p.ref_abs[r] << ")";
  }
}

std::vector<int64_t> lengths(DType t) {
  switch (type_info(t).block_size) {
    case 256: return {256, 768, 2048, 2048 + 256};
    case 32: return {32, 768, 2048, 2048 + 32};
    default: return {1, 7, 17, 31, 768, 2048, 2051};
  }
}

const DType kFastTypes[] = {DType::Q4_K,  DType::Q5_K,    DType::Q6_K,   DType::Q8_0,    DType::Q4_0,
                            DType::MXFP4, DType::BF16,    DType::F16,    DType::F32,     DType::Q4_1,
                            DType::Q5_0,  DType::Q5_1,    DType::Q2_K,   DType::Q3_K,    DType::TQ1_0,
                            DType::TQ2_0, DType::IQ1_S,   DType::IQ1_M,  DType::IQ2_XXS, DType::IQ2_XS,
                            DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,  DType::IQ4_NL,  DType::IQ4_XS};

using Param = std::tuple<std::string, DType>;

class SimdDot : public ::testing::TestWithParam<Param> {
 protected:
  simd::VecDotRowsFn kernel() {
    const auto& [isa, t] = GetParam();
    if (isa == "avx2") {
      if (!simd::cpu_supports_avx2()) return nullptr;
      return simd::vec_dot_rows_kernel_avx2(t);
    }
    if (!simd::cpu_supports_avx512()) return nullptr;
    return simd::vec_dot_rows_kernel_avx512(t);
  }
};

// One row at a time must give what the multi-row path gives for that row, to
// the last bit (the engine mixes both).
TEST_P(SimdDot, SingleRowsMatchMultiRow) {
  const simd::VecDotRowsFn fn = kernel();
  if (!fn) GTEST_SKIP();
  const auto& [isa, t] = GetParam();
  const Problem p = make_problem(t, lengths(t)[2], 7, Fill::Random, 99);
  const std::vector<float> all = run_rows(p, fn);
  for (int64_t r = 0; r < p.rows; ++r) {
    float one = std::numeric_limits<float>::quiet_NaN();
    fn(p.n, p.w.data() + r * p.stride, p.stride, 1, p.act.data(), &one);
    EXPECT_EQ(one, all[r]) << isa << " " << type_name(t) << " row " << r;
  }
}

std::vector<Param> all_params() {
  std::vector<Param> v;
  for (const char* isa : {"avx2", "avx512"})
    for (DType t : kFastTypes) v.emplace_back(isa, t);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Kernels, SimdDot, ::testing::ValuesIn(all_params()), [](const auto& info) {
  return std::get<0>(info.param) + "_" + type_name(std::get<1>(info.param));
});

// ---------------------------------------------------------------- dispatched

TEST(SimdDispatch, VecDotRowsMatchesReference) {
  for (DType t : kFastTypes) {
    const Problem p = make_problem(t, lengths(t)[1], 5, Fill::Random, 7);
    std::vector<float> out(p.rows, std::numeric_limits<float>::quiet_NaN());
    vec_dot_rows(t, p.n, p.w.data(), p.stride, p.rows, p.act.data(), out.data());
    expect_close(p, out, std::string("dispatched ") + vec_dot_path(t) + " " + type_name(t));
    for (int64_t r = 0; r < p.rows; ++r)
      EXPECT_EQ(vec_dot(t, p.n, p.w.data() + r * p.stride, p.act.data()), out[r]) << type_name(t);
  }
}

TEST(SimdDispatch, PathNamesAKnownLevel) {
  for (DType t : kFastTypes) {
    const std::string path = vec_dot_path(t);
    EXPECT_TRUE(path == "avx512-vnni" || path == "avx512" || path == "avx2" || path == "scalar") << path;
    if (simd::cpu_supports_avx2() && !std::getenv("MOESTREAM_ISA")) EXPECT_NE(path, "scalar") << type_name(t);
  }
}

// A type with no fast path goes to the reference, bit for bit.
TEST(SimdDispatch, TypesWithoutKernelUseReference) {
  const DType t = DType::Q8_K;
  EXPECT_STREQ(vec_dot_path(t), "scalar");
  const Problem p = make_problem(DType::Q8_0, 512, 1, Fill::Random, 3);  // just for x
  std::vector<uint8_t> w(row_bytes(t, 512)), a(row_bytes(t, 512));
  quantize_row_ref(t, p.x.data(), w.data(), 512);
  std::vector<float> x2(p.x.rbegin(), p.x.rend());
  quantize_row_ref(t, x2.data(), a.data(), 512);
  float out[2] = {0.f, 0.f};
  vec_dot_rows(t, 512, w.data(), 0, 2, a.data(), out);
  const float ref = vec_dot_ref(t, 512, w.data(), a.data());
  EXPECT_EQ(out[0], ref);
  EXPECT_EQ(out[1], ref);
}

TEST(SimdDispatch, RejectsPartialBlocks) {
  std::vector<uint8_t> w(1024), a(1024);
  float out = 0;
  EXPECT_THROW(vec_dot_rows(DType::Q4_K, 100, w.data(), 0, 1, a.data(), &out), Error);
  EXPECT_THROW(vec_dot(DType::Q8_0, 33, w.data(), a.data()), Error);
}

}  // namespace
}  // namespace ms
