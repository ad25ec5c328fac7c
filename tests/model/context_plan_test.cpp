// The choice of context (model/context_plan.h): --ctx 0 is the model's trained
// context where memory allows it, else the largest that fits (rounded, said
// in a note); an explicit --ctx that does not fit is an error giving the
// largest that does; slots multiply the cost; a run's needed length wins over
// the automatic share; qwen35moe-style models count K/V only on their
// attention layers.
#include <gtest/gtest.h>

#include <string>

#include "model/context_plan.h"
#include "model/hparams.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

// Qwen3-30B-A3B's f16 cache: 48 layers x 4 KV heads x (128 + 128) x 2 B = 96 KiB per token.
const KvCost kQwen3{96 * KiB, 0};

std::string error_of(int64_t requested, int64_t needed, const ContextMemory& m, int slots = 1) {
  try {
    choose_context(requested, needed, 40960, kQwen3, m, slots);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ContextMemory ram(uint64_t bytes) {
  ContextMemory m;
  m.limit = bytes / 10 * 9;
  m.automatic = bytes / 2;
  m.where = "RAM";
  return m;
}

TEST(ContextPlan, LargestContextRoundsDown) {
  EXPECT_EQ(largest_context(kQwen3, 96 * KiB * 5000), 4096);    // 5000 -> a multiple of 1024
  EXPECT_EQ(largest_context(kQwen3, 96 * KiB * 1000), 512);     // below 1024: a power of two
  EXPECT_EQ(largest_context(kQwen3, 96 * KiB * 40960), 40960);  // exact
  EXPECT_EQ(largest_context(kQwen3, 96 * KiB - 1), 0);          // not one token
  EXPECT_EQ(largest_context(kQwen3, 96 * KiB * 8192, 2), 4096);  // two slots halve it
  const KvCost with_state{10 * KiB, 50 * MiB};                    // recurrent state first
  EXPECT_EQ(largest_context(with_state, 50 * MiB - 1), 0);
  EXPECT_EQ(largest_context(with_state, 50 * MiB + 10 * KiB * 3072), 3072);
}

TEST(ContextPlan, ModelContextWhenMemoryAllows) {
  // 40960 tokens = 3.75 GiB of KV: fits in half of 64 GiB.
  const ContextChoice c = choose_context(0, 0, 40960, kQwen3, ram(64 * GiB));
  EXPECT_EQ(c.ctx, 40960);
  EXPECT_FALSE(c.capped);
  EXPECT_TRUE(c.note.empty());
  // No 4096 cap: a 262k model gets 262k.
  EXPECT_EQ(choose_context(0, 0, 262144, KvCost{20 * KiB, 0}, ram(64 * GiB)).ctx, 262144);
  // Unknown memory: the model's.
  EXPECT_EQ(choose_context(0, 0, 40960, kQwen3, ContextMemory{}).ctx, 40960);
  // Unknown trained context: the floor.
  EXPECT_EQ(choose_context(0, 0, 0, kQwen3, ram(64 * GiB)).ctx, kAutoFloor);
}

TEST(ContextPlan, CappedToTheLargestThatFitsWithANote) {
  // Half of 4 GiB is 2 GiB = 21845 tokens -> 21504 (a multiple of 1024).
  const ContextChoice c = choose_context(0, 0, 40960, kQwen3, ram(4 * GiB));
  EXPECT_EQ(c.ctx, 21504);
  EXPECT_TRUE(c.capped);
  EXPECT_NE(c.note.find("21504"), std::string::npos) << c.note;
  EXPECT_NE(c.note.find("40960"), std::string::npos) << c.note;
  EXPECT_NE(c.note.find("--ctx"), std::string::npos) << c.note;
  // What the run needs overrides the automatic share when it fits the limit.
  EXPECT_EQ(choose_context(0, 30000, 40960, kQwen3, ram(4 * GiB)).ctx, 30000);
  // ... and is an error past the limit, giving the largest that fits.
  const std::string e = error_of(0, 40000, ram(3 * GiB));
  EXPECT_NE(e.find("40000"), std::string::npos) << e;
  EXPECT_NE(e.find("largest context that fits is 28672"), std::string::npos) << e;  // 2.7 GiB / 96 KiB
}

TEST(ContextPlan, ExplicitContextIsCheckedAgainstTheLimit) {
  EXPECT_EQ(choose_context(8192, 0, 40960, kQwen3, ram(4 * GiB)).ctx, 8192);
  // Beyond the model's context is allowed when it fits (the user asked).
  EXPECT_EQ(choose_context(65536, 0, 40960, kQwen3, ram(64 * GiB)).ctx, 65536);
  const std::string e = error_of(65536, 0, ram(4 * GiB));
  EXPECT_NE(e.find("--ctx 65536"), std::string::npos) << e;
  EXPECT_NE(e.find("largest context that fits is 38912"), std::string::npos) << e;  // 3.6 GiB / 96 KiB
  // Slots multiply: two slots of 32768 need 6 GiB.
  const std::string s = error_of(32768, 0, ram(4 * GiB), 2);
  EXPECT_NE(s.find("x 2 slots"), std::string::npos) << s;
  EXPECT_NE(s.find("largest context that fits is 19456 tokens per slot (or 1 slots at --ctx 32768)"), std::string::npos) << s;
  EXPECT_EQ(choose_context(16384, 0, 40960, kQwen3, ram(4 * GiB), 2).ctx, 16384);
}

TEST(ContextPlan, CudaKeepsExpertsResidentBeforeTiering) {
  // 10 GiB left after dense weights and the reserve; experts 8 GiB; the model's
  // context (3.75 GiB) does not fit beside every expert (2 GiB left): a
  // capped context keeps them resident when it is at least kAutoFloor.
  ContextMemory m;
  m.limit = 10 * GiB;
  m.resident = 2 * GiB;
  m.automatic = 5 * GiB;
  m.where = "--vram";
  const ContextChoice c = choose_context(0, 0, 40960, kQwen3, m);
  EXPECT_EQ(c.ctx, 21504);
  EXPECT_TRUE(c.capped);
  EXPECT_NE(c.note.find("resident"), std::string::npos) << c.note;
  // Too little for kAutoFloor beside the experts: they are tiered, and the
  // model's context fits half the room.
  m.resident = 256 * MiB;
  const ContextChoice t = choose_context(0, 0, 40960, kQwen3, m);
  EXPECT_EQ(t.ctx, 40960);
  EXPECT_FALSE(t.capped);
  // Half the room too small: the largest in it.
  m.automatic = 1 * GiB;
  EXPECT_EQ(choose_context(0, 0, 40960, kQwen3, m).ctx, 10240);
  // An explicit context may take the whole room (experts go to host memory).
  EXPECT_EQ(choose_context(100000, 0, 40960, kQwen3, m).ctx, 100000);
  EXPECT_NE(error_of(120000, 0, m).find("largest context that fits is 108544"), std::string::npos);
}

TEST(ContextPlan, BoundedRunAtATieredBudgetTakesWhatItNeeds) {
  ContextMemory m;
  m.limit = 10 * GiB;
  m.resident = 256 * MiB;  // the model's context would push experts out of VRAM
  m.automatic = 5 * GiB;
  m.where = "--vram";
  const ContextChoice c = choose_context(0, 700, 40960, kQwen3, m, 1, true);
  EXPECT_EQ(c.ctx, 700);
  EXPECT_TRUE(c.capped);
  EXPECT_NE(c.note.find("what the prompt and -n need"), std::string::npos) << c.note;
  // Unbounded (-n -1): the model's context, as before.
  EXPECT_EQ(choose_context(0, 700, 40960, kQwen3, m, 1, false).ctx, 40960);
  // Where the model's context fits beside every expert, it is taken whole.
  m.resident = 8 * GiB;
  EXPECT_EQ(choose_context(0, 700, 40960, kQwen3, m, 1, true).ctx, 40960);
  // An explicit --ctx is kept.
  m.resident = 256 * MiB;
  EXPECT_EQ(choose_context(2048, 700, 40960, kQwen3, m, 1, true).ctx, 2048);
}

TEST(ContextPlan, HybridModelsCountOnlyTheirAttentionLayers) {
  // qwen35moe-like: 8 layers, full attention every 4th (2 layers), 2 KV heads of 256.
  ModelHParams hp;
  hp.n_layer = 8;
  hp.n_head_kv = 2;
  hp.head_dim = hp.head_dim_v = 256;
  for (int il = 0; il < 8; ++il) {
    const bool attn = (il + 1) % 4 == 0;
    hp.n_head_kv_layer.push_back(attn ? 2 : 0);
    hp.layer_has_attention.push_back(attn);
    hp.layer_is_recurrent.push_back(!attn);
  }
  hp.ssm_conv_kernel = 4;
  hp.ssm_state_size = 128;
  hp.ssm_group_count = 16;
  hp.ssm_dt_rank = 32;
  hp.ssm_inner_size = 32 * 128;
  const KvCost f16 = kv_cost(hp, 64);
  EXPECT_EQ(f16.per_token, 2u * 2 * (256 + 256) * 2);  // 2 attention layers only
  EXPECT_EQ(f16.fixed, hp.recurrent_state_bytes());
  EXPECT_GT(f16.fixed, 0u);
  const KvCost q8 = kv_cost(hp, 34);
  EXPECT_EQ(q8.per_token, 2u * 2 * (256 + 256) * 34 / 32);
  const std::string line = describe_kv_cost(hp, f16, "f16");
  EXPECT_NE(line.find("2 attention layers"), std::string::npos) << line;
  EXPECT_NE(line.find("per 1k tokens"), std::string::npos) << line;
  EXPECT_NE(line.find("recurrent state"), std::string::npos) << line;
}

}  // namespace
}  // namespace ms
