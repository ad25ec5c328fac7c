// StepScheduler: each decision of the tiered MoE step that used to live in
// the CUDA mechanism, checked on the CPU with a simulated slot pool.
#include "experts/step_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "experts/prefetch.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr uint32_t kLayers = 6, kExperts = 32, kTopK = 4;
constexpr uint64_t kSlot = 1u << 20;

StepSchedulerOptions options(uint64_t pool_bytes, uint32_t transit = 8, const std::string& policy = "lru") {
  StepSchedulerOptions o;
  ResidencyConfig& c = o.residency;
  c.n_layer = kLayers;
  c.n_expert = kExperts;
  c.k = kTopK;
  c.slot_bytes.assign(kLayers, kSlot);
  c.pool_bytes = pool_bytes;
  c.transit_slots = transit;
  c.policy = policy;
  return o;
}

// Keys e of `layer`, one token each.
void routes(uint32_t layer, std::initializer_list<uint32_t> experts, std::vector<ExpertKey>& keys,
            std::vector<uint32_t>& tokens, uint32_t per_expert = 1) {
  keys.clear();
  tokens.clear();
  for (uint32_t e : experts) keys.push_back(layer * kExperts + e);
  std::sort(keys.begin(), keys.end());
  tokens.assign(keys.size(), per_expert);
}

// A cost model whose CPU is too slow to take any expert (every cold one streams).
CostModel slow_cpu() {
  CostModel c;
  c.cpu_gbps = 0.001;
  c.cpu_gflops = 0.001;
  return c;
}

TEST(StepScheduler, TransitSlotsAreEvenAndAtLeastTwo) {
  EXPECT_EQ(StepScheduler::transit_slots(0), 2u);
  EXPECT_EQ(StepScheduler::transit_slots(1), 2u);
  EXPECT_EQ(StepScheduler::transit_slots(3), 2u);
  EXPECT_EQ(StepScheduler::transit_slots(16), 16u);
  EXPECT_EQ(StepScheduler::transit_slots(17), 16u);
  StepScheduler s(options(8 * kSlot, 7));
  EXPECT_EQ(s.residency().transit_slots(), 6u);
}

TEST(StepScheduler, TransitRingIsLargerForPromptsWhereTheBudgetHasRoom) {
  const auto all = [](uint32_t) { return true; };
  const auto none = [](uint32_t) { return false; };
  EXPECT_EQ(StepScheduler::choose_transit_slots(6, 512, 128, none), 6u);  // asked: as it is
  EXPECT_EQ(StepScheduler::choose_transit_slots(0, 1, 128, all), StepScheduler::kDecodeTransit);
  EXPECT_EQ(StepScheduler::choose_transit_slots(0, StepScheduler::kPromptTransitFrom - 1, 128, all),
            StepScheduler::kDecodeTransit);
  EXPECT_EQ(StepScheduler::choose_transit_slots(0, 512, 128, none), StepScheduler::kDecodeTransit);
  // Room to stage half of a layer's experts, at least kPromptTransit.
  EXPECT_EQ(StepScheduler::choose_transit_slots(0, StepScheduler::kPromptTransitFrom, 8, all),
            StepScheduler::kPromptTransit);
  EXPECT_EQ(StepScheduler::choose_transit_slots(0, 512, 128, all), 64u);
  EXPECT_EQ(StepScheduler::choose_transit_slots(0, 512, 256, all), 128u);
  EXPECT_EQ(StepScheduler::prompt_transit(100), 64u);  // 50, rounded up to a multiple of kDecodeTransit
  // The largest that fits, in steps of kDecodeTransit.
  const auto upto32 = [](uint32_t t) { return t <= 32; };
  EXPECT_EQ(StepScheduler::choose_transit_slots(0, 512, 256, upto32), 32u);
  const auto upto100 = [](uint32_t t) { return t <= 100; };
  EXPECT_EQ(StepScheduler::choose_transit_slots(0, 512, 256, upto100), 96u);
}

TEST(StepScheduler, StageBankFollowsThePrefetchMode) {
  EXPECT_EQ(StepScheduler::stage_bank(8, DecodePrefetch::Off), 0u);
  EXPECT_EQ(StepScheduler::stage_bank(8, DecodePrefetch::Next), 8u);
  EXPECT_EQ(StepScheduler::stage_bank(8, DecodePrefetch::Auto), 8u);
  StepSchedulerOptions o = options(8 * kSlot);
  o.tuning.prefetch = DecodePrefetch::Off;
  EXPECT_EQ(StepScheduler(o).residency().stage_bank(), 0u);
}

// The modes by name (the CLI's --prefetch): each round-trips; a bad name is
// an error that lists the good ones.
TEST(StepScheduler, PrefetchModesParseByName) {
  for (DecodePrefetch p : {DecodePrefetch::Off, DecodePrefetch::Next, DecodePrefetch::Auto})
    EXPECT_EQ(parse_decode_prefetch(decode_prefetch_name(p)), p);
  try {
    parse_decode_prefetch("sometimes");
    FAIL() << "no error for a bad mode";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sometimes"), std::string::npos) << what;
    EXPECT_NE(what.find("off, next or auto"), std::string::npos) << what;
  }
}

TEST(StepScheduler, WaveExpertsAreHalfTheTransitSlotsUpToEight) {
  EXPECT_EQ(StepScheduler(options(8 * kSlot, 2)).wave_experts(), 1u);
  EXPECT_EQ(StepScheduler(options(8 * kSlot, 8)).wave_experts(), 4u);
  EXPECT_EQ(StepScheduler(options(8 * kSlot, 16)).wave_experts(), 8u);
  EXPECT_EQ(StepScheduler(options(8 * kSlot, 64)).wave_experts(), 8u);
}

TEST(StepScheduler, InputComesWithTheRoutesForSmallPasses) {
  EXPECT_TRUE(StepScheduler::input_with_routes(1));
  EXPECT_TRUE(StepScheduler::input_with_routes(StepScheduler::kEagerInputTokens));
  EXPECT_FALSE(StepScheduler::input_with_routes(StepScheduler::kEagerInputTokens + 1));
}

TEST(StepScheduler, MeasuredCostFromTheProbeThenOverrides) {
  StepSchedulerOptions o = options(8 * kSlot);
  StepScheduler s(o);
  CostProbe p;
  p.link_bytes = 50e9, p.link_s = 1;  // 50 GB/s
  p.cpu_bytes = 3e9, p.cpu_s = 0.1;   // 30 GB/s
  p.batch_weight_bytes = 1e9, p.batch_s = 0.01;
  p.hbm_bytes = 2e12, p.hbm_s = 1;
  s.set_measured_cost(p);
  EXPECT_DOUBLE_EQ(s.cost().pcie_gbps, 50);
  EXPECT_DOUBLE_EQ(s.cost().cpu_gbps, 30);
  EXPECT_DOUBLE_EQ(s.cost().gpu_hbm_gbps, 2000);
  EXPECT_DOUBLE_EQ(s.prompt_cpu_gflops(), 1e9 * CostModel().flops_per_byte / 0.01 / 1e9);
  EXPECT_DOUBLE_EQ(s.residency().cost().pcie_gbps, 50);  // the residency plans with them
  // A probe that measured nothing keeps the defaults.
  s.set_measured_cost(CostProbe{});
  EXPECT_DOUBLE_EQ(s.cost().pcie_gbps, CostModel().pcie_gbps);
  EXPECT_EQ(s.prompt_cpu_gflops(), 0);
  // Overrides win; a cpu_gflops override replaces the batch figure.
  o.tuning.cost = CostOverrides::parse("pcie_gbps=20,cpu_gflops=7");
  StepScheduler t(o);
  t.set_measured_cost(p);
  EXPECT_DOUBLE_EQ(t.cost().pcie_gbps, 20);
  EXPECT_DOUBLE_EQ(t.cost().cpu_gflops, 7);
  EXPECT_EQ(t.prompt_cpu_gflops(), 0);
  // A bad figure never gets this far: parsing it is the error.
  EXPECT_THROW(CostOverrides::parse("warp_speed=9"), Error);
}

TEST(StepScheduler, PromptStagingThresholdAndTieredLayers) {
  StepScheduler s(options(8 * kSlot));
  s.initial_placement();
  // k/E = 1/8: routed with probability 0.95 from ceil(log 0.05 / log 0.875) = 23 tokens.
  EXPECT_EQ(s.prompt_stage_min(), 23);
  EXPECT_EQ(s.first_tiered(), 0);
  for (int l = 0; l + 1 < int(kLayers); ++l) EXPECT_EQ(s.next_tiered(l), l + 1);
  EXPECT_EQ(s.next_tiered(kLayers - 1), -1);
  EXPECT_TRUE(s.stages_prompt(23));
  EXPECT_FALSE(s.stages_prompt(22));
  s.begin_pass(23, true);  // a gated pass never stages
  EXPECT_FALSE(s.stages_prompt(23));
  s.end_pass();
  EXPECT_TRUE(s.stages_prompt(23));
  // Off by option.
  StepSchedulerOptions o = options(8 * kSlot);
  o.tuning.prompt_stage = false;
  StepScheduler off(o);
  off.initial_placement();
  EXPECT_EQ(off.prompt_stage_min(), 0);
  EXPECT_FALSE(off.stages_prompt(1000));
  // Whole layers pinned: they are skipped, and with every layer pinned nothing is tiered.
  StepScheduler layers(options(4 * kExperts * kSlot + kSlot, 8, "layers"));
  layers.initial_placement();
  EXPECT_GE(layers.pinned_layers(), 4u);
  EXPECT_LT(layers.pinned_layers(), kLayers);
  for (int l = -1; l < int(kLayers);) {
    const int next = l < 0 ? layers.first_tiered() : layers.next_tiered(l);
    if (next < 0) break;
    EXPECT_FALSE(layers.layer_pinned(uint32_t(next)));
    EXPECT_GT(next, l);
    l = next;
  }
  StepScheduler all(options(kLayers * kExperts * kSlot, 8, "layers"));
  all.initial_placement();
  EXPECT_EQ(all.pinned_layers(), kLayers);
  EXPECT_EQ(all.first_tiered(), -1);
  EXPECT_EQ(all.prompt_stage_min(), 0);
}

TEST(StepScheduler, PromptCopiesWinWhenTheLinkBeatsTheCpuAtThePassTokens) {
  StepSchedulerOptions o = options(8 * kSlot);
  StepScheduler s(o);
  CostModel c;
  c.pcie_gbps = 50;
  c.cpu_gbps = 100;  // faster than the link for one token...
  c.cpu_gflops = 10000;
  s.set_cost(c);
  EXPECT_FALSE(s.prompt_copies_win(0, 8));
  // ...but a pass of 2048 tokens puts 256 tokens on each expert: the CPU's
  // arithmetic loses to one copy.
  EXPECT_TRUE(s.prompt_copies_win(0, 2048));
  EXPECT_FALSE(s.prompt_copies_win(-1, 2048));
  c.pcie_gbps = 0.01;
  s.set_cost(c);
  EXPECT_FALSE(s.prompt_copies_win(0, 2048));
}

// Plans of a staged prompt pass put no expert on the CPU where the link wins
// (unless prompt_cpu), with the prompt's CPU start delay; the pass's end
// restores the decode cost and the CPU tier.
TEST(StepScheduler, StagedPromptsGiveTheCpuNoShareUnlessAsked) {
  for (bool prompt_cpu : {false, true}) {
    StepSchedulerOptions o = options(2 * kSlot, 2, "layers");  // nothing admitted: every cold expert is split
    o.tuning.prompt_cpu = prompt_cpu;
    StepScheduler s(o);
    s.initial_placement();
    CostModel c;
    c.pcie_gbps = 40;
    c.cpu_gbps = 40;
    c.cpu_gflops = 400;  // one copy beats the CPU at 8 tokens, but the CPU takes a share if it may
    s.set_cost(c);
    const int n = 64;
    ASSERT_TRUE(s.prompt_copies_win(0, n));
    s.note_prompt_cpu_delay(1e-4);
    ASSERT_TRUE(s.begin_pass(n, false));
    EXPECT_DOUBLE_EQ(s.residency().cost().cpu_start_us, 100);
    std::vector<ExpertKey> keys;
    std::vector<uint32_t> tokens;
    for (uint32_t e = 0; e < kExperts; ++e) keys.push_back(e), tokens.push_back(8);
    const LayerSchedule& ls = s.plan_layer(1, 0, keys, tokens);
    if (prompt_cpu) EXPECT_GT(ls.plan->plan.n_host, 0u);
    else EXPECT_EQ(ls.plan->plan.n_host, 0u);
    s.end_pass();
    EXPECT_EQ(s.residency().cost().cpu_start_us, 0);
    for (uint32_t e = 0; e < kExperts; ++e) keys[e] = kExperts + e;
    EXPECT_GT(s.plan_layer(2, 1, keys, tokens).plan->plan.n_host, 0u) << "a decode-cost plan gives the CPU a share";
  }
}

// Issue #43's worst cell (the Qwen3-30B-A3B shape in 12 layers at --vram
// 1065M): ~11 cache slots, the two-wave ring of 16 transit slots a pool, the
// H100 host's measured link (52 GB/s) and CPU (94 GB/s). A 512-token pass
// (experts/pass_size.h, choose_pass_plan) stages and streams every cold
// expert of a layer through the ring in waves of 8, the CPU taking none;
// the 16-token passes the prompt ring left gave the CPU a share (a copy
// takes longer than the CPU's read of an expert for one token).
TEST(StepScheduler, TheTenPercentQwen30bPromptStreamsEveryExpertThroughTheRing) {
  constexpr uint32_t L = 12, E = 128, K = 8;
  StepSchedulerOptions o;
  ResidencyConfig& c = o.residency;
  c.n_layer = L;
  c.n_expert = E;
  c.k = K;
  for (uint32_t l = 0; l < L; ++l) c.slot_bytes.push_back(l % 3 == 0 || l >= 9 ? 3'059'712 : 2'654'208);
  c.pool_bytes = 11 * 3'059'712;
  c.transit_slots = 16;
  c.policy = "layers";
  o.tuning.prefetch = DecodePrefetch::Auto;
  StepScheduler s(o);
  CostProbe p;
  p.link_bytes = 52e9, p.link_s = 1;
  p.cpu_bytes = 94e9, p.cpu_s = 1;
  s.set_measured_cost(p);
  s.initial_placement();
  EXPECT_EQ(s.prompt_stage_min(), 47);  // 0.95 of a layer's experts routed
  ASSERT_EQ(s.wave_experts(), 8u);
  std::vector<ExpertKey> keys;
  std::vector<uint32_t> tokens;
  auto whole_layer = [&](uint32_t layer, uint32_t per_expert) {
    keys.clear();
    tokens.clear();
    for (uint32_t e = 0; e < E; ++e) keys.push_back(layer * E + e), tokens.push_back(per_expert);
  };
  ASSERT_TRUE(s.begin_pass(512, false));
  const int layer = s.first_tiered();
  ASSERT_GE(layer, 0);
  const PromptStage& ps = s.stage_prompt(1, layer, 512);
  ASSERT_EQ(ps.layer, layer);
  EXPECT_EQ(ps.plan->copies.size(), 16u);
  whole_layer(static_cast<uint32_t>(layer), 512 * K / E);
  const LayerSchedule& ls = s.plan_layer(1, static_cast<uint32_t>(layer), keys, tokens);
  EXPECT_EQ(ls.plan->plan.n_host, 0u);
  EXPECT_EQ(ls.plan->plan.n_resident + ls.plan->plan.n_stream, E);
  EXPECT_GE(ls.plan->plan.n_stream, E - 11);
  size_t in_waves = 0;
  for (size_t w = 1; w < ls.waves.size(); ++w) EXPECT_LE(ls.waves[w].size(), 8u) << w;  // half the ring
  for (const auto& w : ls.waves) in_waves += w.size();
  EXPECT_EQ(in_waves, E);
  s.end_pass();
  // The 16-token passes: no staging, and the CPU takes some of the ~82
  // experts they route.
  EXPECT_FALSE(s.begin_pass(16, false));
  keys.clear();
  tokens.clear();
  for (uint32_t e = 0; e < E; e += 3) keys.push_back(uint32_t(layer + 1) * E + e), tokens.push_back(2);
  const LayerSchedule& small = s.plan_layer(2, uint32_t(layer + 1), keys, tokens);
  EXPECT_GT(small.plan->plan.n_host, keys.size() / 5);
  s.end_pass();
}

TEST(StepScheduler, PromptCpuDelayIsAMovingAverage) {
  StepScheduler s(options(8 * kSlot));
  s.note_prompt_cpu_delay(1.0);
  EXPECT_DOUBLE_EQ(s.prompt_cpu_start_s(), 1.0);
  s.note_prompt_cpu_delay(2.0);
  EXPECT_DOUBLE_EQ(s.prompt_cpu_start_s(), 0.7 * 1.0 + 0.3 * 2.0);
}

// Every planned GPU expert is in exactly one wave: resident ones in wave 0,
// transit ones wave_experts() per wave from wave 0 (transit expert j in wave
// j / wave_experts()); CPU experts in none.
TEST(StepScheduler, WavesHoldTransitExpertsInGroups) {
  StepSchedulerOptions o = options(4 * kSlot, 4, "layers");
  StepScheduler s(o);
  CostModel c = slow_cpu();
  s.set_cost(c);
  s.initial_placement();
  std::vector<ExpertKey> keys;
  std::vector<uint32_t> tokens;
  for (uint32_t e = 0; e < 12; ++e) keys.push_back(2 * kExperts + e), tokens.push_back(3);
  const LayerSchedule& ls = s.plan_layer(1, 2, keys, tokens);
  const StepPlan& sp = *ls.plan;
  std::set<size_t> seen;
  uint32_t j = 0;  // transit experts in plan order
  for (size_t w = 0; w < ls.waves.size(); ++w)
    for (size_t i : ls.waves[w]) {
      EXPECT_TRUE(seen.insert(i).second);
      const PlannedExpert& pe = sp.plan.experts[i];
      ASSERT_NE(pe.tier, Tier::Host);
      if (sp.transit[i] && sp.copy[i]) EXPECT_EQ(w, j++ / s.wave_experts());
      else EXPECT_EQ(w, 0u);
    }
  uint32_t transit = 0;
  for (size_t i = 0; i < sp.plan.experts.size(); ++i) {
    if (sp.plan.experts[i].tier != Tier::Host) EXPECT_TRUE(seen.count(i));
    transit += sp.transit[i] && sp.copy[i];
  }
  EXPECT_EQ(ls.n_transit, transit);
  ASSERT_GT(transit, s.wave_experts());
  for (size_t w = 1; w < ls.waves.size(); ++w) EXPECT_LE(ls.waves[w].size(), s.wave_experts());
  EXPECT_EQ(ls.waves.size(), (transit + s.wave_experts() - 1) / s.wave_experts());
  // A gated layer gets no waves.
  const LayerSchedule& g = s.plan_layer(2, 3, std::vector<ExpertKey>{3 * kExperts + 1}, std::vector<uint32_t>{1}, true);
  for (const auto& w : g.waves) EXPECT_TRUE(w.empty());
}

// A prompt's stage: every cold expert of the layer up to the transit slots,
// in copy groups of wave_experts(); the layer's plan then puts each staged
// expert in its group's wave, the rest after.
TEST(StepScheduler, PromptStageGroupsAndTheirWaves) {
  StepSchedulerOptions o = options(4 * kSlot, 8, "layers");  // admits nothing
  StepScheduler s(o);
  s.set_cost(slow_cpu());
  s.initial_placement();
  const int n = 256;
  ASSERT_TRUE(s.begin_pass(n, false));
  const PromptStage& ps = s.stage_prompt(1, s.first_tiered(), n);
  ASSERT_EQ(ps.layer, 0);
  ASSERT_NE(ps.plan, nullptr);
  EXPECT_EQ(ps.plan->copies.size(), 8u);  // the transit slots
  ASSERT_EQ(ps.group_end.size(), 2u);     // groups of 4
  EXPECT_EQ(ps.group_end[0], 4u);
  EXPECT_EQ(ps.group_end[1], 8u);
  for (size_t j = 0; j < ps.plan->copies.size(); ++j)
    EXPECT_EQ(s.prompt_group(ps.plan->copies[j].first % kExperts), int(j / 4));
  std::vector<ExpertKey> keys;
  std::vector<uint32_t> tokens;
  for (uint32_t e = 0; e < kExperts; ++e) keys.push_back(e), tokens.push_back(32);
  const LayerSchedule& ls = s.plan_layer(1, 0, keys, tokens);
  EXPECT_TRUE(ls.from_prompt_stage);
  EXPECT_EQ(ls.bank, -1);
  const StepPlan& sp = *ls.plan;
  uint32_t staged = 0;
  for (size_t w = 0; w < ls.waves.size(); ++w)
    for (size_t i : ls.waves[w]) {
      const PlannedExpert& pe = sp.plan.experts[i];
      if (pe.staged) {
        ++staged;
        EXPECT_EQ(int(w), s.prompt_group(pe.key % kExperts));
      } else if (sp.transit[i] && sp.copy[i]) {
        EXPECT_GE(w, 2u);  // after the stage's groups
      }
    }
  EXPECT_EQ(staged, 8u);
  // The next layer's stage replaces this one; where the CPU wins, nothing is staged.
  EXPECT_EQ(s.stage_prompt(1, 1, n).layer, 1);
  CostModel slow_link;
  slow_link.pcie_gbps = 0.001;
  s.set_cost(slow_link);
  EXPECT_EQ(s.stage_prompt(1, 2, n).layer, -1);
  EXPECT_EQ(s.prompt_group(0), -1);
  s.end_pass();
}

TEST(StepScheduler, DecodeTakesTheAllResidentKernelsOnlyWithEveryExpertOnTheGpu) {
  StepSchedulerOptions o = options(8 * kSlot, 2, "layers");  // layer 0's experts 0..7 resident, none admitted
  StepScheduler s(o);
  s.set_cost(slow_cpu());
  s.initial_placement();
  std::vector<ExpertKey> keys;
  std::vector<uint32_t> tokens;
  routes(0, {0, 1}, keys, tokens);  // resident after the initial spread
  const LayerSchedule& a = s.plan_layer(1, 0, keys, tokens);
  EXPECT_TRUE(s.decode_all_on_gpu(1, a, true));
  EXPECT_FALSE(s.decode_all_on_gpu(1, a, false));
  EXPECT_FALSE(s.decode_all_on_gpu(2, a, true));
  routes(0, {20, 21, 22, 23}, keys, tokens);  // 4 streamed, 2 transit slots
  const LayerSchedule& b = s.plan_layer(2, 0, keys, tokens);
  ASSERT_EQ(b.n_transit, 4u);
  EXPECT_FALSE(s.decode_all_on_gpu(1, b, true));
  // A CPU expert: not all on the GPU.
  CostModel fast_cpu;
  fast_cpu.pcie_gbps = 0.01;
  s.set_cost(fast_cpu);
  routes(1, {25, 26}, keys, tokens);
  const LayerSchedule& c = s.plan_layer(3, 1, keys, tokens);
  ASSERT_GT(c.plan->plan.n_host, 0u);
  EXPECT_FALSE(s.decode_all_on_gpu(1, c, true));
}

TEST(StepScheduler, DecodeStagingCountByPrefetchMode) {
  std::vector<ExpertKey> predicted;
  for (uint32_t e = 28; e < 32; ++e) predicted.push_back(1 * kExperts + e);  // cold after the spread
  // next: every predicted cold expert (a bank holds k).
  StepSchedulerOptions o = options(4 * kSlot);
  o.tuning.prefetch = DecodePrefetch::Next;
  StepScheduler next(o);
  next.initial_placement();
  DecodeStage d = next.stage_decode(1, 1, predicted);
  ASSERT_NE(d.plan, nullptr);
  EXPECT_EQ(d.plan->copies.size(), 4u);
  EXPECT_FALSE(d.publish);  // not a gated pass
  // auto: decode_stage_count's balance of link and CPU.
  o.tuning.prefetch = DecodePrefetch::Auto;
  StepScheduler a(o);
  a.initial_placement();
  const CostModel& c = a.cost();
  const uint32_t want = decode_stage_count(4, 0, 0, 0, c.copy_s(kSlot), c.cpu_s(kSlot, 1));
  EXPECT_EQ(a.stage_decode(1, 1, predicted).plan->copies.size(), want);
  // A measured host overhead before the CPU starts gives the link more.
  a.note_host_overhead(1e-3);
  EXPECT_EQ(a.stage_decode(2, 1, predicted).plan->copies.size(),
            decode_stage_count(4, 0, 0, 1e-3, c.copy_s(kSlot), c.cpu_s(kSlot, 1)));
  // Gated: the stretch before the routes counts, and a stage of every cold one may be published.
  a.begin_pass(1, true);
  const auto t0 = StepScheduler::Clock::now();
  a.note_staged(1, 7, t0);
  a.note_routes(1, 7, t0 + std::chrono::milliseconds(50));
  EXPECT_NEAR(a.route_gap_s(1), 0.05, 1e-9);
  d = a.stage_decode(3, 1, predicted);
  EXPECT_EQ(d.plan->copies.size(), 4u);  // 50 ms of link time: all of them
  EXPECT_TRUE(d.publish);
  EXPECT_EQ(a.staging_stats().stagings, 1u);
  a.end_pass();
  // staged_hits off: never published.
  o.tuning.staged_hits = false;
  StepScheduler nh(o);
  nh.initial_placement();
  nh.begin_pass(1, true);
  nh.note_staged(1, 1, t0);
  nh.note_routes(1, 1, t0 + std::chrono::milliseconds(50));
  EXPECT_FALSE(nh.stage_decode(1, 1, predicted).publish);
  // A dense or unknown layer stages nothing.
  EXPECT_EQ(nh.stage_decode(1, kLayers, predicted).plan, nullptr);
}

TEST(StepScheduler, RouteGapIsAMovingAverageOfItsOwnStep) {
  StepScheduler s(options(8 * kSlot));
  const auto t0 = StepScheduler::Clock::now();
  s.note_staged(2, 5, t0);
  s.note_routes(2, 4, t0 + std::chrono::milliseconds(3));  // another step's routes: ignored
  EXPECT_EQ(s.route_gap_s(2), 0);
  s.note_routes(2, 5, t0 + std::chrono::milliseconds(10));
  EXPECT_NEAR(s.route_gap_s(2), 0.010, 1e-9);
  s.note_staged(2, 6, t0);
  s.note_routes(2, 6, t0 + std::chrono::milliseconds(20));
  EXPECT_NEAR(s.route_gap_s(2), 0.8 * 0.010 + 0.2 * 0.020, 1e-9);
}

TEST(StepScheduler, HostOverheadKeepsTheLeast) {
  StepScheduler s(options(8 * kSlot));
  s.note_host_overhead(3e-5);
  s.note_host_overhead(5e-5);
  EXPECT_DOUBLE_EQ(s.host_overhead_s(), 3e-5);
  s.note_host_overhead(1e-5);
  EXPECT_DOUBLE_EQ(s.host_overhead_s(), 1e-5);
}

// The link's queue: copies noted at `now` run back to back at the cost
// model's rate; an idle link starts a copy at once.
TEST(StepScheduler, LinkBacklogCountsQueuedCopies) {
  StepScheduler s(options(8 * kSlot));
  CostModel c;
  c.pcie_gbps = 1;  // 1 MiB: ~1.05 ms
  c.copy_overhead_us = 0;
  s.set_cost(c);
  const auto t0 = StepScheduler::Clock::now();
  EXPECT_EQ(s.link_backlog_s(t0), 0);
  s.note_link(kSlot, t0);
  s.note_link(kSlot, t0);
  const double one = double(kSlot) / 1e9;
  EXPECT_NEAR(s.link_backlog_s(t0), 2 * one, 1e-8);
  EXPECT_NEAR(s.link_backlog_s(t0 + std::chrono::microseconds(500)), 2 * one - 5e-4, 1e-8);
  EXPECT_EQ(s.link_backlog_s(t0 + std::chrono::seconds(1)), 0);
  // Queued after an idle stretch: from then, not from the old end.
  s.note_link(kSlot, t0 + std::chrono::seconds(1));
  EXPECT_NEAR(s.link_backlog_s(t0 + std::chrono::seconds(1)), one, 1e-8);
}

// A gated layer plans with the link's backlog when stage_gap is on: the
// split leaves the CPU more when the link is busy.
TEST(StepScheduler, GatedPlansCountTheLinkBacklog) {
  for (bool gap : {true, false}) {
    StepSchedulerOptions o = options(2 * kSlot, 8, "layers");
    o.tuning.stage_gap = gap;
    StepScheduler s(o);
    CostModel c;
    c.pcie_gbps = 10;
    c.cpu_gbps = 10;
    s.set_cost(c);
    s.initial_placement();
    for (int i = 0; i < 100; ++i) s.note_link(kSlot);  // ~10 ms queued
    std::vector<ExpertKey> keys;
    std::vector<uint32_t> tokens;
    routes(3, {20, 21, 22, 23}, keys, tokens);
    const uint32_t host = s.plan_layer(1, 3, keys, tokens, true).plan->plan.n_host;
    if (gap) EXPECT_EQ(host, 4u);
    else EXPECT_LT(host, 4u);
  }
}

}  // namespace
}  // namespace ms
