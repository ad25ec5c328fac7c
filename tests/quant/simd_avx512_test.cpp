// The AVX-512 kernels of the formats added after the first AVX-512 set
// (simd_legacy_avx512.cpp, simd_iquants_avx512.cpp), beyond what
// simd_dot_test.cpp checks for every kernel:
// - every type with an AVX2 kernel has an AVX-512 one, and the dispatcher
//   picks it on an AVX-512 VNNI CPU;
// - activations over their whole allowed range (Q8_K down to -128 for the K
//   formats, which the lane-width reasoning of the kernels depends on), odd
//   block counts and row counts, against vec_dot_ref and the AVX2 kernel;
// - no kernel reads past the last byte of its rows or of the activations
//   (the rows end right before an inaccessible page).
// The AVX-512 cases skip on a CPU without AVX-512 VNNI; the AVX2 kernels run
// through the same checks where the CPU has AVX2.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/simd_kernels.h"

namespace ms {
namespace {

const DType kNewTypes[] = {DType::Q4_1,   DType::Q5_0,   DType::Q5_1,  DType::IQ4_NL,  DType::Q2_K,
                           DType::Q3_K,   DType::TQ1_0,  DType::TQ2_0, DType::IQ1_S,   DType::IQ1_M,
                           DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,
                           DType::IQ4_XS};

simd::VecDotRowsFn kernel(const std::string& isa, DType t) {
  if (isa == "avx2") return simd::cpu_supports_avx2() ? simd::vec_dot_rows_kernel_avx2(t) : nullptr;
  return simd::cpu_supports_avx512() ? simd::vec_dot_rows_kernel_avx512(t) : nullptr;
}

// Offsets of a block's f16 scale fields (everything else: any bit pattern).
std::vector<int> f16_fields(DType t) {
  switch (t) {
    case DType::Q5_0: case DType::IQ4_NL: case DType::IQ1_S: case DType::IQ2_XXS: case DType::IQ2_XS:
    case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S: case DType::IQ4_XS: return {0};
    case DType::Q4_1: case DType::Q5_1: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::TQ1_0: return {52};
    case DType::TQ2_0: return {64};
    default: return {};  // IQ1_M: the scale's nibbles are spread over the scale words
  }
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Random weight bytes with finite scales; every `max_every`-th block all 0xFF
// (every code and packed scale at its maximum).
void fill_weights(DType t, int64_t n, std::mt19937& rng, uint8_t* row) {
  const TypeInfo& info = type_info(t);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (int64_t b = 0; b < n / info.block_size; ++b) {
    uint8_t* blk = row + b * info.type_size;
    const bool max = b % 5 == 3;
    for (int64_t k = 0; k < info.type_size; ++k) blk[k] = max ? 0xFF : static_cast<uint8_t>(byte(rng));
    for (int off : f16_fields(t)) put_f16(blk + off, scale(rng));
    if (t == DType::IQ1_M) {
      const uint16_t h = f32_to_f16(scale(rng));
      for (int k = 0; k < 4; ++k) blk[49 + 2 * k] = static_cast<uint8_t>((blk[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
    }
  }
}

// Activations in type at (Q8_0, Q8_1 or Q8_K) built directly, quants over
// the whole range the kernels accept: [lo, 127], with blocks all at lo and
// all at 127 among random ones. Sums (Q8_1's s, Q8_K's bsums) consistent.
void fill_acts(DType at, int64_t n, int lo, std::mt19937& rng, uint8_t* dst) {
  std::uniform_int_distribution<int> q(lo, 127);
  std::uniform_real_distribution<float> d(0.001f, 0.02f);
  const int64_t bs = type_info(at).block_size, nb = n / bs;
  for (int64_t b = 0; b < nb; ++b) {
    int8_t qs[QK_K];
    for (int64_t k = 0; k < bs; ++k) qs[k] = static_cast<int8_t>(b % 4 == 1 ? lo : (b % 4 == 2 ? 127 : q(rng)));
    const float scale = d(rng);
    if (at == DType::Q8_K) {
      auto* blk = reinterpret_cast<BlockQ8_K*>(dst) + b;
      blk->d = scale;
      std::memcpy(blk->qs, qs, QK_K);
      for (int j = 0; j < QK_K / 16; ++j) {
        int s = 0;
        for (int k = 0; k < 16; ++k) s += qs[16 * j + k];
        blk->bsums[j] = static_cast<int16_t>(s);
      }
    } else if (at == DType::Q8_1) {
      auto* blk = reinterpret_cast<BlockQ8_1*>(dst) + b;
      int s = 0;
      for (int k = 0; k < QK; ++k) s += qs[k];
      blk->d = f32_to_f16(scale);
      blk->s = f32_to_f16(f16_to_f32(blk->d) * static_cast<float>(s));
      std::memcpy(blk->qs, qs, QK);
    } else {
      auto* blk = reinterpret_cast<BlockQ8_0*>(dst) + b;
      blk->d = f32_to_f16(scale);
      std::memcpy(blk->qs, qs, QK);
    }
  }
}

// The lowest activation quant the kernels of t accept (simd_kernels.h).
int act_min(DType t) { return type_info(t).vec_dot_type == DType::Q8_K && (t == DType::Q2_K || t == DType::Q3_K) ? -128 : -127; }

// sum |w_i a_i| of one row: the scale of the float rounding error.
double abs_dot(DType t, int64_t n, const uint8_t* w, const uint8_t* a) {
  std::vector<float> wf(n), af(n);
  dequantize_row_ref(t, w, wf.data(), n);
  dequantize_row_ref(type_info(t).vec_dot_type, a, af.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(wf[i]) * af[i]);
  return s;
}

TEST(Avx512Kernels, EveryTypeWithAnAvx2KernelHasOne) {
  for (uint32_t id = 0; id < 64; ++id) {
    const TypeInfo* info = type_info(id);
    if (!info || !simd::vec_dot_rows_kernel_avx2(info->type)) continue;
    EXPECT_NE(simd::vec_dot_rows_kernel_avx512(info->type), nullptr) << info->name;
  }
}

TEST(Avx512Kernels, DispatcherPicksThemOnAvx512VnniCpus) {
  if (!simd::cpu_supports_avx512()) GTEST_SKIP() << "this CPU lacks AVX-512 VNNI";
  if (std::getenv("MOESTREAM_ISA")) GTEST_SKIP() << "MOESTREAM_ISA caps the dispatcher";
  for (DType t : kNewTypes) EXPECT_STREQ(vec_dot_path(t), "avx512-vnni") << type_name(t);
}

class IsaKernel : public ::testing::TestWithParam<std::string> {};

// Full-range activations, odd block and row counts, padded strides, poisoned
// outputs: each row within float rounding of vec_dot_ref.
TEST_P(IsaKernel, FullRangeActivationsMatchReference) {
  const std::string isa = GetParam();
  int ran = 0;
  uint32_t seed = 11;
  for (DType t : kNewTypes) {
    const simd::VecDotRowsFn fn = kernel(isa, t);
    if (!fn) continue;
    ++ran;
    const int64_t bs = type_info(t).block_size;
    const DType at = type_info(t).vec_dot_type;
    for (int64_t nb : {1, 3, 8, 9}) {
      const int64_t n = nb * bs;
      for (int64_t rows : {1, 2, 5, 8}) {
        std::mt19937 rng(seed++);
        const int64_t stride = row_bytes(t, n) + 3 * (rows % 2);
        std::vector<uint8_t> w(stride * rows, 0xCD), a(row_bytes(at, n));
        for (int64_t r = 0; r < rows; ++r) fill_weights(t, n, rng, w.data() + r * stride);
        fill_acts(at, n, act_min(t), rng, a.data());
        std::vector<float> out(rows + 1, std::numeric_limits<float>::quiet_NaN());
        out[rows] = -7.f;
        fn(n, w.data(), stride, rows, a.data(), out.data());
        EXPECT_EQ(out[rows], -7.f) << isa << " " << type_name(t) << " wrote past the last row";
        for (int64_t r = 0; r < rows; ++r) {
          const uint8_t* wr = w.data() + r * stride;
          const float ref = vec_dot_ref(t, n, wr, a.data());
          const double tol = 2e-5 * abs_dot(t, n, wr, a.data()) + 1e-30;
          ASSERT_TRUE(std::isfinite(out[r])) << isa << " " << type_name(t) << " row " << r;
          ASSERT_NEAR(out[r], ref, tol) << isa << " " << type_name(t) << " n=" << n << " rows=" << rows << " row " << r;
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "this CPU lacks " << isa;
}

// Rows and activations that end right before an inaccessible page: a kernel
// that loads past either end faults (the test dies) instead of passing.
TEST_P(IsaKernel, ReadsNothingPastRowsOrActivations) {
  const std::string isa = GetParam();
  const long page = sysconf(_SC_PAGESIZE);
  int ran = 0;
  for (DType t : kNewTypes) {
    const simd::VecDotRowsFn fn = kernel(isa, t);
    if (!fn) continue;
    ++ran;
    const int64_t n = 3 * type_info(t).block_size;  // odd block count: the 32-element formats' tail path
    const DType at = type_info(t).vec_dot_type;
    const int64_t rows = 3, wbytes = rows * row_bytes(t, n), abytes = row_bytes(at, n);
    const size_t span = static_cast<size_t>(((wbytes + abytes) / page + 2) * page);
    auto* base = static_cast<uint8_t*>(mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(base, MAP_FAILED);
    ASSERT_EQ(mprotect(base + span, page, PROT_NONE), 0);
    uint8_t* w = base + span - wbytes;  // the weights end at the guard page
    std::mt19937 rng(5);
    for (int64_t r = 0; r < rows; ++r) fill_weights(t, n, rng, w + r * row_bytes(t, n));
    // The activations end at the guard page in a second run.
    std::vector<uint8_t> a(abytes);
    fill_acts(at, n, act_min(t), rng, a.data());
    float out1[rows], out2[rows];
    fn(n, w, row_bytes(t, n), rows, a.data(), out1);
    uint8_t* a_end = base + span - abytes;
    std::vector<uint8_t> w_copy(w, w + wbytes);
    std::memcpy(base, w_copy.data(), wbytes);
    std::memcpy(a_end, a.data(), abytes);
    fn(n, base, row_bytes(t, n), rows, a_end, out2);
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(out1[r], out2[r]) << isa << " " << type_name(t) << " row " << r;
    munmap(base, span + page);
  }
  if (ran == 0) GTEST_SKIP() << "this CPU lacks " << isa;
}

INSTANTIATE_TEST_SUITE_P(Isa, IsaKernel, ::testing::Values("avx2", "avx512"),
                         [](const auto& info) { return info.param; });

// The AVX-512 and AVX2 kernels on the same rows: the integer sums are exact
// in both, so they differ only by float summation order.
TEST(Avx512Kernels, AgreeWithAvx2Kernels) {
  if (!simd::cpu_supports_avx512()) GTEST_SKIP() << "this CPU lacks AVX-512 VNNI";
  std::mt19937 rng(77);
  for (DType t : kNewTypes) {
    const int64_t n = 8 * type_info(t).block_size * (type_info(t).block_size == QK ? 8 : 1) + type_info(t).block_size;
    const DType at = type_info(t).vec_dot_type;
    const int64_t rows = 7, stride = row_bytes(t, n);
    std::vector<uint8_t> w(stride * rows), a(row_bytes(at, n));
    for (int64_t r = 0; r < rows; ++r) fill_weights(t, n, rng, w.data() + r * stride);
    fill_acts(at, n, act_min(t), rng, a.data());
    float o2[rows], o5[rows];
    simd::vec_dot_rows_kernel_avx2(t)(n, w.data(), stride, rows, a.data(), o2);
    simd::vec_dot_rows_kernel_avx512(t)(n, w.data(), stride, rows, a.data(), o5);
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_NEAR(o5[r], o2[r], 2e-5 * abs_dot(t, n, w.data() + r * stride, a.data()) + 1e-30) << type_name(t) << " row " << r;
  }
}

}  // namespace
}  // namespace ms
