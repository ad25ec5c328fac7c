// The page pool's bookkeeping (engine/kv_pages.h): reserve / truncate /
// share / release over block tables, reference counts, copy on write of a
// shared page, exact accounting, exhaustion as a status; then KvPages' bytes
// (a copy on write copies the page) and a randomized run against a model of
// the rules.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>

#include "engine/kv_pages.h"
#include "util/error.h"

namespace ms {
namespace {

// Every page is held by as many tables as its count says; free pages by none.
void expect_consistent(const KvPagePool& pool, const std::vector<const PageTable*>& tables) {
  std::map<int32_t, int> held;
  for (const PageTable* t : tables)
    for (int32_t p : *t) ++held[p];
  int used = 0;
  for (int32_t p = 0; p < pool.n_pages(); ++p) {
    EXPECT_EQ(pool.refs(p), held.count(p) ? held[p] : 0) << "page " << p;
    used += pool.refs(p) > 0 ? 1 : 0;
  }
  EXPECT_EQ(pool.used_pages(), used);
  EXPECT_EQ(pool.free_pages() + pool.used_pages(), pool.n_pages());
}

TEST(KvPagePool, ReserveTakesWholePagesAndTruncateGivesThemBack) {
  KvPagePool pool(8, 4);
  PageTable t;
  std::vector<PageCopy> copies;
  EXPECT_EQ(pool.pages_needed(t, 0, 1), 1);
  EXPECT_EQ(pool.pages_needed(t, 0, 9), 3);
  ASSERT_EQ(pool.reserve(t, 0, 9, copies), PageStatus::Ok);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(pool.used_pages(), 3);
  EXPECT_EQ(pool.pages_needed(t, 9, 3), 0) << "positions 9..11 are in the third page";
  EXPECT_EQ(pool.pages_needed(t, 9, 4), 1);
  ASSERT_EQ(pool.reserve(t, 9, 3, copies), PageStatus::Ok);
  EXPECT_EQ(t.size(), 3u);
  pool.truncate(t, 5);  // positions 0..4: two pages
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(pool.free_pages(), 6);
  pool.truncate(t, 8);  // past the end: nothing changes
  EXPECT_EQ(t.size(), 2u);
  pool.release(t);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(pool.free_pages(), 8);
  EXPECT_TRUE(copies.empty()) << "nothing was shared";
}

TEST(KvPagePool, ExhaustionIsAStatusAndChangesNothing) {
  KvPagePool pool(3, 2);
  PageTable a, b;
  std::vector<PageCopy> copies;
  ASSERT_EQ(pool.reserve(a, 0, 4, copies), PageStatus::Ok);
  EXPECT_EQ(pool.reserve(b, 0, 3, copies), PageStatus::Exhausted);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.free_pages(), 1);
  EXPECT_EQ(pool.reserve(b, 0, 2, copies), PageStatus::Ok);
  EXPECT_EQ(pool.reserve(a, 4, 1, copies), PageStatus::Exhausted);
  EXPECT_EQ(a.size(), 2u);
  expect_consistent(pool, {&a, &b});
  pool.release(b);
  EXPECT_EQ(pool.reserve(a, 4, 1, copies), PageStatus::Ok) << "a freed page is taken again";
  EXPECT_THROW(KvPagePool(0, 4), Error);
  EXPECT_THROW(KvPagePool(4, 0), Error);
  EXPECT_THROW(pool.reserve(b, 5, 1, copies), Error) << "a gap before the new positions";
}

TEST(KvPagePool, ForkSharesFullPagesAndCopiesThePartlyFilledOneOnWrite) {
  KvPagePool pool(10, 4);
  PageTable src, dst;
  std::vector<PageCopy> copies;
  ASSERT_EQ(pool.reserve(src, 0, 10, copies), PageStatus::Ok);  // pages 0..2, the last holds 2 rows
  pool.share(src, 10, dst);
  EXPECT_EQ(dst, src);
  for (int32_t p : src) EXPECT_EQ(pool.refs(p), 2);
  EXPECT_EQ(pool.used_pages(), 3) << "a fork takes no pages";
  // dst appends: its partly filled last page becomes its own copy.
  EXPECT_EQ(pool.pages_needed(dst, 10, 1), 1);
  ASSERT_EQ(pool.reserve(dst, 10, 1, copies), PageStatus::Ok);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, src[2]);
  EXPECT_EQ(copies[0].dst, dst[2]);
  EXPECT_NE(dst[2], src[2]);
  EXPECT_EQ(dst[0], src[0]);
  EXPECT_EQ(dst[1], src[1]);
  EXPECT_EQ(pool.refs(src[2]), 1) << "src's last page is its own again: no copy when it appends";
  copies.clear();
  ASSERT_EQ(pool.reserve(src, 10, 2, copies), PageStatus::Ok);
  EXPECT_TRUE(copies.empty());
  expect_consistent(pool, {&src, &dst});
  // The source appends first in the other order, too.
  PageTable c;
  pool.share(src, 8, c);  // a page boundary: the two full pages only
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(pool.pages_needed(c, 8, 1), 1) << "a new page, nothing to copy";
  ASSERT_EQ(pool.reserve(c, 8, 1, copies), PageStatus::Ok);
  EXPECT_TRUE(copies.empty());
  expect_consistent(pool, {&src, &dst, &c});
  // Truncating into a shared page keeps it shared; the next write copies it.
  pool.truncate(c, 6);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(pool.refs(c[1]), 3);
  ASSERT_EQ(pool.reserve(c, 6, 1, copies), PageStatus::Ok);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, src[1]);
  EXPECT_EQ(pool.refs(src[1]), 2);
  expect_consistent(pool, {&src, &dst, &c});
  // Every holder lets go: every page is free.
  pool.release(src);
  pool.release(dst);
  pool.release(c);
  EXPECT_EQ(pool.free_pages(), 10);
}

TEST(KvPagePool, ShareOntoItselfAndOverAnOldTable) {
  KvPagePool pool(6, 2);
  PageTable a, b;
  std::vector<PageCopy> copies;
  ASSERT_EQ(pool.reserve(a, 0, 4, copies), PageStatus::Ok);
  ASSERT_EQ(pool.reserve(b, 0, 6, copies), PageStatus::Ok);
  pool.share(a, 4, b);  // b's own three pages go back
  EXPECT_EQ(pool.used_pages(), 2);
  pool.share(a, 4, a);  // a fork onto itself changes nothing
  EXPECT_EQ(pool.refs(a[0]), 2);
  expect_consistent(pool, {&a, &b});
  EXPECT_THROW(pool.share(a, 5, b), Error) << "more positions than a's pages hold";
}

// Random forks, appends, truncates and releases against a model of what each
// sequence's rows hold: every row reads back what its sequence wrote, and
// the counts stay exact.
TEST(KvPages, RandomOperationsKeepEverySequencesRows) {
  const KvPageLayout layout{2, 1, 4, 3};  // 2 layers, 1 head, rows of 4 bytes, 3 tokens a page
  KvPages pages(layout, 12);
  struct Seq {
    PageTable t;
    std::vector<uint32_t> rows;  // the value written at each position
  };
  std::vector<Seq> seqs(4);
  std::mt19937 rng(5);
  uint32_t stamp = 1;
  auto row_of = [&](const Seq& s, int64_t pos, int layer) {
    uint32_t v;
    std::memcpy(&v, pages.page(s.t[static_cast<size_t>(pos / 3)]) + layout.offset(layer, layer == 1, 0, pos % 3), 4);
    return v;
  };
  for (int step = 0; step < 3000; ++step) {
    Seq& s = seqs[rng() % seqs.size()];
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {  // append 1..4 rows
      const int64_t m = 1 + rng() % 4, n = static_cast<int64_t>(s.rows.size());
      const int32_t before = pages.free_pages();
      const int64_t need = pages.pages_needed(s.t, n, m);
      if (pages.reserve(s.t, n, m) == PageStatus::Exhausted) {
        EXPECT_GT(need, before);
        EXPECT_EQ(pages.free_pages(), before);
        continue;
      }
      EXPECT_EQ(pages.free_pages(), before - need);
      for (int64_t j = n; j < n + m; ++j) {
        for (int l = 0; l < 2; ++l)
          std::memcpy(pages.page(s.t[static_cast<size_t>(j / 3)]) + layout.offset(l, l == 1, 0, j % 3), &stamp, 4);
        s.rows.push_back(stamp++);
      }
    } else if (op < 7) {  // truncate
      const size_t keep = s.rows.empty() ? 0 : rng() % (s.rows.size() + 1);
      pages.truncate(s.t, static_cast<int64_t>(keep));
      s.rows.resize(keep);
    } else if (op < 9) {  // fork from another
      const Seq& from = seqs[rng() % seqs.size()];
      if (&from == &s) continue;
      pages.share(from.t, static_cast<int64_t>(from.rows.size()), s.t);
      s.rows = from.rows;
    } else {
      pages.truncate(s.t, 0);
      s.rows.clear();
    }
    for (const Seq& q : seqs)
      for (size_t j = 0; j < q.rows.size(); ++j)
        for (int l = 0; l < 2; ++l) ASSERT_EQ(row_of(q, static_cast<int64_t>(j), l), q.rows[j]) << "step " << step;
  }
  int32_t held = 0;
  std::set<int32_t> distinct;
  for (Seq& q : seqs) {
    for (int32_t p : q.t) distinct.insert(p);
    held += static_cast<int32_t>(q.t.size());
  }
  EXPECT_EQ(pages.used_pages(), static_cast<int32_t>(distinct.size()));
  for (Seq& q : seqs) pages.truncate(q.t, 0);
  EXPECT_EQ(pages.free_pages(), 12) << held << " table entries given back";
}

TEST(KvPages, AccountsBytesAndClonesAPrivatePool) {
  const KvPageLayout layout{3, 2, 8, 16};
  EXPECT_EQ(layout.page_bytes(), 2 * 3 * 2 * 16 * 8);
  EXPECT_EQ(layout.offset(1, true, 1, 5), ((1 * 2 + 1) * 2 + 1) * 16 * 8 + 5 * 8);
  KvPages p(layout, 4, true);
  EXPECT_EQ(p.bytes(), 4u * static_cast<uint64_t>(layout.page_bytes()));
  PageTable t;
  ASSERT_EQ(p.reserve(t, 0, 20), PageStatus::Ok);
  p.page(t[1])[7] = std::byte{42};
  auto c = p.clone();
  EXPECT_EQ(c->used_pages(), 2);
  EXPECT_EQ(c->page(t[1])[7], std::byte{42});
  c->page(t[1])[7] = std::byte{1};
  EXPECT_EQ(p.page(t[1])[7], std::byte{42}) << "a clone has its own bytes";
  p.truncate(t, 0);
  EXPECT_EQ(c->used_pages(), 2);
}

}  // namespace
}  // namespace ms
