#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
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


TEST(KvCache, Q8_0RowsAreBlocksOf32) {
  // 2 layers, 3 KV heads, head size 64 (2 blocks a row), 5 positions.
  KvCache c(2, 3, 64, 5, KvType::Q8_0);
  EXPECT_EQ(c.type(), KvType::Q8_0);
  EXPECT_EQ(kv_row_bytes(KvType::Q8_0, 64), 2 * 34);
  EXPECT_EQ(c.bytes(), 2u * 2 * 3 * 5 * 2 * 34);
  EXPECT_EQ(c.v_q8(0) - c.k_q8(0), 3 * 5 * 2);
  EXPECT_EQ(c.k_q8(1) - c.k_q8(0), 2 * 3 * 5 * 2);
  for (int l = 0; l < 2; ++l)
    for (int b = 0; b < 3 * 5 * 2; ++b) {
      EXPECT_EQ(c.k_q8(l)[b].d, 0u);
      c.v_q8(l)[b].qs[31] = -127;  // every block writable (ASan flags an undersized buffer)
    }
  EXPECT_STREQ(kv_type_name(c.type()), "q8_0");
  EXPECT_THROW(c.k_f16(0), Error);
  EXPECT_THROW(c.v_f32(0), Error);
  KvCache h(1, 1, 32, 4);
  EXPECT_THROW(h.k_q8(0), Error);
}

TEST(KvCache, Q8_0NeedsAHeadSizeMultipleOf32) {
  for (int hd : {1, 16, 48, 100}) {
    try {
      KvCache c(1, 1, hd, 4, KvType::Q8_0);
      FAIL() << "head size " << hd << " accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--kv-type q8_0"), std::string::npos) << m;
      EXPECT_NE(m.find(std::to_string(hd)), std::string::npos) << m;
    }
    RecurrentLayout rec;
    rec.recurrent = {true, false};
    EXPECT_THROW(KvCache(2, 1, hd, 4, KvType::Q8_0, rec), Error);
    EXPECT_NO_THROW(KvCache(1, 1, hd, 4, KvType::F16));
  }
  EXPECT_NO_THROW(check_kv_head_dim(KvType::Q8_0, 256));
  EXPECT_THROW(check_kv_head_dim(KvType::Q8_0, 80), Error);
  EXPECT_NO_THROW(check_kv_head_dim(KvType::F16, 80));
}

// Resident bytes of this process (Linux /proc/self/statm), 0 where unknown.
uint64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// A cache sized for a long context costs memory for the positions written,
// not for the whole context: the model's full context may be the default.
TEST(KvCache, UnwrittenPositionsCostNoResidentMemory) {
  const uint64_t before = resident_bytes();
  if (before == 0) GTEST_SKIP() << "no /proc/self/statm";
  KvCache kv(8, 8, 128, 65536, KvType::F16);  // 2 GiB of K/V
  ASSERT_EQ(kv.bytes(), uint64_t{2} << 30);
  const uint64_t after = resident_bytes();
  EXPECT_LT(after, before + (uint64_t{64} << 20)) << "allocating the cache made it resident";
  // Unwritten positions read as zeros; written ones keep what was written.
  const int64_t last = 65535 * 128;
  EXPECT_EQ(kv.k_f16(7)[last], 0);
  EXPECT_EQ(kv.v_f16(0)[0], 0);
  kv.k_f16(7)[last] = 0x3c00;
  EXPECT_EQ(kv.k_f16(7)[last], 0x3c00);
}

TEST(KvCache, TypeNamesRoundTripAndRowBytes) {
  for (KvType t : {KvType::F16, KvType::F32, KvType::Q8_0}) EXPECT_EQ(parse_kv_type(kv_type_name(t)), t);
  try {
    parse_kv_type("q4_0");
    FAIL() << "q4_0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-type"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kv_row_bytes(KvType::F16, 128), 256);
  EXPECT_EQ(kv_row_bytes(KvType::F32, 128), 512);
  EXPECT_EQ(kv_row_bytes(KvType::Q8_0, 128), 136);
  EXPECT_EQ(kv_row_bytes(KvType::F16, 5), 10);  // odd head sizes are fine for f16/f32
  EXPECT_EQ(kv_row_bytes(KvType::F32, 5), 20);
}

}  // namespace
}  // namespace ms
