// SeqSlotPool / SeqSlot (engine/kv_cache.h): the bookkeeping of a device
// backend's sequence states (CudaBackend with n_seq > 1) — lowest free state
// first, a clear error when all are taken, states given back when a claim (or
// the KvCache holding it) goes, copies holding none, claims that outlive
// their pool harmless.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/kv_cache.h"
#include "util/error.h"

namespace ms {
namespace {

TEST(SeqSlotPool, HandsOutLowestFreeAndRefusesWhenFull) {
  auto pool = std::make_shared<SeqSlotPool>(3);
  EXPECT_EQ(pool->size(), 3);
  SeqSlot a = pool->acquire("full"), b = pool->acquire("full"), c = pool->acquire("full");
  EXPECT_EQ(a.index(), 0);
  EXPECT_EQ(b.index(), 1);
  EXPECT_EQ(c.index(), 2);
  EXPECT_EQ(pool->in_use(), 3);
  try {
    (void)pool->acquire("the backend holds 3 sequences; all are in use");
    ADD_FAILURE() << "a fourth state of three";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "the backend holds 3 sequences; all are in use");
  }
  b.reset();
  EXPECT_EQ(b.index(), -1);
  EXPECT_EQ(pool->in_use(), 2);
  SeqSlot d = pool->acquire("full");
  EXPECT_EQ(d.index(), 1);  // the one given back
}

TEST(SeqSlotPool, RejectsAnEmptyPool) {
  EXPECT_THROW(SeqSlotPool(0), Error);
  EXPECT_THROW(SeqSlotPool(-2), Error);
}

TEST(SeqSlot, MovesCarryTheClaimCopiesHoldNone) {
  auto pool = std::make_shared<SeqSlotPool>(2);
  SeqSlot a = pool->acquire("full");
  SeqSlot copy(a);
  EXPECT_EQ(copy.index(), -1);
  copy.reset();  // a copy gives nothing back
  EXPECT_EQ(pool->in_use(), 1);
  SeqSlot moved(std::move(a));
  EXPECT_EQ(moved.index(), 0);
  EXPECT_EQ(a.index(), -1);  // NOLINT(bugprone-use-after-move): moved-from holds none
  SeqSlot other = pool->acquire("full");
  other = std::move(moved);  // other's state (1) goes back, it takes 0
  EXPECT_EQ(other.index(), 0);
  EXPECT_EQ(pool->in_use(), 1);
  SeqSlot assigned;
  assigned = other;  // copy-assignment: none
  EXPECT_EQ(assigned.index(), -1);
  EXPECT_EQ(pool->in_use(), 1);
}

TEST(SeqSlot, KvCacheCarriesItsClaimAndCopiesDoNot) {
  auto pool = std::make_shared<SeqSlotPool>(2);
  {
    std::optional<KvCache> kv;
    kv.emplace(1, 1, 1, 16, KvType::F16);
    EXPECT_EQ(kv->device_slot(), -1);
    kv->set_device_slot(pool->acquire("full"));
    EXPECT_EQ(kv->device_slot(), 0);
    const KvCache copy = *kv;
    EXPECT_EQ(copy.device_slot(), -1);
    KvCache moved = std::move(*kv);
    EXPECT_EQ(moved.device_slot(), 0);
    EXPECT_EQ(pool->in_use(), 1);
    kv.reset();
    EXPECT_EQ(pool->in_use(), 1);  // the moved-to cache still holds it
  }
  EXPECT_EQ(pool->in_use(), 0);  // gone with the cache
}

TEST(SeqSlot, AClaimOutlivingItsPoolIsHarmless) {
  SeqSlot s;
  {
    auto pool = std::make_shared<SeqSlotPool>(1);
    s = pool->acquire("full");
  }
  EXPECT_EQ(s.index(), 0);
  s.reset();  // the pool is gone: nothing to give back to
  EXPECT_EQ(s.index(), -1);
}

}  // namespace
}  // namespace ms
