// quantize_row_act (dispatched) and the ISA activation quantizers must give
// the same bytes as quantize_row_ref: the kernels' results are compared with
// vec_dot_ref on activations from either.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "quant/simd_kernels.h"
#include "util/error.h"

namespace ms {
namespace {

// Inputs that probe the rounding rule: ties at .5 after scaling, zeros, a
// block of one huge value, denormals, infinities and NaNs, all-negative
// blocks, tiny amax (d subnormal, 1/d infinite), and plain random ones.
std::vector<std::vector<float>> probe_rows(int64_t n) {
  std::vector<std::vector<float>> rows;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> ui(-300, 300);
  auto add = [&](auto gen) {
    std::vector<float> r(n);
    for (int64_t i = 0; i < n; ++i) r[i] = gen(i);
    rows.push_back(r);
  };
  add([&](int64_t) { return nd(rng); });
  add([&](int64_t) { return nd(rng) * 1e-3f; });
  add([&](int64_t) { return nd(rng) * 3e4f; });
  add([&](int64_t) { return 0.f; });
  add([&](int64_t i) { return (i % 32 == 7) ? 127.f : static_cast<float>(ui(rng)) * 0.5f; });  // ties
  add([&](int64_t i) { return (i % 256 == 0) ? 254.f : static_cast<float>(ui(rng) % 127) + 0.5f; });
  add([&](int64_t i) { return i % 3 ? -std::fabs(nd(rng)) : -1e-30f; });
  add([&](int64_t i) { return std::ldexp(nd(rng), -140 + static_cast<int>(i % 16)); });  // denormal-ish
  add([&](int64_t i) { return i % 32 == 5 ? 1e-44f : 0.f; });                         // d subnormal
  add([&](int64_t i) { return i % 37 == 3 ? std::numeric_limits<float>::quiet_NaN() : nd(rng); });
  add([&](int64_t i) { return i % 97 == 1 ? std::numeric_limits<float>::infinity() : nd(rng); });
  add([&](int64_t i) { return i % 41 == 2 ? -std::numeric_limits<float>::infinity() : 1e38f * nd(rng); });
  return rows;
}

void expect_same_bytes(DType at, simd::QuantizeActFn fn, const std::string& what) {
  for (int64_t n : {256, 768, 2048 + 256}) {
    int k = 0;
    for (const auto& x : probe_rows(n)) {
      const int64_t bytes = row_bytes(at, n);
      std::vector<uint8_t> ref(bytes, 0xAA), got(bytes, 0x55);
      quantize_row_ref(at, x.data(), ref.data(), n);
      if (fn) {
        fn(x.data(), got.data(), n);
      } else {
        quantize_row_act(at, x.data(), got.data(), n);
      }
      int64_t first = -1;
      for (int64_t i = 0; i < bytes && first < 0; ++i)
        if (ref[i] != got[i]) first = i;
      EXPECT_EQ(first, -1) << what << " " << type_name(at) << " n=" << n << " probe " << k
                           << ": first differing byte " << first;
      ++k;
    }
  }
}

TEST(SimdQuantize, DispatchedMatchesReferenceBitForBit) {
  for (DType at : {DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::F32})
    expect_same_bytes(at, nullptr, "quantize_row_act");
}

TEST(SimdQuantize, Avx2MatchesReferenceBitForBit) {
  if (!simd::cpu_supports_avx2()) GTEST_SKIP() << "no AVX2";
  int tested = 0;
  for (DType at : {DType::Q8_0, DType::Q8_1, DType::Q8_K}) {
    if (simd::QuantizeActFn fn = simd::quantize_act_kernel_avx2(at)) {
      expect_same_bytes(at, fn, "avx2");
      ++tested;
    }
  }
  EXPECT_GE(tested, 2) << "Q8_0 and Q8_K have AVX2 quantizers";
}

TEST(SimdQuantize, Avx512MatchesReferenceBitForBit) {
  if (!simd::cpu_supports_avx512()) GTEST_SKIP() << "no AVX-512";
  for (DType at : {DType::Q8_0, DType::Q8_1, DType::Q8_K})
    if (simd::QuantizeActFn fn = simd::quantize_act_kernel_avx512(at)) expect_same_bytes(at, fn, "avx512");
}

TEST(SimdQuantize, RejectsWeightFormatsAndPartialBlocks) {
  std::vector<float> x(512, 1.f);
  std::vector<uint8_t> out(4096);
  EXPECT_THROW(quantize_row_act(DType::Q4_K, x.data(), out.data(), 256), Error);
  EXPECT_THROW(quantize_row_act(DType::Q8_K, x.data(), out.data(), 300), Error);
  EXPECT_THROW(quantize_row_act(DType::Q8_0, x.data(), out.data(), 40), Error);
}

}  // namespace
}  // namespace ms
