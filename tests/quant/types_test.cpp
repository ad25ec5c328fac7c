#include <gtest/gtest.h>

#include "quant/half.h"
#include "quant/types.h"
#include "util/error.h"

namespace ms {

TEST(Types, KnownSizesMatchTheFormat) {
  EXPECT_EQ(type_info(DType::Q4_K).type_size, 144);
  EXPECT_EQ(type_info(DType::Q6_K).type_size, 210);
  EXPECT_EQ(type_info(DType::MXFP4).block_size, 32);
  EXPECT_EQ(type_info(99u), nullptr);
  EXPECT_EQ(parse_type("Q4_k"), DType::Q4_K);
  EXPECT_THROW(parse_type("q9_9"), Error);
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68);
  EXPECT_THROW(row_bytes(DType::Q8_0, 33), Error);
}

TEST(Half, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (f != f) continue;  // NaN payloads need not round-trip
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);   // rounds to inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
}

}  // namespace ms
