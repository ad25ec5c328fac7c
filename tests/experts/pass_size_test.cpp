// The prompt pass size (experts/pass_size.h): the smallest pass whose cold
// experts stream within the target share of its compute, bounded by the
// memory its buffers may take, the context and the largest batch.
#include <gtest/gtest.h>

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
