// Bit-exact dequantization of hand-built blocks: each block is written byte by
// byte from the documented GGUF layout, and the expected floats are worked out
// here from that layout (not by calling the code under test). These tests are
// what guards the layouts: a file written by llama.cpp's tools must decode to
// the same numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/quant.h"

namespace ms {
namespace {

constexpr uint16_t kHalfOne = 0x3C00;     // 1.0
constexpr uint16_t kHalfTwo = 0x4000;     // 2.0
constexpr uint16_t kHalfHalf = 0x3800;    // 0.5
constexpr uint16_t kHalfMinusOne = 0xBC00;  // -1.0

template <typename Block>
std::vector<float> dequant(DType t, const Block& b, int n) {
  std::vector<float> y(n, -12345.0f);  // poisoned: every element must be written
  dequantize_row_ref(t, &b, y.data(), n);
  return y;
}

template <typename Block>
Block zeroed() {
  Block b;
  std::memset(&b, 0, sizeof b);
  return b;
}

TEST(RefLayout, Q8_0) {
  auto b = zeroed<BlockQ8_0>();
  b.d = kHalfHalf;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);  // -128..120
  const auto y = dequant(DType::Q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * (j * 8 - 128)) << j;
}

TEST(RefLayout, Q8_1IgnoresSumWhenDequantizing) {
  auto b = zeroed<BlockQ8_1>();
  b.d = kHalfTwo;
  b.s = 0x7BFF;  // a large, wrong sum: dequant must not use it
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  const auto y = dequant(DType::Q8_1, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 2.0f * (j - 16)) << j;
}

TEST(RefLayout, Q4_0LowNibbleIsFirstHalf) {
  auto b = zeroed<BlockQ4_0>();
  b.d = kHalfTwo;
  for (int j = 0; j < 16; ++j) b.qs[j] = 0x88;  // both nibbles 8 -> 0
  b.qs[0] = 0x1F;  // element 0: 15-8 = 7 -> 14; element 16: 1-8 = -7 -> -14
  b.qs[3] = 0x70;  // element 3: 0-8 -> -16; element 19: 7-8 -> -2
  const auto y = dequant(DType::Q4_0, b, 32);
  std::vector<float> want(32, 0.0f);
  want[0] = 14;
  want[16] = -14;
  want[3] = -16;
  want[19] = -2;
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], want[j]) << j;
}

TEST(RefLayout, Q4_1) {
  auto b = zeroed<BlockQ4_1>();
  b.d = kHalfOne;
  b.m = kHalfMinusOne;
  b.qs[0] = 0x52;  // element 0: 2*1-1 = 1; element 16: 5-1 = 4
  b.qs[15] = 0xF0; // element 15: 0-1 = -1; element 31: 15-1 = 14
  const auto y = dequant(DType::Q4_1, b, 32);
  std::vector<float> want(32, -1.0f);
  want[0] = 1;
  want[16] = 4;
  want[31] = 14;
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], want[j]) << j;
}

TEST(RefLayout, Q5_0FifthBitIsBitJOfLittleEndianQh) {
  auto b = zeroed<BlockQ5_0>();
  b.d = kHalfOne;
  // qh as a little-endian u32 = 0x80010001: bits 0, 16, 31 set.
  b.qh[0] = 0x01;
  b.qh[2] = 0x01;
  b.qh[3] = 0x80;
  b.qs[0] = 0x3A;   // element 0: 10 | 16 = 26 -> 10; element 16: 3 | 16 = 19 -> 3
  b.qs[15] = 0xF0;  // element 15: 0 -> -16; element 31: 15 | 16 = 31 -> 15
  const auto y = dequant(DType::Q5_0, b, 32);
  std::vector<float> want(32, -16.0f);
  want[0] = 10;
  want[16] = 3;
  want[31] = 15;
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], want[j]) << j;
}

TEST(RefLayout, Q5_1) {
  auto b = zeroed<BlockQ5_1>();
  b.d = kHalfHalf;
  b.m = kHalfOne;
  b.qh[1] = 0x02;  // bit 9 -> element 9
  b.qs[9] = 0x21;  // element 9: (1|16)*0.5+1 = 9.5; element 25: 2*0.5+1 = 2
  const auto y = dequant(DType::Q5_1, b, 32);
  std::vector<float> want(32, 1.0f);
  want[9] = 9.5f;
  want[25] = 2.0f;
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], want[j]) << j;
}

TEST(RefLayout, MXFP4E2M1ValuesAndE8M0Scale) {
  // E2M1: sign bit 3, exponent bits 1-2, mantissa bit 0.
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  auto b = zeroed<BlockMXFP4>();
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const float scales[][2] = {{127, 1.0f}, {128, 2.0f}, {125, 0.25f}, {0, 0x1p-127f}, {1, 0x1p-126f}, {200, 0x1p73f}};
  for (const auto& [e, scale] : scales) {
    b.e = static_cast<uint8_t>(e);
    const auto y = dequant(DType::MXFP4, b, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], e2m1[j] * scale) << "e=" << e << " j=" << j;
      EXPECT_EQ(y[j + 16], e2m1[15 - j] * scale) << "e=" << e << " j=" << j + 16;
    }
  }
}

TEST(RefLayout, Q8_K) {
  auto b = zeroed<BlockQ8_K>();
  b.d = 0.25f;
  for (int l = 0; l < 256; ++l) b.qs[l] = static_cast<int8_t>(l - 128);
  b.bsums[0] = 999;  // not used by dequant
  const auto y = dequant(DType::Q8_K, b, 256);
  for (int l = 0; l < 256; ++l) EXPECT_EQ(y[l], 0.25f * (l - 128)) << l;
}

// Q4_K / Q5_K scales: 8 six-bit scales sc[] and mins mn[] in 12 bytes.
//   bytes 0-3:  sc[k] (bits 0-5) | top 2 bits of sc[k+4] (bits 6-7)
//   bytes 4-7:  mn[k] (bits 0-5) | top 2 bits of mn[k+4] (bits 6-7)
//   bytes 8-11: low 4 bits of sc[k+4] | low 4 bits of mn[k+4] << 4
// for sc = {1, 2, 3, 63, 17, 33, 48, 5}, mn = {0, 4, 8, 12, 40, 9, 63, 20}:
constexpr int kSc[8] = {1, 2, 3, 63, 17, 33, 48, 5};
constexpr int kMn[8] = {0, 4, 8, 12, 40, 9, 63, 20};
constexpr uint8_t kPackedK4[12] = {
    0x41,  // 1  | (17>>4=1)<<6
    0x82,  // 2  | (33>>4=2)<<6
    0xC3,  // 3  | (48>>4=3)<<6
    0x3F,  // 63 | (5>>4=0)<<6
    0x80,  // 0  | (40>>4=2)<<6
    0x04,  // 4  | (9>>4=0)<<6
    0xC8,  // 8  | (63>>4=3)<<6
    0x4C,  // 12 | (20>>4=1)<<6
    0x81,  // 17&15=1  | (40&15=8)<<4
    0x91,  // 33&15=1  | (9&15=9)<<4
    0xF0,  // 48&15=0  | (63&15=15)<<4
    0x45,  // 5        | (20&15=4)<<4
};

TEST(RefLayout, Q4_KScalesMinsAndNibbleOrder) {
  auto b = zeroed<BlockQ4_K>();
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  std::memcpy(b.scales, kPackedK4, 12);
  // Chunk c of 64 elements: qs[32c+l] low nibble = element 64c+l (sub-block
  // 2c), high nibble = element 64c+32+l (sub-block 2c+1).
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
  const auto y = dequant(DType::Q4_K, b, 256);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int s0 = 2 * c, s1 = 2 * c + 1;
      EXPECT_EQ(y[64 * c + l], 1.0f * kSc[s0] * (l % 16) - 0.5f * kMn[s0]) << c << " " << l;
      EXPECT_EQ(y[64 * c + 32 + l], 1.0f * kSc[s1] * (15 - l % 16) - 0.5f * kMn[s1]) << c << " " << l;
    }
  // Spot values worked out in full: element 0 = 1*1*0 - 0.5*0 = 0;
  // element 100 (c=1, high nibble, l=4) = 63*11 - 0.5*12 = 687;
  // element 200 (c=3, low nibble, l=8) = 48*8 - 0.5*63 = 352.5.
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[100], 687.0f);
  EXPECT_EQ(y[200], 352.5f);
}

TEST(RefLayout, Q5_KFifthBitPerSubBlock) {
  auto b = zeroed<BlockQ5_K>();
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  std::memcpy(b.scales, kPackedK4, 12);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
  // Bit s of qh[l] is the 5th bit of element 32s+l: 0x55 (bits 0,2,4,6) sets
  // it for the even sub-blocks on even l, 0xAA for the odd ones on odd l.
  for (int l = 0; l < 32; ++l) b.qh[l] = (l % 2 == 0) ? 0x55 : 0xAA;
  const auto y = dequant(DType::Q5_K, b, 256);
  for (int s = 0; s < 8; ++s)
    for (int l = 0; l < 32; ++l) {
      const int nibble = (s % 2 == 0) ? l % 16 : 15 - l % 16;
      const int q = nibble + ((s % 2 == l % 2) ? 16 : 0);
      EXPECT_EQ(y[32 * s + l], 1.0f * kSc[s] * q - 0.5f * kMn[s]) << s << " " << l;
    }
  // Element 34 (s=1, l=2: even l, odd sub-block -> no 5th bit): 2*13 - 0.5*4 = 24.
  EXPECT_EQ(y[34], 24.0f);
  // Element 35 (s=1, l=3: odd l, odd sub-block -> +16): 2*(12+16) - 2 = 54.
  EXPECT_EQ(y[35], 54.0f);
}

TEST(RefLayout, Q6_KElementOrder) {
  auto b = zeroed<BlockQ6_K>();
  b.d = kHalfHalf;
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>(i - 8);
  // Half 0: ql[0] = 0x21, ql[32] = 0x5A, qh[0] = 0xE4 (bit pairs 0,1,2,3).
  //   element 0  = (0x1 | 0<<4) - 32 = -31       (sub-block 0)
  //   element 32 = (0xA | 1<<4) - 32 = -6        (sub-block 2)
  //   element 64 = (0x2 | 2<<4) - 32 = 2         (sub-block 4)
  //   element 96 = (0x5 | 3<<4) - 32 = 21        (sub-block 6)
  b.ql[0] = 0x21;
  b.ql[32] = 0x5A;
  b.qh[0] = 0xE4;
  // Half 1, l = 5: ql[64+5] = 0x0F, qh[32+5] = 0x03:
  //   element 133 = (15 | 3<<4) - 32 = 31        (sub-block 8)
  //   element 197 = (0 | 0<<4) - 32 = -32        (sub-block 12)
  b.ql[64 + 5] = 0x0F;
  b.qh[32 + 5] = 0x03;
  std::vector<int> q(256, -32);
  q[0] = -31;
  q[32] = -6;
  q[64] = 2;
  q[96] = 21;
  q[133] = 31;
  const auto y = dequant(DType::Q6_K, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.5f * (e / 16 - 8) * q[e]) << e;
  EXPECT_EQ(y[0], 0.5f * -8 * -31);  // 124
  EXPECT_EQ(y[96], 0.5f * -2 * 21);  // -21
}

TEST(RefLayout, Q2_KElementOrder) {
  auto b = zeroed<BlockQ2_K>();
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<uint8_t>(i | ((15 - i) << 4));  // sc=i, m=15-i
  // Half h, shift group j: element 128h+32j+l = bits 2j..2j+1 of qs[32h+l].
  b.qs[0] = 0xE4;       // elements 0, 32, 64, 96 = 0, 1, 2, 3
  b.qs[32 + 7] = 0x1B;  // elements 135, 167, 199, 231 = 3, 2, 1, 0
  std::vector<int> q(256, 0);
  q[32] = 1;
  q[64] = 2;
  q[96] = 3;
  q[135] = 3;
  q[167] = 2;
  q[199] = 1;
  const auto y = dequant(DType::Q2_K, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 1.0f * (e / 16) * q[e] - 0.5f * (15 - e / 16)) << e;
  EXPECT_EQ(y[32], 2.0f * 1 - 0.5f * 13);   // -4.5
  EXPECT_EQ(y[135], 8.0f * 3 - 0.5f * 7);   // 20.5
}

TEST(RefLayout, Q3_KScalesAndHighBitMask) {
  auto b = zeroed<BlockQ3_K>();
  b.d = kHalfOne;
  // Biased scales v = sc + 32 (6 bits). Bytes 0-7: low nibble of v[i] for
  // i < 8, high nibble = low 4 bits of v[i+8]. Byte 8+k: top 2 bits of v[k],
  // v[k+4], v[k+8], v[k+12] at bits 0, 2, 4, 6.
  const int v[16] = {0, 1, 31, 32, 33, 63, 16, 47, 5, 10, 20, 40, 50, 60, 35, 29};
  const uint8_t packed[12] = {
      0x50,  // v0=0 (0x0)   | v8=5  (0x5)<<4
      0xA1,  // v1=1 (0x1)   | v9=10 (0xA)<<4
      0x4F,  // v2=31 (0xF)  | v10=20 (0x4)<<4
      0x80,  // v3=32 (0x0)  | v11=40 (0x8)<<4
      0x21,  // v4=33 (0x1)  | v12=50 (0x2)<<4
      0xCF,  // v5=63 (0xF)  | v13=60 (0xC)<<4
      0x30,  // v6=16 (0x0)  | v14=35 (0x3)<<4
      0xDF,  // v7=47 (0xF)  | v15=29 (0xD)<<4
      // Top bits v>>4 of v0..v15: 0,0,1,2, 2,3,1,2, 0,0,1,2, 3,3,2,1.
      0xC8,  // k=0: v0=0 | v4=2<<2 | v8=0<<4 | v12=3<<6
      0xCC,  // k=1: v1=0 | v5=3<<2 | v9=0<<4 | v13=3<<6
      0x95,  // k=2: v2=1 | v6=1<<2 | v10=1<<4 | v14=2<<6
      0x6A,  // k=3: v3=2 | v7=2<<2 | v11=2<<4 | v15=1<<6
  };
  std::memcpy(b.scales, packed, 12);
  // Levels: low 2 bits as in Q2_K; hmask[l] bit 4h+j set = no -4 offset.
  b.qs[0] = 0xE4;           // low bits of elements 0, 32, 64, 96 = 0, 1, 2, 3
  b.hmask[0] = 0x0A;        // bits 1, 3: elements 32 and 96 keep their level
  b.qs[32 + 31] = 0xFF;     // elements 159, 191, 223, 255: low bits 3
  b.hmask[31] = 0x50;       // bits 4, 6: elements 159 (h=1,j=0), 223 (h=1,j=2)
  std::vector<int> q(256, -4);  // low bits 0 and high bit clear: 0 - 4
  q[0] = -4;
  q[32] = 1;
  q[64] = 2 - 4;
  q[96] = 3;
  q[159] = 3;
  q[191] = 3 - 4;
  q[223] = 3;
  q[255] = 3 - 4;
  const auto y = dequant(DType::Q3_K, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 1.0f * (v[e / 16] - 32) * q[e]) << e;
  EXPECT_EQ(y[0], (0 - 32) * -4.0f);    // 128
  EXPECT_EQ(y[96], (16 - 32) * 3.0f);   // -48 (sub-block 6)
  EXPECT_EQ(y[255], (29 - 32) * -1.0f); // 3 (sub-block 15)
}

TEST(RefLayout, FloatFormats) {
  const uint16_t f16[4] = {0x3C00, 0xC000, 0x0001, 0x7BFF};  // 1, -2, 2^-24, 65504
  std::vector<float> y(4);
  dequantize_row_ref(DType::F16, f16, y.data(), 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0x1p-24f);
  EXPECT_EQ(y[3], 65504.0f);
  const uint16_t bf16[3] = {0x3F80, 0xC040, 0x4049};  // 1, -3, 3.140625
  dequantize_row_ref(DType::BF16, bf16, y.data(), 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
  EXPECT_EQ(y[2], 3.140625f);
  const float f32[2] = {1.5f, -0.0f};
  dequantize_row_ref(DType::F32, f32, y.data(), 2);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_TRUE(std::signbit(y[1]));
}

TEST(RefLayout, FloatFormatsQuantizeRoundToNearestEven) {
  // 1 + 2^-11 is halfway between halves 1 and 1+2^-10: ties to even (1).
  const float x[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, -2.5f};
  uint16_t h[4];
  quantize_row_ref(DType::F16, x, h, 4);
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0x3C02);  // 1 + 3*2^-11 -> ties to even 1 + 2*2^-10
  EXPECT_EQ(h[3], 0xC100);
  quantize_row_ref(DType::BF16, x, h, 4);
  EXPECT_EQ(h[0], 0x3F80);  // 1 + 2^-11 is below bf16's half ulp (2^-8)
  EXPECT_EQ(h[2], 0x3F80);  // exactly halfway between 1 and 1+2^-7: even
  EXPECT_EQ(h[3], 0xC020);
}

}  // namespace
}  // namespace ms
