// The ternary and IQ block layouts on hand-built blocks: each test sets a few
// fields of one block and checks the elements they define against the
// format's equation (blocks.h), so a field read from the wrong place or in
// the wrong order fails. The grid tables themselves are checked through the
// gguf-py fixtures (ggufpy_fixture_test.cpp). Then the quantizers: values a
// format holds exactly come back exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/iq_grids.h"
#include "quant/quant.h"

namespace ms {
namespace {

template <typename Block>
std::vector<float> dequant(const Block& b, DType t) {
  std::vector<float> y(static_cast<size_t>(type_info(t).block_size), NAN);
  dequantize_row_ref(t, &b, y.data(), static_cast<int64_t>(y.size()));
  return y;
}

int byte_of(uint64_t entry, int j) { return static_cast<int>((entry >> (8 * j)) & 0xFF); }

// TQ1_0 byte holding base-3 digits d[0..4], most significant first.
uint8_t trit_byte(const int* d) {
  int v = 0;
  for (int k = 0; k < 5; ++k) v = 3 * v + d[k];
  return static_cast<uint8_t>((v * 256 + 242) / 243);
}

TEST(IqLayout, TQ2_0) {
  BlockTQ2_0 b{};
  b.d = f32_to_f16(0.5f);
  b.qs[32 + 5] = static_cast<uint8_t>(2 | (0 << 2) | (1 << 4) | (3 << 6));
  const auto y = dequant(b, DType::TQ2_0);
  EXPECT_EQ(y[128 + 5], 0.5f);
  EXPECT_EQ(y[128 + 32 + 5], -0.5f);
  EXPECT_EQ(y[128 + 64 + 5], 0.0f);
  EXPECT_EQ(y[128 + 96 + 5], 1.0f);
  EXPECT_EQ(y[0], -0.5f);  // field 0 is level -1
}

TEST(IqLayout, TQ1_0) {
  BlockTQ1_0 b{};
  b.d = f32_to_f16(1.0f);
  const int a[5] = {2, 0, 1, 1, 2}, c[5] = {0, 1, 2, 0, 1}, h[5] = {1, 2, 0, 2, 0};
  b.qs[7] = trit_byte(a);
  b.qs[32 + 3] = trit_byte(c);
  b.qh[2] = trit_byte(h);
  const auto y = dequant(b, DType::TQ1_0);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(y[32 * k + 7], a[k] - 1) << k;
  for (int k = 0; k < 5; ++k) EXPECT_EQ(y[160 + 16 * k + 3], c[k] - 1) << k;
  for (int k = 0; k < 4; ++k) EXPECT_EQ(y[240 + 4 * k + 2], h[k] - 1) << k;
  EXPECT_EQ(y[8], -1.0f);  // a zero byte is all digits 0
}

TEST(IqLayout, IQ2_XXS) {
  BlockIQ2_XXS b{};
  b.d = f32_to_f16(1.0f);
  // Sub-block 3: grid index of group 2 is byte 2 of the u32 qs[12..13]; the
  // u32 qs[14..15] holds the scale (top 4 bits) and group 2's sign index at bit 14.
  b.qs[13] = 7;
  const uint32_t aux = (5u << 28) | (3u << 14);
  b.qs[14] = static_cast<uint16_t>(aux);
  b.qs[15] = static_cast<uint16_t>(aux >> 16);
  const auto y = dequant(b, DType::IQ2_XXS);
  const float db = 1.0f * (0.5f + 5) * 0.25f;
  for (int j = 0; j < 8; ++j)
    EXPECT_EQ(y[96 + 16 + j], db * byte_of(kIQ2XXSGrid[7], j) * (j < 2 ? -1.f : 1.f)) << j;
  EXPECT_EQ(y[96], db * byte_of(kIQ2XXSGrid[0], 0));  // group 0: index 0, no signs
}

TEST(IqLayout, IQ2_XS) {
  BlockIQ2_XS b{};
  b.d = f32_to_f16(1.0f);
  b.qs[13] = static_cast<uint16_t>(300 | (1 << 9));  // group 13 (sub-block 3, l = 1): sign index 1 -> 0x81
  b.scales[3] = 0x72;                                // groups 0,1 of sub-block 3: 2; groups 2,3: 7
  const auto y = dequant(b, DType::IQ2_XS);
  for (int j = 0; j < 8; ++j)
    EXPECT_EQ(y[104 + j], (0.5f + 2) * 0.25f * byte_of(kIQ2XSGrid[300], j) * (j == 0 || j == 7 ? -1.f : 1.f)) << j;
  EXPECT_EQ(y[112], (0.5f + 7) * 0.25f * byte_of(kIQ2XSGrid[0], 0));
}

TEST(IqLayout, IQ2_S) {
  BlockIQ2_S b{};
  b.d = f32_to_f16(1.0f);
  b.qs[13] = 0x34;          // group 13: low 8 bits of the index
  b.qh[3] = 2 << 2;         // its bits 8..9 (l = 1 -> bits 2..3 of qh[3])
  b.qs[32 + 13] = 0x05;     // its sign byte: elements 0 and 2 negative
  b.scales[3] = 0x27;
  const auto y = dequant(b, DType::IQ2_S);
  for (int j = 0; j < 8; ++j)
    EXPECT_EQ(y[104 + j], (0.5f + 7) * 0.25f * byte_of(kIQ2SGrid[0x234], j) * (j == 0 || j == 2 ? -1.f : 1.f)) << j;
}

TEST(IqLayout, IQ3_XXS) {
  BlockIQ3_XXS b{};
  b.d = f32_to_f16(1.0f);
  b.qs[8 * 2 + 6] = 200;  // sub-block 2, group 3: two 4-wide grid entries
  b.qs[8 * 2 + 7] = 17;
  const uint32_t aux = (9u << 28) | (0x7Fu << 21);  // sign index 127: odd count, so all 8 negative
  std::memcpy(b.qs + 64 + 4 * 2, &aux, 4);
  const auto y = dequant(b, DType::IQ3_XXS);
  const float db = 1.0f * (0.5f + 9) * 0.5f;
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(y[64 + 24 + j], -db * byte_of(kIQ3XXSGrid[200], j)) << j;
    EXPECT_EQ(y[64 + 28 + j], -db * byte_of(kIQ3XXSGrid[17], j)) << j;
  }
}

TEST(IqLayout, IQ3_S) {
  BlockIQ3_S b{};
  b.d = f32_to_f16(1.0f);
  b.qs[42] = 10;           // index numbers 42, 43: sub-block 5, group 1
  b.qs[43] = 20;
  b.qh[5] = 1 << 2;        // 9th bit of index number 42 (bit 42 % 8)
  b.signs[4 * 5 + 1] = 0x10;
  b.scales[2] = 0x60;      // sub-block 5: high nibble of scales[2]
  const auto y = dequant(b, DType::IQ3_S);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(y[168 + j], 13.0f * byte_of(kIQ3SGrid[256 + 10], j)) << j;
    EXPECT_EQ(y[172 + j], 13.0f * byte_of(kIQ3SGrid[20], j) * (j == 0 ? -1.f : 1.f)) << j;
  }
}

TEST(IqLayout, IQ1_S) {
  BlockIQ1_S b{};
  b.d = f32_to_f16(1.0f);
  b.qs[4 * 6 + 1] = 0x42;
  b.qh[6] = static_cast<uint16_t>(0x8000 | (4 << 12) | (5 << 3));  // delta -, scale 4, group 1's high bits 5
  const auto y = dequant(b, DType::IQ1_S);
  for (int j = 0; j < 8; ++j)
    EXPECT_EQ(y[192 + 8 + j], 9.0f * (static_cast<int8_t>(byte_of(kIQ1SGrid[0x542], j)) - 0.125f)) << j;
  EXPECT_EQ(y[192], 9.0f * (static_cast<int8_t>(byte_of(kIQ1SGrid[0], 0)) - 0.125f));
}

TEST(IqLayout, IQ1_M) {
  BlockIQ1_M b{};
  const uint16_t d = f32_to_f16(0.5f);
  uint16_t sc[4] = {};
  for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>(((d >> (4 * k)) & 0xF) << 12);
  sc[2] = static_cast<uint16_t>(sc[2] | (3 << 6) | (6 << 9));  // sub-block 5: scales 3 (groups 0,1), 6 (groups 2,3)
  std::memcpy(b.scales, sc, 8);
  b.qs[4 * 5 + 2] = 0x99;
  b.qh[2 * 5 + 1] = 0x0B;  // group 2 of sub-block 5: low nibble: high index bits 3, delta sign set
  const auto y = dequant(b, DType::IQ1_M);
  for (int j = 0; j < 8; ++j)
    EXPECT_EQ(y[160 + 16 + j], 0.5f * 13 * (static_cast<int8_t>(byte_of(kIQ1SGrid[0x399], j)) - 0.125f)) << j;
  EXPECT_EQ(y[160], 0.5f * 7 * (static_cast<int8_t>(byte_of(kIQ1SGrid[0], 0)) + 0.125f));
}

TEST(IqLayout, IQ4_NL) {
  BlockIQ4_NL b{};
  b.d = f32_to_f16(2.0f);
  b.qs[3] = 0xA1;
  const auto y = dequant(b, DType::IQ4_NL);
  EXPECT_EQ(y[3], 2.0f * -104);
  EXPECT_EQ(y[19], 2.0f * 25);
  EXPECT_EQ(y[0], 2.0f * -127);
}

TEST(IqLayout, IQ4_XS) {
  BlockIQ4_XS b{};
  b.d = f32_to_f16(0.25f);
  b.scales_l[2] = 0x90;                               // sub-block 5: high nibble 9
  b.scales_h = static_cast<uint16_t>(2 << 10);        // its top bits: 2 -> scale 41 - 32 = 9
  b.qs[16 * 5 + 4] = 0x3F;
  const auto y = dequant(b, DType::IQ4_XS);
  EXPECT_EQ(y[160 + 4], 0.25f * 9 * 113);
  EXPECT_EQ(y[160 + 20], 0.25f * 9 * -65);
  EXPECT_EQ(y[0], 0.25f * -32 * -127);  // scale field 0 -> -32
}

}  // namespace
}  // namespace ms

// ---------------------------------------------------------------- quantizers
// Values the format can hold exactly come back exactly.

namespace ms {
namespace {

TEST(IqQuantize, TernaryValuesRoundTripExactly) {
  std::mt19937 rng(3);
  std::vector<float> x(512);
  for (float& v : x) v = 0.25f * static_cast<float>(static_cast<int>(rng() % 3) - 1);
  x[7] = 0.25f;  // every block has a non-zero value (the scale)
  x[300] = -0.25f;
  for (DType t : {DType::TQ1_0, DType::TQ2_0}) {
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, 512)));
    quantize_row_ref(t, x.data(), q.data(), 512);
    std::vector<float> y(512, NAN);
    dequantize_row_ref(t, q.data(), y.data(), 512);
    for (int i = 0; i < 512; ++i) ASSERT_EQ(y[i], x[i]) << type_name(t) << " " << i;
  }
}

TEST(IqQuantize, IQ4LevelsRoundTripExactly) {
  std::mt19937 rng(4);
  std::vector<float> x(256);
  for (float& v : x) v = 0.5f * kIQ4NLValues[rng() % 16];
  for (int b = 0; b < 8; ++b) x[32 * b] = 0.5f * -127;  // the largest magnitude on the long end
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(DType::IQ4_NL, 256)));
  quantize_row_ref(DType::IQ4_NL, x.data(), q.data(), 256);
  std::vector<float> y(256, NAN);
  dequantize_row_ref(DType::IQ4_NL, q.data(), y.data(), 256);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], x[i]) << i;
}

// Groups that are grid points (with random signs) at a scale the format
// stores exactly (d = 1/64, s = 15: d * 31 / 8) come back exactly: the scale
// scan tries max-abs / 43 itself, and on-grid groups snap to themselves.
TEST(IqQuantize, GridPointsRoundTripExactly) {
  std::vector<uint64_t> top;  // IQ2_S entries that reach the top level 43
  for (int i = 0; i < kIQ2SGridSize; ++i)
    for (int j = 0; j < 8; ++j)
      if (((kIQ2SGrid[i] >> (8 * j)) & 0xFF) == 43) {
        top.push_back(kIQ2SGrid[i]);
        break;
      }
  ASSERT_FALSE(top.empty());
  std::mt19937 rng(5);
  const float dl = (1.0f / 64) * 31 * 0.125f;
  std::vector<float> x(512);
  for (int g = 0; g < 64; ++g) {
    const uint64_t e = top[rng() % top.size()];
    for (int j = 0; j < 8; ++j)
      x[8 * g + j] = dl * static_cast<float>((e >> (8 * j)) & 0xFF) * (rng() % 2 ? -1.f : 1.f);
  }
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(DType::IQ2_S, 512)));
  quantize_row_ref(DType::IQ2_S, x.data(), q.data(), 512);
  std::vector<float> y(512, NAN);
  dequantize_row_ref(DType::IQ2_S, q.data(), y.data(), 512);
  for (int i = 0; i < 512; ++i) ASSERT_EQ(y[i], x[i]) << i;
}

}  // namespace
}  // namespace ms
