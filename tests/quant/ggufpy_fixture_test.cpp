// dequantize_row_ref against gguf-py's numpy dequantizers (llama.cpp's Python
// package), bit for bit, on random blocks of every quantized type: fixtures
// written by tools/quant_fixtures/make_fixtures.py, fetched by
// scripts/fetch_quant_fixtures.sh into tools/quant_fixtures/out/fixtures.
// Without them the test skips, saying how to get them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "quant/types.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

fs::path fixture_dir() { return fs::path(MS_SOURCE_DIR) / "tools" / "quant_fixtures" / "out" / "fixtures"; }

bool read_file(const fs::path& p, std::vector<uint8_t>& out) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

class GgufPyFixture : public ::testing::TestWithParam<DType> {};

TEST_P(GgufPyFixture, DequantMatchesBitForBit) {
  const DType t = GetParam();
  const std::string name = type_name(t);
  std::vector<uint8_t> blocks, floats;
  if (!read_file(fixture_dir() / (name + ".blocks"), blocks) || !read_file(fixture_dir() / (name + ".f32"), floats))
    GTEST_SKIP() << "no gguf-py fixtures for " << name << " in " << fixture_dir()
                 << ": run scripts/fetch_quant_fixtures.sh";
  ASSERT_EQ(floats.size() % 4, 0u);
  const int64_t n = static_cast<int64_t>(floats.size() / 4);
  ASSERT_EQ(static_cast<int64_t>(blocks.size()), row_bytes(t, n)) << name << ": fixture sizes disagree";
  std::vector<float> got(n);
  std::memset(got.data(), 0xFF, got.size() * sizeof(float));  // poisoned (NaN)
  dequantize_row_ref(t, blocks.data(), got.data(), n);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t want_bits, got_bits;
    std::memcpy(&want_bits, floats.data() + 4 * i, 4);
    std::memcpy(&got_bits, &got[i], 4);
    if (want_bits != got_bits && ++mismatches <= 5) {
      float want;
      std::memcpy(&want, &want_bits, 4);
      ADD_FAILURE() << name << " element " << i << " (block " << i / type_info(t).block_size << "): gguf-py "
                    << want << " (0x" << std::hex << want_bits << "), moestream " << got[i] << " (0x" << got_bits
                    << std::dec << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << n << " elements differ";
  // The dispatched dequantization is the same function today; keep it honest.
  std::vector<float> fast(n, 0.0f);
  dequantize_row(t, blocks.data(), fast.data(), n);
  EXPECT_EQ(std::memcmp(fast.data(), got.data(), got.size() * sizeof(float)), 0) << name;
}

const DType kFixtureTypes[] = {
    DType::Q4_0,    DType::Q4_1,   DType::Q5_0,  DType::Q5_1,    DType::Q8_0,  DType::Q2_K,   DType::Q3_K,
    DType::Q4_K,    DType::Q5_K,   DType::Q6_K,  DType::MXFP4,   DType::TQ1_0, DType::TQ2_0,  DType::IQ1_S,
    DType::IQ1_M,   DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S, DType::IQ4_NL,
    DType::IQ4_XS,
};

INSTANTIATE_TEST_SUITE_P(All, GgufPyFixture, ::testing::ValuesIn(kFixtureTypes),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(type_name(info.param)); });

}  // namespace
}  // namespace ms
