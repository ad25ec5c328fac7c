#include <gtest/gtest.h>

#include <string>

#include "engine/kv_cache.h"
#include "util/error.h"

namespace ms {
namespace {

TEST(KvCache, LayoutAndOverflowIsAnError) {
  KvCache c(2, 2, 4, 8);
  EXPECT_EQ(c.bytes(), 2u * 2 * 2 * 4 * 8 * 2);
  EXPECT_EQ(c.v(0) - c.k(0), 2 * 4 * 8);
  EXPECT_EQ(c.k(1) - c.k(0), 2 * 2 * 4 * 8);
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

}  // namespace
}  // namespace ms
