#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "engine/kv_cache.h"
#include "util/error.h"

namespace ms {
namespace {

TEST(KvCache, LayoutAndOverflowIsAnError) {
  KvCache c(2, 2, 4, 8);
  EXPECT_EQ(c.bytes(), 2u * 2 * 2 * 4 * 8 * 2);
  EXPECT_EQ(c.type(), KvType::F16);
  EXPECT_EQ(c.v_f16(0) - c.k_f16(0), 2 * 4 * 8);
  EXPECT_EQ(c.k_f16(1) - c.k_f16(0), 2 * 2 * 4 * 8);
  c.advance(5);
  EXPECT_EQ(c.n_past(), 5);
  c.check_room(3);
  try {
    c.advance(4);
    FAIL() << "overflow accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context full (8 tokens)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.n_past(), 5);  // a refused advance changes nothing
  c.truncate(2);
  EXPECT_EQ(c.n_past(), 2);
  EXPECT_THROW(c.truncate(3), Error);
  c.clear();
  EXPECT_EQ(c.n_past(), 0);
}

TEST(KvCache, F32HasTheSameLayoutAtTwiceTheBytes) {
  KvCache c(3, 2, 5, 7, KvType::F32);
  EXPECT_EQ(c.type(), KvType::F32);
  EXPECT_EQ(c.bytes(), 3u * 2 * 2 * 5 * 7 * 4);
  EXPECT_EQ(c.v_f32(0) - c.k_f32(0), 2 * 5 * 7);
  EXPECT_EQ(c.k_f32(2) - c.k_f32(0), 2 * 2 * 2 * 5 * 7);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.k_f32(0)) % alignof(float), 0u);
  // Zeroed, and every element writable (ASan would flag an undersized buffer).
  for (int l = 0; l < 3; ++l)
    for (int i = 0; i < 2 * 5 * 7; ++i) {
      EXPECT_EQ(c.k_f32(l)[i], 0.0f);
      c.v_f32(l)[i] = 1.5f;
    }
  EXPECT_EQ(c.v_f32(2)[2 * 5 * 7 - 1], 1.5f);
  EXPECT_STREQ(kv_type_name(c.type()), "f32");
}

TEST(KvCache, WrongElementTypeIsAnError) {
  KvCache h(1, 1, 4, 4), f(1, 1, 4, 4, KvType::F32);
  try {
    h.k_f32(0);
    FAIL() << "f32 view of an f16 cache accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(h.v_f32(0), Error);
  EXPECT_THROW(f.k_f16(0), Error);
  const KvCache& cf = f;
  EXPECT_THROW(cf.v_f16(0), Error);
  EXPECT_NO_THROW(cf.v_f32(0));
}

}  // namespace
}  // namespace ms
