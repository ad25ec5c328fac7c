// The CPU backend's K/V in pages of a shared pool (engine/kv_pages.h), against
// caches made alone (one contiguous page of the whole context), on tiny
// qwen35moe (Gated DeltaNet + attention) and qwen3moe models: prompt chunks,
// decode steps, a mixed forward_seqs step, a rollback to every position of a
// 64-token run and a fork that diverges all give bit-equal logits and K/V
// rows; a fork takes no pages until a side writes; a pool that runs short
// refuses the pass before computing anything.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/kv_cache.h"
#include "engine/loaded_model.h"
#include "tiny_gguf.h"
#include "util/error.h"

namespace ms {
namespace {

// The first n positions' K/V rows of every attention layer, and the live
// recurrent state, as bytes (through the block table: any layout).
std::vector<uint8_t> state_bytes(KvCache& kv, const ModelConfig& c, int64_t n) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t bytes) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + bytes);
  };
  const size_t row = static_cast<size_t>(kv_row_bytes(kv.type(), c.head_dim));
  for (int il = 0; il < c.n_layer; ++il) {
    if (kv.is_recurrent(il)) {
      put(kv.conv_state(il), sizeof(float) * static_cast<size_t>(kv.conv_elems()));
      put(kv.delta_state(il), sizeof(float) * static_cast<size_t>(kv.state_elems()));
      continue;
    }
    for (bool values : {false, true})
      for (int h = 0; h < c.n_head_kv; ++h)
        for (int64_t p = 0; p < n; ++p) put(kv.row(il, values, h, p), row);
  }
  return out;
}

struct TinyRun {
  std::unique_ptr<LoadedModel> m;
  ThreadPool pool{2};
  std::unique_ptr<CpuBackend> be;
  explicit TinyRun(const std::string& arch) : m(LoadedModel::open(test::tiny_gguf(arch, "q8_0", 23))) {
    be = std::make_unique<CpuBackend>(m->weights, pool);
  }
  const ModelConfig& cfg() const { return m->weights.cfg; }
  std::vector<float> decode(KvCache& kv, std::span<const int32_t> toks) {
    std::vector<float> logits;
    for (int32_t t : toks) be->forward(kv, std::span<const int32_t>(&t, 1), logits);
    return logits;
  }
  std::vector<float> prompt(KvCache& kv, std::span<const int32_t> toks) {
    std::vector<float> logits;
    be->forward(kv, toks, logits);
    return logits;
  }
};

class PagedKv : public ::testing::TestWithParam<const char*> {};

TEST_P(PagedKv, ChunksAndDecodeEqualAContiguousCache) {
  TinyRun r(GetParam());
  ASSERT_TRUE(r.be->paged_kv());
  const auto toks = test::random_tokens(45, 4);
  for (int32_t page : {1, 5, 16}) {
    auto pages = r.be->make_kv_pages(96, KvType::F16, page);
    KvCache paged = r.be->make_paged_cache(pages, 96, KvType::F16);
    KvCache flat = r.be->make_cache(96);
    ASSERT_TRUE(paged.paged());
    ASSERT_FALSE(flat.paged());
    int attn = 0;
    while (flat.is_recurrent(attn)) ++attn;
    EXPECT_THROW(paged.k_f16(attn), Error) << "no contiguous block";
    EXPECT_NO_THROW(flat.k_f16(attn));
    const std::span<const int32_t> all(toks);
    EXPECT_EQ(r.prompt(paged, all.subspan(0, 23)), r.prompt(flat, all.subspan(0, 23))) << "page " << page;
    EXPECT_EQ(r.prompt(paged, all.subspan(23, 9)), r.prompt(flat, all.subspan(23, 9))) << "page " << page;
    EXPECT_EQ(r.decode(paged, all.subspan(32, 13)), r.decode(flat, all.subspan(32, 13))) << "page " << page;
    EXPECT_EQ(state_bytes(paged, r.cfg(), 45), state_bytes(flat, r.cfg(), 45)) << "page " << page;
    EXPECT_EQ(pages->used_pages(), (45 + page - 1) / page);
    EXPECT_EQ(paged.kv_bytes(), static_cast<uint64_t>(pages->used_pages()) * pages->page_bytes());
  }
}

TEST_P(PagedKv, AMixedStepEqualsContiguousCaches) {
  TinyRun r(GetParam());
  auto pages = r.be->make_kv_pages(200, KvType::F16, 4);
  const std::vector<int> history = {0, 5, 11, 17};
  std::vector<KvCache> paged, flat;
  for (size_t i = 0; i < history.size(); ++i) {
    paged.push_back(r.be->make_paged_cache(pages, 64, KvType::F16));
    flat.push_back(r.be->make_cache(64));
    if (history[i] == 0) continue;
    const auto h = test::random_tokens(history[i], 10 + static_cast<uint32_t>(i));
    r.prompt(paged.back(), h);
    r.prompt(flat.back(), h);
  }
  // A prompt chunk for the first, one decode token for two, a verify of four for the last.
  const auto chunk = test::random_tokens(9, 1), verify = test::random_tokens(4, 2);
  const int32_t d1 = 7, d2 = 8;
  auto step = [&](std::vector<KvCache>& kv) {
    std::vector<SeqTokens> seqs = {{&kv[0], chunk, true},
                                   {&kv[1], std::span<const int32_t>(&d1, 1), true},
                                   {&kv[2], std::span<const int32_t>(&d2, 1), true},
                                   {&kv[3], verify, true, true}};
    std::vector<float> logits;
    r.be->forward_seqs(seqs, logits);
    return logits;
  };
  EXPECT_EQ(step(paged), step(flat));
  for (size_t i = 0; i < paged.size(); ++i)
    EXPECT_EQ(state_bytes(paged[i], r.cfg(), paged[i].n_past()), state_bytes(flat[i], r.cfg(), flat[i].n_past())) << i;
}

TEST_P(PagedKv, RollbackToEveryPositionOfA64TokenRun) {
  TinyRun r(GetParam());
  constexpr int kRun = 64;
  const auto toks = test::random_tokens(kRun + 3, 7);
  auto pages = r.be->make_kv_pages(4 * 128, KvType::F16, 5);
  KvCache run = r.be->make_paged_cache(pages, 128, KvType::F16);
  run.set_checkpoints({kRun, 1});
  r.decode(run, std::span<const int32_t>(toks.data(), kRun));
  const std::vector<uint8_t> run_state = state_bytes(run, r.cfg(), kRun);
  KvCache back = r.be->make_paged_cache(pages, 128, KvType::F16);
  back.set_checkpoints({kRun, 1});
  KvCache fresh = r.be->make_cache(128);
  for (int p = 1; p < kRun; ++p) {
    r.be->fork(run, back);  // shares run's pages
    back.truncate(p);
    r.decode(fresh, std::span<const int32_t>(&toks[static_cast<size_t>(p - 1)], 1));
    ASSERT_EQ(state_bytes(back, r.cfg(), p), state_bytes(fresh, r.cfg(), p)) << "the state at position " << p;
    // Decoding on from there (writes into the shared last page: a copy).
    KvCache on = fresh;
    const auto next = test::random_tokens(3, 100 + static_cast<uint32_t>(p));
    EXPECT_EQ(r.decode(back, next), r.decode(on, next)) << "decoding after a rollback to " << p;
  }
  EXPECT_EQ(state_bytes(run, r.cfg(), kRun), run_state) << "the forks never wrote into the run's pages";
}

TEST_P(PagedKv, ForkSharesPagesThenDiverges) {
  TinyRun r(GetParam());
  const auto toks = test::random_tokens(30, 5);
  auto pages = r.be->make_kv_pages(64, KvType::F16, 8);
  KvCache a = r.be->make_paged_cache(pages, 64, KvType::F16);
  r.decode(a, std::span<const int32_t>(toks.data(), 20));  // 3 pages, the last holds 4 rows
  ASSERT_EQ(pages->used_pages(), 3);
  KvCache b = r.be->make_paged_cache(pages, 64, KvType::F16);
  r.be->fork(a, b);
  EXPECT_EQ(pages->used_pages(), 3) << "a fork copies no rows";
  EXPECT_EQ(b.page_table(), a.page_table());
  r.decode(b, std::span<const int32_t>(toks.data() + 20, 3));  // into the shared third page
  EXPECT_EQ(pages->used_pages(), 4) << "b's write copied the partly filled page";
  EXPECT_EQ(b.page_table()[0], a.page_table()[0]);
  KvCache ref = r.be->make_cache(64), ref_b = r.be->make_cache(64);
  r.decode(ref, std::span<const int32_t>(toks.data(), 20));
  r.decode(ref_b, std::span<const int32_t>(toks.data(), 23));
  const std::vector<int32_t> next = {3, 1, 4};
  EXPECT_EQ(r.decode(a, next), r.decode(ref, next));
  EXPECT_EQ(r.decode(b, next), r.decode(ref_b, next));
  // A copy of a paged cache is a fork too; going away gives its pages back.
  {
    KvCache c = a;
    EXPECT_EQ(c.page_table(), a.page_table());
  }
  b = KvCache(a);
  a.clear();
  b.clear();
  EXPECT_EQ(pages->used_pages(), 0);
}

TEST_P(PagedKv, AShortPoolRefusesThePassBeforeAnyWork) {
  TinyRun r(GetParam());
  auto pages = r.be->make_kv_pages(16, KvType::F16, 4);  // 4 pages
  KvCache a = r.be->make_paged_cache(pages, 16, KvType::F16), b = r.be->make_paged_cache(pages, 16, KvType::F16);
  const auto toks = test::random_tokens(12, 3);
  r.prompt(a, toks);  // 3 pages
  std::vector<float> logits;
  try {
    r.be->forward(b, std::span<const int32_t>(toks.data(), 5), logits);
    ADD_FAILURE() << "5 tokens need 2 pages, 1 is free";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV pages exhausted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.n_past(), 0);
  EXPECT_EQ(pages->free_pages(), 1);
  // Together: each entry fits alone, not both; nothing runs, nothing is held.
  const int32_t t = 1;
  std::vector<SeqTokens> seqs = {{&b, std::span<const int32_t>(toks.data(), 4), true},
                                 {&a, std::span<const int32_t>(&t, 1), true}};
  EXPECT_THROW(r.be->forward_seqs(seqs, logits), Error);
  EXPECT_EQ(a.n_past(), 12);
  EXPECT_EQ(b.n_past(), 0);
  EXPECT_EQ(pages->free_pages(), 1);
  // A wrong pool is refused when the cache is made.
  auto q8 = r.be->make_kv_pages(16, KvType::Q8_0, 4);
  EXPECT_THROW(r.be->make_paged_cache(q8, 16, KvType::F16), Error);
}

INSTANTIATE_TEST_SUITE_P(Archs, PagedKv, ::testing::Values("qwen35moe", "qwen3moe"));

}  // namespace
}  // namespace ms
