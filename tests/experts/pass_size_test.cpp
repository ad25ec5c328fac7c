// The prompt pass size (experts/pass_size.h): the smallest pass whose cold
// experts stream within the target share of its compute, bounded by the
// memory its buffers may take, the context and the largest batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "experts/pass_size.h"
#include "util/error.h"

namespace ms {
namespace {

// The issue's case (Qwen3-30B-A3B Q4_K at --vram 10.5G on the H200): ~16 GB
// of routed experts of which ~6.7 GB stay cold with 512-token buffers,
// ~330 KB of buffers per pass token, a 51 GB/s link, ~1.2 s of compute for
// 8192 tokens.
PassSizeInputs qwen30b_10g() {
  PassSizeInputs in;
  in.tiered = true;
  in.expert_bytes = 16'000'000'000;
  in.bytes_per_token = 330e3;
  in.room_bytes = 16'000'000'000 - 6'700'000'000 + static_cast<uint64_t>(512 * in.bytes_per_token);
  in.link_gbps = 51;
  in.compute_s_per_token = 1.2 / 8192;
  in.ctx = 0;
  in.stream_share = 0.15;
  return in;
}

double share_at(const PassSizeInputs& in, int b) {
  double slots = std::max(0.0, double(in.room_bytes) - b * in.bytes_per_token);
  if (in.slot_cap_bytes >= 0) slots = std::min(slots, double(in.slot_cap_bytes));
  const double cold = std::max(0.0, double(in.expert_bytes) - slots);
  return cold / (in.link_gbps * 1e9) / (b * in.compute_s_per_token);
}

TEST(PassSize, EveryExpertResidentTakesTheFloorOrTheContext) {
  PassSizeInputs in;
  in.tiered = false;
  PassSize p = choose_pass_size(in);
  EXPECT_EQ(p.tokens, in.floor_tokens);
  EXPECT_EQ(p.bound, PassSize::Bound::Resident);
  EXPECT_NE(p.why.find("resident"), std::string::npos) << p.why;
  in.ctx = 100;
  p = choose_pass_size(in);
  EXPECT_EQ(p.tokens, 100);
  EXPECT_EQ(p.bound, PassSize::Bound::Context);
}

TEST(PassSize, EveryExpertResidentTakesLongPassesWhereMemoryHoldsThem) {
  PassSizeInputs in;
  in.tiered = false;
  in.bytes_per_token = 400.0 * 1024;  // the Qwen3.6-35B-A3B shape's buffers
  in.room_bytes = 8ull << 30;         // plenty: the resident pass
  PassSize p = choose_pass_size(in);
  EXPECT_EQ(p.tokens, in.resident_tokens) << p.why;
  EXPECT_EQ(p.bound, PassSize::Bound::Resident);
  // Room for 1000 tokens: the largest multiple of 64 that fits.
  in.room_bytes = static_cast<uint64_t>(1000 * in.bytes_per_token);
  p = choose_pass_size(in);
  EXPECT_EQ(p.tokens, 960) << p.why;
  EXPECT_EQ(p.bound, PassSize::Bound::Memory);
  EXPECT_NE(p.why.find("VRAM"), std::string::npos) << p.why;
  // Less room than the floor needs: the floor, as before (the reserve holds it).
  in.room_bytes = 1u << 20;
  p = choose_pass_size(in);
  EXPECT_EQ(p.tokens, in.floor_tokens) << p.why;
  // The context still bounds it.
  in.room_bytes = 8ull << 30;
  in.ctx = 1500;
  p = choose_pass_size(in);
  EXPECT_EQ(p.tokens, 1500) << p.why;
  EXPECT_EQ(p.bound, PassSize::Bound::Context);
}

TEST(PassSize, TheIssuesCaseStreamsOncePerLongPassWithinTheShare) {
  const PassSizeInputs in = qwen30b_10g();
  const PassSize p = choose_pass_size(in);
  std::printf("[ 10.5G ] %s\n", p.why.c_str());
  EXPECT_EQ(p.bound, PassSize::Bound::Link) << p.why;
  // Far above the old 256/512-token default, and the smallest such pass (to the rounding of 64 tokens).
  EXPECT_GT(p.tokens, 4096) << p.why;
  EXPECT_LE(share_at(in, p.tokens), in.stream_share + 1e-12) << p.why;
  EXPECT_GT(share_at(in, p.tokens - 64), in.stream_share) << p.why;
  EXPECT_EQ(p.tokens % 64, 0);
  // The reported figures are the pass's own.
  EXPECT_NEAR(p.compute_s, p.tokens * in.compute_s_per_token, 1e-12);
  EXPECT_NEAR(p.link_s, p.cold_bytes / 51e9, 1e-12);
  EXPECT_NE(p.why.find(std::to_string(p.tokens) + " tokens"), std::string::npos) << p.why;
  // Its buffers stay within the memory share.
  EXPECT_LE(p.tokens * in.bytes_per_token, in.memory_share * double(in.room_bytes));
}

TEST(PassSize, AnEightThousandTokenPromptAtTheIssuesBudgetIsOnePass) {
  PassSizeInputs in = qwen30b_10g();
  in.ctx = 8193;  // bench -p 8192 -n 0
  const PassSize p = choose_pass_size(in);
  EXPECT_EQ(p.tokens, 8193) << p.why;
  EXPECT_EQ(p.bound, PassSize::Bound::Context);
  EXPECT_NE(p.why.find("context"), std::string::npos) << p.why;
  EXPECT_LT(p.link_s / p.compute_s, 0.20) << p.why;
}

// Issue #29 at --vram 8G (the Qwen3-30B-A3B shape): with every buffer per
// token (~327 KiB, ~268 of them the hybrid step's) a third of the room held
// 3936 tokens, so an 8192-token prompt took three passes and streamed the
// cold experts each time. The step's per-row buffers (gathered input,
// gate/up, their Q8 rows, compact output: ~25 KiB a (token, expert) row, 8
// rows a token) sized by a chunk of 16384 rows (the CUDA default,
// kHybridChunkRows) instead are a fixed ~400 MiB: the prompt is one pass.
constexpr double kD = 2048, kF = 768;
constexpr int kK = 8, kChunk = 16384;
constexpr double kRowBytes = 4 * kD * 2 + 4 * kF * 2 + (kD + kD / 32 * 8) + (kF + kF / 32 * 8);  // xg, yc, hg, hu, Q8
constexpr double kStepPerToken = 268.0 * 1024, kActPerToken = 59.0 * 1024;

BufferLine whole_line() { return {0, kStepPerToken}; }
BufferLine chunked_line() { return {kRowBytes * kChunk, kStepPerToken - kRowBytes * kK}; }

PassSizeInputs qwen30b_8g() {
  PassSizeInputs in = qwen30b_10g();
  in.ctx = 8193;  // bench -p 8192 -n 0
  in.bytes_per_token = kActPerToken;
  in.room_bytes = static_cast<uint64_t>(3 * 3940 * (kActPerToken + kStepPerToken));  // a third: 3936 tokens and a few
  in.slot_cap_bytes = static_cast<int64_t>(in.room_bytes);
  return in;
}

TEST(PassSize, RowChunksMakeAnEightThousandTokenPromptOnePassAt8G) {
  const PassSizeInputs in = qwen30b_8g();
  PassSizeInputs before_in = in;
  before_in.bytes_per_token += kStepPerToken;
  const PassSize before = choose_pass_size(before_in);
  std::printf("[ 8G, unchunked ] %s\n", before.why.c_str());
  EXPECT_EQ(before.bound, PassSize::Bound::Memory) << before.why;
  EXPECT_LT(2 * before.tokens, 8192) << before.why;
  EXPECT_NEAR(chunked_line().bytes_per_token / 1024, 64.5, 1.0);  // the rows' ~204 KiB a token left the count
  const PassSize after = choose_chunked_pass_size(in, whole_line(), chunked_line());
  std::printf("[ 8G, chunks of %d rows ] %s\n", kChunk, after.why.c_str());
  EXPECT_EQ(after.tokens, 8193) << after.why;
  EXPECT_EQ(after.bound, PassSize::Bound::Context) << after.why;
  // Its buffers within the memory share of what the chunk leaves.
  EXPECT_LE(after.tokens * (in.bytes_per_token + chunked_line().bytes_per_token),
            in.memory_share * (double(in.room_bytes) - chunked_line().fixed_bytes));
  // One pass streams the cold experts once: less link time than the passes before.
  const int passes_before = (8192 + before.tokens - 1) / before.tokens;
  EXPECT_LT(after.link_s, passes_before * before.link_s);
  // The whole line alone is today's choice.
  EXPECT_EQ(choose_chunked_pass_size(in, whole_line(), whole_line()).tokens, before.tokens);
}

// A budget too tight for a pass to fill a chunk keeps the whole line's pass
// (the chunk's fixed bytes would only take room from it).
TEST(PassSize, ATightBudgetKeepsTheUnchunkedPass) {
  PassSizeInputs in = qwen30b_8g();
  in.room_bytes = 150'000'000;
  in.slot_cap_bytes = -1;
  PassSizeInputs whole_in = in;
  whole_in.bytes_per_token += kStepPerToken;
  const PassSize whole = choose_pass_size(whole_in);
  const PassSize p = choose_chunked_pass_size(in, whole_line(), chunked_line());
  EXPECT_EQ(p.tokens, whole.tokens) << p.why;
  EXPECT_LT(int64_t{p.tokens} * kK, kChunk) << p.why;
}

// Either line is safe: the choice is one of theirs; where both reach the
// share the shorter, otherwise the longer.
TEST(PassSize, TheChunkedChoiceIsOneOfTheLines) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 300; ++i) {
    PassSizeInputs in = qwen30b_8g();
    in.room_bytes = static_cast<uint64_t>(u(rng) * 8e9);
    in.slot_cap_bytes = u(rng) < 0.5 ? -1 : static_cast<int64_t>(in.room_bytes);
    in.link_gbps = 5 + u(rng) * 100;
    in.ctx = u(rng) < 0.3 ? 0 : 256 + static_cast<int64_t>(u(rng) * 30000);
    const BufferLine w{u(rng) * 1e8, u(rng) * 4e5}, c{u(rng) * 3e8, u(rng) * 2e5};
    PassSizeInputs wi = in, ci = in;
    wi.bytes_per_token += w.bytes_per_token;
    wi.room_bytes = double(in.room_bytes) > w.fixed_bytes ? in.room_bytes - static_cast<uint64_t>(w.fixed_bytes) : 0;
    ci.bytes_per_token += c.bytes_per_token;
    ci.room_bytes = double(in.room_bytes) > c.fixed_bytes ? in.room_bytes - static_cast<uint64_t>(c.fixed_bytes) : 0;
    const PassSize a = choose_pass_size(wi), b = choose_pass_size(ci), p = choose_chunked_pass_size(in, w, c);
    auto reached = [&](const PassSize& x) { return x.link_s <= in.stream_share * x.compute_s; };
    const int want = reached(a) && reached(b) ? std::min(a.tokens, b.tokens) : std::max(a.tokens, b.tokens);
    EXPECT_EQ(p.tokens, want) << i;
  }
  EXPECT_THROW(choose_chunked_pass_size(qwen30b_8g(), {-1, 0}, chunked_line()), Error);
}

// Issue #43's worst cell: the Qwen3-30B-A3B shape in 12 of its 48 layers
// (Q4_K_M: 6 layers of 2.9 MiB experts, 6 of 2.5 MiB, so two slot pools)
// at bench's ctx 513, with `--vram` at 10%, 35% and 65% of the real model
// (1065, 2171 and 3498 MiB). `moestream inspect --vram 1065M --ctx 513`:
// dense 545.6 MiB + KV 12.0 + reserve 421.1 = 978.7 MiB, so 86.3 MiB of room
// for cache slots; the buffers may also take the reserve's half.
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kSlot = 3'059'712;  // the larger pools' slot (q6_K down)
constexpr int kPools = 2;
constexpr uint32_t kPromptRing = 64, kTwoWaves = 16, kBankSlots = 2 * 8;  // per pool
constexpr int kStreamChunk = 512;

PassSizeInputs qwen30b_12l(double budget_mib) {
  PassSizeInputs in;
  in.tiered = true;
  in.expert_bytes = 4'388'290'560;  // inspect: 1536 experts
  const double room = (budget_mib - 978.7) * kMiB;
  in.room_bytes = static_cast<uint64_t>(room + 421.1 / 2 * kMiB);
  in.slot_cap_bytes = static_cast<int64_t>(room);
  in.bytes_per_token = kActPerToken;
  in.link_gbps = 50;  // pinned H2D on the H100 host
  // 12 layers of attention (19.1 M weights) and 8 experts of 3 x 2048 x 768.
  in.compute_s_per_token = estimate_prompt_s_per_token(12 * (19.1e6 + 8 * 3 * kD * kF));
  in.ctx = 513;
  return in;
}

// The step's buffers with a ring of `ring` transit slots a pool (and the
// decode staging banks) and chunks of `chunk` rows (0: none).
PassLayout layout_12l(uint32_t ring, int chunk) {
  PassLayout l;
  l.transit_slots = ring;
  l.chunk_rows = chunk;
  l.line.fixed_bytes = (ring + kBankSlots) * kSlot * kPools + (chunk > 0 ? kRowBytes * chunk : 0);
  l.line.bytes_per_token = kStepPerToken - (chunk > 0 ? kRowBytes * kK : 0);
  return l;
}

PassPlan plan_12l(const PassSizeInputs& in) {
  const PassLayout tight[] = {layout_12l(kTwoWaves, kStreamChunk)};
  return choose_pass_plan(in, layout_12l(kPromptRing, 0), layout_12l(kPromptRing, kChunk), tight);
}

// At 1065 MiB the prompt ring (80 slots a pool with the banks: ~490 MB) is
// more than the budget leaves, so its lines hold no pass at all: passes of
// min_tokens (16), each streaming (or giving the CPU) most of every layer's
// experts for 16 tokens. The tight layout holds the 513-token pass.
TEST(PassPlan, TheTenPercentQwen30bBudgetStreamsEveryExpertOncePerLongPass) {
  const PassSizeInputs in = qwen30b_12l(1065);
  const PassSize before = choose_chunked_pass_size(in, layout_12l(kPromptRing, 0).line,
                                                   layout_12l(kPromptRing, kChunk).line);
  std::printf("[ 1065M, prompt ring ] %s\n", before.why.c_str());
  EXPECT_EQ(before.tokens, in.min_tokens) << before.why;
  const PassPlan p = plan_12l(in);
  std::printf("[ 1065M ] %s\n", p.size.why.c_str());
  EXPECT_TRUE(p.tight) << p.size.why;
  // The floor (bench -p 512 is one pass): past it a pass's buffers may take
  // only memory_share of the room, which holds fewer.
  EXPECT_EQ(p.size.tokens, 512) << p.size.why;
  EXPECT_EQ(p.size.bound, PassSize::Bound::Memory) << p.size.why;
  EXPECT_EQ(p.layout.transit_slots, kTwoWaves);
  EXPECT_EQ(p.layout.chunk_rows, kStreamChunk);
  EXPECT_NE(p.size.why.find("16 transit slots"), std::string::npos) << p.size.why;
  // Its buffers fit what the budget leaves (the rest are cache slots).
  const double buffers = p.layout.line.fixed_bytes + p.size.tokens * (in.bytes_per_token + p.layout.line.bytes_per_token);
  EXPECT_LE(buffers, double(in.room_bytes));
  // Nearly every expert is cold either way; the link's bytes a prompt token
  // fall with the pass: 32 times fewer.
  EXPECT_GT(p.size.cold_bytes, 0.97 * double(in.expert_bytes));
  EXPECT_GT(before.cold_bytes / before.tokens, 30 * p.size.cold_bytes / p.size.tokens);
}

// At 35% and 65% the prompt ring holds the pass: the plan is the one before.
TEST(PassPlan, RoomierBudgetsKeepThePromptRingsPass) {
  for (double mib : {2171.0, 3498.0}) {
    const PassSizeInputs in = qwen30b_12l(mib);
    const PassSize before = choose_chunked_pass_size(in, layout_12l(kPromptRing, 0).line,
                                                     layout_12l(kPromptRing, kChunk).line);
    const PassPlan p = plan_12l(in);
    std::printf("[ %.0fM ] %s\n", mib, p.size.why.c_str());
    EXPECT_FALSE(p.tight) << mib;
    EXPECT_EQ(p.size.tokens, before.tokens) << mib;
    EXPECT_EQ(p.size.tokens, 513) << mib;
    EXPECT_EQ(p.layout.transit_slots, kPromptRing) << mib;
    EXPECT_EQ(p.size.why, before.why) << mib;
  }
}

// A budget between: the prompt ring's pass falls below the floor, the tight
// layout's does not; the longest tight pass wins, ties to the fewest fixed
// bytes; none longer than the prompt ring's leaves it.
TEST(PassPlan, TheLongestTightPassWinsOnlyWhereItIsLonger) {
  PassSizeInputs in = qwen30b_12l(1065);
  in.ctx = 4097;
  const PassLayout a = layout_12l(kTwoWaves, 2048), b = layout_12l(kTwoWaves, kStreamChunk);
  const PassLayout both[] = {a, b};
  const PassPlan p = choose_pass_plan(in, layout_12l(kPromptRing, 0), layout_12l(kPromptRing, kChunk), both);
  ASSERT_TRUE(p.tight) << p.size.why;
  EXPECT_EQ(p.layout.chunk_rows, kStreamChunk) << p.size.why;  // the smaller chunk leaves room for more tokens
  EXPECT_GE(p.size.tokens, 512) << p.size.why;
  // The same tokens (the context bounds both): the smaller fixed bytes.
  in.ctx = 129;
  const PassPlan q = choose_pass_plan(in, layout_12l(kPromptRing, 0), layout_12l(kPromptRing, kChunk), both);
  EXPECT_TRUE(q.tight);
  EXPECT_EQ(q.size.tokens, 128);  // below the floor: a multiple of 64
  EXPECT_EQ(q.layout.chunk_rows, kStreamChunk);
  // A tight layout that holds no more than the prompt ring's pass: not taken.
  const PassLayout huge[] = {layout_12l(kTwoWaves * 8, 0)};
  const PassPlan r = choose_pass_plan(in, layout_12l(kPromptRing, 0), layout_12l(kPromptRing, kChunk), huge);
  EXPECT_FALSE(r.tight);
  EXPECT_EQ(r.size.tokens, in.min_tokens);
  // No tight layouts: the prompt ring's, as choose_chunked_pass_size.
  const PassPlan s = choose_pass_plan(in, layout_12l(kPromptRing, 0), layout_12l(kPromptRing, kChunk), {});
  EXPECT_FALSE(s.tight);
  EXPECT_EQ(s.size.tokens, in.min_tokens);
}

// Over random budgets: the plan is never shorter than the prompt ring's; it
// is that one wherever that holds the floor (or all the bounds allow); a
// tight plan's buffers fit the room.
TEST(PassPlan, RandomBudgetsNeverShortenThePass) {
  std::mt19937 rng(43);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 1000; ++i) {
    PassSizeInputs in = qwen30b_12l(980 + u(rng) * 4000);
    in.ctx = u(rng) < 0.3 ? 0 : 64 + static_cast<int64_t>(u(rng) * 20000);
    in.link_gbps = 5 + u(rng) * 100;
    const PassLayout whole = layout_12l(kPromptRing, 0), chunked = layout_12l(kPromptRing, kChunk);
    const PassLayout tight[] = {layout_12l(kTwoWaves, kStreamChunk), layout_12l(kTwoWaves, 2048)};
    const PassSize before = choose_chunked_pass_size(in, whole.line, chunked.line);
    const PassPlan p = choose_pass_plan(in, whole, chunked, tight);
    ASSERT_GE(p.size.tokens, before.tokens) << i;
    const int64_t upper = in.ctx > 0 ? std::min<int64_t>(in.ctx, in.max_tokens) : in.max_tokens;
    if (before.tokens >= std::min<int64_t>(in.floor_tokens, upper)) {
      ASSERT_FALSE(p.tight) << i;
      ASSERT_EQ(p.size.why, before.why) << i;
    }
    if (p.tight) {
      ASSERT_GT(p.size.tokens, before.tokens) << i;
      if (p.size.tokens > in.min_tokens)
        ASSERT_LE(p.layout.line.fixed_bytes + p.size.tokens * (in.bytes_per_token + p.layout.line.bytes_per_token),
                  double(in.room_bytes) + 1e-6)
            << i;
    }
  }
}

// The buffers are linear in the pass from the pass that fills a chunk.
TEST(PassSize, BuffersAreLinearFromTheChunksFill) {
  EXPECT_EQ(linear_buffers_from(0, 8), 64);     // no chunks: linear from the start
  EXPECT_EQ(linear_buffers_from(4096, 8), 512);
  EXPECT_EQ(linear_buffers_from(100, 8), 64);   // a chunk filled below the least size
  for (int chunk : {1, 63, 64, 65, 1000, 4096, 65536})
    for (int k : {1, 2, 3, 8, 10}) {
      const int b = linear_buffers_from(chunk, k);
      EXPECT_EQ(b % 64, 0);
      EXPECT_GE(int64_t{b} * k, chunk) << chunk << " " << k;
      EXPECT_LT(int64_t{b - 64} * k, std::max(chunk, 1)) << chunk << " " << k;  // the least such
    }
  EXPECT_THROW(linear_buffers_from(4096, 0), Error);
  EXPECT_THROW(linear_buffers_from(-1, 8), Error);
}

TEST(PassSize, ATightBudgetKeepsPassesSmall) {
  // ~1.5G for the same model: ~150 MB left for slots and buffers.
  PassSizeInputs in = qwen30b_10g();
  in.room_bytes = 150'000'000;
  const PassSize p = choose_pass_size(in);
  std::printf("[ 1.5G ] %s\n", p.why.c_str());
  EXPECT_EQ(p.bound, PassSize::Bound::Memory) << p.why;
  EXPECT_LT(p.tokens, 512) << p.why;
  EXPECT_GE(p.tokens, in.min_tokens);
  // Below the floor a pass takes all that is left (not a share): fewer,
  // longer passes stream the cold experts fewer times.
  EXPECT_LE(p.tokens * in.bytes_per_token, double(in.room_bytes));
  EXPECT_GT((p.tokens + 64) * in.bytes_per_token, double(in.room_bytes));
  EXPECT_NE(p.why.find("VRAM"), std::string::npos) << p.why;
  // Room for more than the floor but a third of it for less: the floor.
  in.room_bytes = 200'000'000;
  EXPECT_EQ(choose_pass_size(in).tokens, in.floor_tokens) << choose_pass_size(in).why;
  // No room at all: the least pass, not zero.
  in.room_bytes = 0;
  EXPECT_EQ(choose_pass_size(in).tokens, in.min_tokens);
}

// At the minimum budget the room for slots is 0: only a reserve is left,
// which the buffers may use but the slots not; every expert is cold however
// short the pass, so the pass takes all of it (as the old 512-token default
// did), not a share.
TEST(PassSize, NoRoomForSlotsEveryExpertColdAtAnySize) {
  PassSizeInputs in = qwen30b_10g();
  in.expert_bytes = 1'300'000'000;  // 4 layers of the 30B shape
  in.room_bytes = 110'000'000;      // the reserve's half, less the transit ring
  in.slot_cap_bytes = 0;
  const PassSize p = choose_pass_size(in);
  EXPECT_DOUBLE_EQ(p.cold_bytes, 1.3e9) << p.why;
  EXPECT_EQ(p.bound, PassSize::Bound::Memory) << p.why;
  EXPECT_GT(p.tokens, 256) << p.why;
  EXPECT_LE(p.tokens * in.bytes_per_token, double(in.room_bytes)) << p.why;
}

TEST(PassSize, NearlyResidentOrAFastLinkNeedsOnlyTheFloor) {
  PassSizeInputs in = qwen30b_10g();
  in.room_bytes = in.expert_bytes - 50'000'000;  // 50 MB cold
  PassSize p = choose_pass_size(in);
  EXPECT_EQ(p.tokens, in.floor_tokens) << p.why;
  EXPECT_EQ(p.bound, PassSize::Bound::Floor);
  in = qwen30b_10g();
  in.link_gbps = 5000;
  p = choose_pass_size(in);
  EXPECT_EQ(p.tokens, in.floor_tokens) << p.why;
}

TEST(PassSize, AnUnreachableShareTakesTheLargestPassAllowed) {
  // Buffers per token alone cost more link time than the share allows:
  // larger passes still stream less per token, so the largest allowed wins.
  PassSizeInputs in = qwen30b_10g();
  in.bytes_per_token = 2e6;
  in.memory_share = 1.0;
  const PassSize p = choose_pass_size(in);
  EXPECT_EQ(p.bound, PassSize::Bound::Memory) << p.why;
  EXPECT_LE(p.tokens * in.bytes_per_token, double(in.room_bytes));
  in.bytes_per_token = 0;  // nothing grows with the pass: the largest batch bounds it
  in.link_gbps = 1;
  EXPECT_EQ(choose_pass_size(in).bound, PassSize::Bound::Largest);
  EXPECT_EQ(choose_pass_size(in).tokens, in.max_tokens);
}

// Over random machines and budgets: the bounds always hold, a pass chosen by
// the link is the smallest within the share, and a faster link or a larger
// compute time never asks for a longer pass.
TEST(PassSize, RandomInputsKeepEveryBound) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 2000; ++i) {
    PassSizeInputs in;
    in.tiered = true;
    in.expert_bytes = static_cast<uint64_t>(1e8 + u(rng) * 1e11);
    in.room_bytes = static_cast<uint64_t>(u(rng) * 1.2 * double(in.expert_bytes));
    in.bytes_per_token = u(rng) * 1e6;
    in.link_gbps = 1 + u(rng) * 100;
    in.compute_s_per_token = 1e-6 + u(rng) * 1e-3;
    in.ctx = u(rng) < 0.3 ? static_cast<int64_t>(1 + u(rng) * 40000) : 0;
    in.stream_share = 0.02 + u(rng) * 0.3;
    if (u(rng) < 0.3) in.slot_cap_bytes = static_cast<int64_t>(u(rng) * double(in.room_bytes));
    const PassSize p = choose_pass_size(in);
    const int upper = in.ctx > 0 ? static_cast<int>(std::min<int64_t>(in.ctx, in.max_tokens)) : in.max_tokens;
    ASSERT_GE(p.tokens, std::min(in.min_tokens, upper)) << p.why;
    ASSERT_LE(p.tokens, upper) << p.why;
    if (p.tokens > std::max(in.min_tokens, in.floor_tokens))
      ASSERT_LE(p.tokens * in.bytes_per_token, in.memory_share * double(in.room_bytes) + 1e-6) << p.why;
    if (p.tokens > in.min_tokens) ASSERT_LE(p.tokens * in.bytes_per_token, double(in.room_bytes) + 1e-6) << p.why;
    if (p.bound == PassSize::Bound::Link && share_at(in, p.tokens) <= in.stream_share) {
      // The smallest within the share: every smaller candidate is above it.
      for (int c = in.floor_tokens; c < p.tokens; c = (c / 64 + 1) * 64)
        ASSERT_GT(share_at(in, c), in.stream_share) << p.why;
    }
    if (p.bound == PassSize::Bound::Floor) ASSERT_LE(share_at(in, in.floor_tokens), in.stream_share) << p.why;
    PassSizeInputs faster = in;
    faster.link_gbps *= 2;
    ASSERT_LE(choose_pass_size(faster).tokens, p.tokens);
    PassSizeInputs slower_gpu = in;
    slower_gpu.compute_s_per_token *= 2;
    ASSERT_LE(choose_pass_size(slower_gpu).tokens, p.tokens);
  }
}

TEST(PassSize, NonsenseInputsAreClearErrors) {
  PassSizeInputs in = qwen30b_10g();
  in.link_gbps = 0;
  EXPECT_THROW(choose_pass_size(in), Error);
  in = qwen30b_10g();
  in.compute_s_per_token = -1;
  EXPECT_THROW(choose_pass_size(in), Error);
  in = qwen30b_10g();
  in.floor_tokens = 0;
  EXPECT_THROW(choose_pass_size(in), Error);
  in = qwen30b_10g();
  in.memory_share = 0;
  EXPECT_THROW(choose_pass_size(in), Error);
  EXPECT_THROW(estimate_prompt_s_per_token(0), Error);
  // The estimate: 3.3 G active weights at 50 TFLOP/s is ~132 us a token.
  EXPECT_NEAR(estimate_prompt_s_per_token(3.3e9), 132e-6, 1e-9);
}

}  // namespace
}  // namespace ms
