// MoeStep (engine/moe_step.h) through a recording MoeTiers, in each of its
// plans (engine/moe_tiers.h): resident (the device runs the layer alone),
// planned (waves, or one decode token on the device's fused kernel) and
// gated (the host half of a gated decode token, the device present or not).
// Every (token, expert) pair is computed exactly once, by the tier the
// scheduler chose; a wave's copies precede its compute; combine comes last
// and sums in pair order. The fake tiers compute a cheap function of
// (token, expert) so that the result can be compared with a plain reference
// bit for bit.
#include "engine/moe_step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>

#include "util/error.h"

namespace ms {
namespace {

constexpr int kLayers = 4, kExperts = 16, kTopK = 4, kDim = 3;
constexpr uint64_t kSlot = 1u << 20;

StepSchedulerOptions options(uint32_t cache_slots, uint32_t transit, const std::string& policy) {
  StepSchedulerOptions o;
  ResidencyConfig& c = o.residency;
  c.n_layer = kLayers;
  c.n_expert = kExperts;
  c.k = kTopK;
  c.slot_bytes.assign(kLayers, kSlot);
  c.pool_bytes = cache_slots * kSlot;
  c.transit_slots = transit;
  c.policy = policy;
  o.tuning.prefetch = DecodePrefetch::Off;
  return o;
}

// Expert e of the fake model on token t's input.
float expert_out(int t, int e, int d) { return 0.25f * float(t + 1) + 1.0f / float(e + 2) - 0.125f * float(d); }

struct Routes {
  std::vector<int32_t> ids;  // [n][k], distinct experts per token
  std::vector<float> w;      // [n][k]
};

Routes random_routes(std::mt19937& rng, int n) {
  Routes r;
  std::vector<int32_t> all(kExperts);
  for (int e = 0; e < kExperts; ++e) all[static_cast<size_t>(e)] = e;
  std::uniform_real_distribution<float> wd(0.05f, 1.0f);
  for (int t = 0; t < n; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    for (int j = 0; j < kTopK; ++j) {
      r.ids.push_back(all[static_cast<size_t>(j)]);
      r.w.push_back(wd(rng));
    }
  }
  return r;
}

// h[t] += sum_j w[t][j] * expert(ids[t][j])(t), j ascending.
std::vector<float> reference(const Routes& r, int n) {
  std::vector<float> h(static_cast<size_t>(n) * kDim, 0.5f);
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < kTopK; ++j)
      for (int d = 0; d < kDim; ++d)
        h[static_cast<size_t>(t * kDim + d)] +=
            r.w[static_cast<size_t>(t * kTopK + j)] * expert_out(t, r.ids[static_cast<size_t>(t * kTopK + j)], d);
  return h;
}

// Records every call and computes the pairs as the tiers would.
class FakeTiers : public MoeTiers {
 public:
  FakeTiers(const Routes& r, int n, bool kernels_take) : r_(r), n_(n), kernels_take_(kernels_take) {
    y_.assign(static_cast<size_t>(n) * kTopK * kDim, std::nanf(""));  // poisoned: every pair must be written
    host_y_.assign(static_cast<size_t>(n) * kTopK * kDim, std::nanf(""));
    h_.assign(static_cast<size_t>(n) * kDim, 0.5f);
    computed_.assign(static_cast<size_t>(n) * kTopK, 0);
    tier_of_pair_.assign(static_cast<size_t>(n) * kTopK, -1);
  }

  // The resident plan: the device's fused kernel over every pair, its sum included.
  bool device_runs_layer(int, int n) const override {
    EXPECT_EQ(n, n_);
    return device_runs_;
  }
  void run_on_device(int, int) override {
    log("run_on_device");
    for (int p = 0; p < n_ * kTopK; ++p) {
      write(y_, p, p / kTopK, r_.ids[static_cast<size_t>(p)]);
      note(p, r_.ids[static_cast<size_t>(p)], 0);
    }
    sum();
  }
  MoeRoutes fetch_routes(int, int n, bool) override {
    log("fetch_routes");
    EXPECT_EQ(n, n_);
    MoeRoutes r{r_.ids.data(), nullptr, -1, 0};
    if (!gated_) return r;
    r.gated = true;
    r.present = present_;
    if (pred_layer_ >= 0) {
      r.pred_ids = pred_.data();
      r.pred_layer = pred_layer_;
      r.pred_n = static_cast<int>(pred_.size());
    }
    // Present: the device went on with every expert at once.
    if (present_) run_on_device(0, n);
    return r;
  }
  void planned(int, const LayerSchedule& s, const MoeStepTables&) override {
    log("planned");
    sp_ = s.plan;
  }
  void point(int, int expert, SlotRef where) override {
    log("point");
    EXPECT_TRUE(where.valid());
    pointed_.insert(expert);
  }
  bool decode_kernels_take(int) const override { return kernels_take_; }
  void decode_on_device(int, const StepPlan& sp, const std::vector<size_t>& experts, bool) override {
    log("decode_on_device");
    EXPECT_EQ(n_, 1);
    std::set<int> on_device;
    for (size_t i : experts) {
      EXPECT_NE(sp.plan.experts[i].tier, Tier::Host);
      on_device.insert(static_cast<int>(sp.plan.experts[i].key % kExperts));
    }
    for (int j = 0; j < kTopK; ++j) {
      const int e = r_.ids[static_cast<size_t>(j)];
      if (!on_device.count(e)) continue;
      write(y_, j, 0, e);
      note(j, e, 0);
    }
    // Gated: the device's sum goes on at once unless it waits for host rows.
    if (gated_ && tables_->host_work.empty()) sum();
  }
  void fetch_input(int, int) override { log("fetch_input"); }
  void upload_tables(int, const MoeStepTables&) override { log("upload_tables"); }
  void begin_waves(int, bool) override { log("begin_waves"); }
  void copy_wave(int, const StepPlan& sp, const std::vector<size_t>& wave, size_t index) override {
    log("copy_wave");
    for (size_t i : wave)
      if (sp.copy[i]) copied_.insert(i);
    copied_waves_.insert(index);
  }
  void compute_wave(int, int, const StepPlan& sp, const std::vector<size_t>& wave, const MoeWave& w) override {
    log("compute_wave");
    for (size_t i : wave)
      if (sp.copy[i]) EXPECT_TRUE(copied_.count(i)) << "expert " << i << " computed before its copy";
    if (w.copies) EXPECT_TRUE(copied_waves_.count(w.index));
    const MoeStepTables& t = *tables_;
    // Chunked: offsets count from the chunk's first row, and an end entry
    // follows the chunk's groups.
    const int base = chunk_rows_ > 0 ? w.row_begin : 0;
    if (chunk_rows_ > 0) {
      EXPECT_LE(w.row_end - w.row_begin, chunk_rows_);
      EXPECT_EQ(t.group_offset[static_cast<size_t>(w.group_end)], w.row_end - w.row_begin);
      EXPECT_EQ(t.group_expert[static_cast<size_t>(w.group_end)], -1);
    } else {
      EXPECT_EQ(w.group_end - w.group_begin, static_cast<int>(wave.size()));
    }
    std::set<int> of_wave;
    for (size_t i : wave) of_wave.insert(static_cast<int>(sp.plan.experts[i].key % kExperts));
    for (int g = w.group_begin; g < w.group_end; ++g) {
      const int e = t.group_expert[static_cast<size_t>(g)];
      if (chunk_rows_ == 0)
        EXPECT_EQ(e, static_cast<int>(sp.plan.experts[wave[static_cast<size_t>(g - w.group_begin)]].key % kExperts));
      EXPECT_TRUE(of_wave.count(e)) << "expert " << e << " is not in the wave";
      EXPECT_LE(t.group_offset[static_cast<size_t>(g) + 1] - t.group_offset[static_cast<size_t>(g)], w.max_rows);
      EXPECT_LT(t.group_offset[static_cast<size_t>(g)], t.group_offset[static_cast<size_t>(g) + 1]);
      for (int row = base + t.group_offset[static_cast<size_t>(g)]; row < base + t.group_offset[static_cast<size_t>(g) + 1];
           ++row) {
        EXPECT_GE(row, w.row_begin);
        EXPECT_LT(row, w.row_end);
        const int p = t.pair_of_row[static_cast<size_t>(row)];
        EXPECT_EQ(t.token_of_row[static_cast<size_t>(row)], p / kTopK);
        write(y_, p, t.token_of_row[static_cast<size_t>(row)], e);
        note(p, e, 0);
      }
    }
  }
  void end_waves(int, bool) override { log("end_waves"); }
  void stage_decode(int, const DecodeStage&) override { log("stage_decode"); }
  void stage_prompt(const PromptStage&) override { log("stage_prompt"); }
  void enqueued(int) override { log("enqueued"); }
  void compute_share(const MoeShare& s) override {
    log("compute_share");
    EXPECT_EQ(s.tier, Tier::Host);
    EXPECT_EQ(s.n_tokens, n_);
    ASSERT_NE(s.work, nullptr);
    EXPECT_FALSE(s.work->empty());
    for (const ExpertWork& wk : *s.work) {
      ASSERT_EQ(wk.tokens.size(), wk.slots.size());
      for (size_t q = 0; q < wk.tokens.size(); ++q) {
        const int row = wk.slots[q];
        ASSERT_GE(row, 0);
        ASSERT_LT(row, s.rows);
        write(host_y_, row, wk.tokens[q], wk.expert);
        const int p = s.pair(row);
        EXPECT_EQ(wk.tokens[q], p / kTopK);
        note(p, wk.expert, 1);
        // The host's rows go up into the pairs' outputs.
        for (int d = 0; d < kDim; ++d)
          y_[static_cast<size_t>(p * kDim + d)] = host_y_[static_cast<size_t>(row * kDim + d)];
      }
    }
  }
  void combine(int, int n) override {
    log("combine");
    EXPECT_EQ(n, n_);
    sum();
  }
  void sum() {
    EXPECT_FALSE(summed_) << "the pairs were summed twice";
    summed_ = true;
    for (int t = 0; t < n_; ++t)
      for (int j = 0; j < kTopK; ++j)
        for (int d = 0; d < kDim; ++d)
          h_[static_cast<size_t>(t * kDim + d)] +=
              r_.w[static_cast<size_t>(t * kTopK + j)] * y_[static_cast<size_t>((t * kTopK + j) * kDim + d)];
  }

  void write(std::vector<float>& y, int row, int token, int e) {
    for (int d = 0; d < kDim; ++d) y[static_cast<size_t>(row * kDim + d)] = expert_out(token, e, d);
  }
  void note(int p, int e, int tier) {
    ASSERT_GE(p, 0);
    ASSERT_LT(p, n_ * kTopK);
    EXPECT_EQ(e, r_.ids[static_cast<size_t>(p)]) << "pair " << p << " computed with the wrong expert";
    ++computed_[static_cast<size_t>(p)];
    tier_of_pair_[static_cast<size_t>(p)] = tier;
  }
  void log(const char* what) { calls_.push_back(what); }

  const Routes& r_;
  int n_;
  bool kernels_take_;
  bool device_runs_ = false;  // the resident plan
  bool gated_ = false, present_ = false;  // the gated plan
  int pred_layer_ = -1;
  std::vector<int32_t> pred_;
  bool summed_ = false;
  const MoeStepTables* tables_ = nullptr;
  int chunk_rows_ = 0;
  const StepPlan* sp_ = nullptr;
  std::vector<float> y_, host_y_, h_;
  std::vector<int> computed_, tier_of_pair_;
  std::set<int> pointed_;
  std::set<size_t> copied_, copied_waves_;
  std::vector<std::string> calls_;
};

size_t first_of(const std::vector<std::string>& calls, const std::string& s) {
  return static_cast<size_t>(std::find(calls.begin(), calls.end(), s) - calls.begin());
}
size_t last_of(const std::vector<std::string>& calls, const std::string& s) {
  for (size_t i = calls.size(); i-- > 0;)
    if (calls[i] == s) return i;
  return calls.size();
}

struct Case {
  std::string policy;
  uint32_t cache_slots, transit;
  double cpu_gbps;  // low: every cold expert streams; high: the CPU takes some
};

// Pairs per tier over every check_steps run (the cases must give both).
uint64_t all_host_pairs = 0, all_device_pairs = 0;

// Runs `steps` passes of n tokens over every layer, checking each layer step.
void check_steps(const Case& cs, int n, int steps, bool kernels_take, uint32_t seed, int chunk_rows = 0) {
  SCOPED_TRACE("policy " + cs.policy + ", " + std::to_string(cs.cache_slots) + " slots, n " + std::to_string(n) +
               ", cpu " + std::to_string(cs.cpu_gbps) + (kernels_take ? ", decode kernels" : ""));
  StepScheduler sched(options(cs.cache_slots, cs.transit, cs.policy));
  CostModel cost;
  cost.cpu_gbps = cs.cpu_gbps;
  cost.cpu_gflops = cs.cpu_gbps * 10;
  sched.set_cost(cost);
  sched.initial_placement();
  MoeStep step(kExperts, kTopK, &sched);
  step.set_chunk_rows(chunk_rows);
  std::mt19937 rng(seed);
  uint64_t host_pairs = 0, device_pairs = 0;
  for (int s = 0; s < steps; ++s) {
    sched.begin_pass(n, false);
    if (sched.stages_prompt(n)) sched.stage_prompt(static_cast<uint64_t>(s), sched.first_tiered(), n);
    for (int layer = 0; layer < kLayers; ++layer) {
      const Routes r = random_routes(rng, n);
      FakeTiers tiers(r, n, kernels_take);
      tiers.tables_ = &step.tables();
      tiers.chunk_rows_ = chunk_rows;
      step.run(static_cast<uint64_t>(s), layer, n, tiers);
      // Chunked: every chunk within the bound, and a wave longer than it cut.
      if (chunk_rows > 0)
        for (const MoeWave& w : step.tables().waves) EXPECT_LE(w.row_end - w.row_begin, chunk_rows);
      // The group tables within the bound a device tier sizes its index buffer by.
      EXPECT_LE(step.tables().group_offset.size(), MoeStep::group_entries_bound(int64_t{n} * kTopK, kExperts, chunk_rows));
      EXPECT_LE(step.tables().group_expert.size(), MoeStep::group_entries_bound(int64_t{n} * kTopK, kExperts, chunk_rows));
      // Every pair once, by the tier the plan chose.
      ASSERT_NE(tiers.sp_, nullptr);
      std::map<int, Tier> tier_of_expert;
      for (const PlannedExpert& pe : tiers.sp_->plan.experts) tier_of_expert[int(pe.key % kExperts)] = pe.tier;
      for (int p = 0; p < n * kTopK; ++p) {
        EXPECT_EQ(tiers.computed_[static_cast<size_t>(p)], 1) << "pair " << p;
        const Tier t = tier_of_expert.at(r.ids[static_cast<size_t>(p)]);
        EXPECT_EQ(tiers.tier_of_pair_[static_cast<size_t>(p)], t == Tier::Host ? 1 : 0) << "pair " << p;
        (t == Tier::Host ? host_pairs : device_pairs) += 1;
      }
      for (const auto& [e, t] : tier_of_expert) EXPECT_EQ(tiers.pointed_.count(e) == 1, t != Tier::Host);
      // Call order.
      const std::vector<std::string>& c = tiers.calls_;
      ASSERT_FALSE(c.empty());
      EXPECT_EQ(c.front(), "fetch_routes");
      const bool on_device = first_of(c, "decode_on_device") < c.size();
      if (!on_device) {
        EXPECT_EQ(c.back(), "combine");
        EXPECT_EQ(std::count(c.begin(), c.end(), "combine"), 1);
        if (last_of(c, "compute_wave") < c.size()) EXPECT_LT(last_of(c, "compute_wave"), first_of(c, "end_waves"));
        EXPECT_LT(first_of(c, "upload_tables"), first_of(c, "begin_waves"));
        EXPECT_LT(last_of(c, "enqueued"), first_of(c, "combine"));
        if (first_of(c, "compute_share") < c.size()) EXPECT_LT(first_of(c, "enqueued"), first_of(c, "compute_share"));
        EXPECT_EQ(tiers.h_, reference(r, n));  // bit for bit: the same sums in the same order
      } else {
        EXPECT_EQ(first_of(c, "compute_wave"), c.size());
        EXPECT_EQ(first_of(c, "compute_share"), c.size());
        EXPECT_EQ(first_of(c, "combine"), c.size());
      }
    }
    sched.end_pass();
  }
  // A slow CPU takes no pair (every cold expert streams).
  if (cs.cpu_gbps < 1) {
    EXPECT_GT(device_pairs, 0u);
    EXPECT_EQ(host_pairs, 0u);
  }
  all_host_pairs += host_pairs;
  all_device_pairs += device_pairs;
}

const Case kCases[] = {
    {"lru", 8, 4, 0.001},       {"lru", 8, 4, 1e4},        {"layers", 4, 8, 0.001}, {"layers", 2, 2, 1e4},
    {"adaptive", 16, 4, 40},    {"lfu-decay", 6, 6, 1e4},  {"slru", 32, 4, 40},      {"lru", 0, 2, 1e4},
};

TEST(MoeStep, DecodeEveryPairOnceInItsTier) {
  uint32_t seed = 1;
  for (const Case& cs : kCases) check_steps(cs, 1, 6, false, seed++);
}

TEST(MoeStep, DecodeAllOnDeviceTakesTheBackendsKernel) {
  uint32_t seed = 100;
  for (const Case& cs : kCases) check_steps(cs, 1, 6, true, seed++);
}

TEST(MoeStep, PromptSizesEveryPairOnceInItsTier) {
  uint32_t seed = 200;
  for (const Case& cs : kCases)
    for (int n : {2, 7, 33, 130}) check_steps(cs, n, 2, false, seed++);
  EXPECT_GT(all_host_pairs, 0u);
  EXPECT_GT(all_device_pairs, 0u);
}

// Row chunks (#29): every pair once in its tier, chunks within the bound,
// offsets from each chunk's first row, the wave's copies before its first
// chunk, the result bit for bit.
TEST(MoeStep, RowChunksKeepEveryPairOnce) {
  uint32_t seed = 300;
  for (const Case& cs : kCases)
    for (int chunk : {1, 3, 8, 50})
      for (int n : {1, 7, 33, 130}) check_steps(cs, n, 2, false, seed++, chunk);
}

// A wave longer than the chunk is cut: more MoeWave than the schedule's waves.
TEST(MoeStep, LongWavesAreCutIntoChunks) {
  StepScheduler sched(options(32, 4, "lru"));
  CostModel cost;
  cost.cpu_gbps = 0.001;
  cost.cpu_gflops = 0.001;
  sched.set_cost(cost);
  sched.initial_placement();
  MoeStep step(kExperts, kTopK, &sched);
  step.set_chunk_rows(16);
  std::mt19937 rng(11);
  const int n = 64;
  const Routes r = random_routes(rng, n);
  FakeTiers tiers(r, n, false);
  tiers.tables_ = &step.tables();
  tiers.chunk_rows_ = 16;
  sched.begin_pass(n, false);
  step.run(0, 1, n, tiers);
  sched.end_pass();
  const MoeStepTables& t = step.tables();
  EXPECT_EQ(t.rows, n * kTopK);  // every pair on the device
  EXPECT_GE(t.waves.size(), static_cast<size_t>(n * kTopK / 16));
  int copying = 0;
  for (const MoeWave& w : t.waves) copying += w.copies;
  std::set<size_t> waves;
  for (const MoeWave& w : t.waves) waves.insert(w.index);
  EXPECT_LE(copying, static_cast<int>(waves.size()));  // a wave's copies once, with its first chunk
  EXPECT_EQ(tiers.h_, reference(r, n));
}

// The CPU has host work in some case: the split is not vacuous.
TEST(MoeStep, FastCpuTakesSomePairs) {
  StepScheduler sched(options(0, 2, "lru"));
  CostModel cost;
  cost.cpu_gbps = 1e4;
  cost.cpu_gflops = 1e5;
  cost.pcie_gbps = 0.01;
  sched.set_cost(cost);
  sched.initial_placement();
  MoeStep step(kExperts, kTopK, &sched);
  std::mt19937 rng(7);
  const Routes r = random_routes(rng, 5);
  FakeTiers tiers(r, 5, false);
  tiers.tables_ = &step.tables();
  sched.begin_pass(5, false);
  step.run(0, 1, 5, tiers);
  sched.end_pass();
  EXPECT_TRUE(std::count(tiers.tier_of_pair_.begin(), tiers.tier_of_pair_.end(), 1) > 0);
  EXPECT_EQ(tiers.h_, reference(r, 5));
}

// Without a scheduler every pair is the host's, its rows the pair indices:
// group_by_expert's work list.
TEST(MoeStep, HostOnlyStepIsGroupByExpert) {
  std::mt19937 rng(3);
  for (int n : {1, 2, 9, 64}) {
    MoeStep step(kExperts, kTopK, nullptr);
    const Routes r = random_routes(rng, n);
    FakeTiers tiers(r, n, false);
    tiers.tables_ = &step.tables();
    step.run(0, 2, n, tiers);
    const std::vector<std::string> want = {"fetch_routes", "compute_share", "combine"};
    EXPECT_EQ(tiers.calls_, want);
    const std::vector<ExpertWork> ref = group_by_expert(r.ids.data(), n, kTopK, kExperts);
    const std::vector<ExpertWork>& got = step.tables().host_work;
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[i].expert, ref[i].expert);
      EXPECT_EQ(got[i].tokens, ref[i].tokens);
      EXPECT_EQ(got[i].slots, ref[i].slots);
    }
    EXPECT_EQ(tiers.h_, reference(r, n));
  }
}

TEST(MoeStep, RouteOutOfRangeIsAnError) {
  MoeStep step(kExperts, kTopK, nullptr);
  Routes r;
  r.ids = {0, 1, kExperts, 2};
  r.w = {1, 1, 1, 1};
  FakeTiers tiers(r, 1, false);
  tiers.tables_ = &step.tables();
  try {
    step.run(0, 0, 1, tiers);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("router chose expert 16 of 16"), std::string::npos) << e.what();
  }
  StepScheduler sched(options(4, 2, "lru"));
  sched.initial_placement();
  MoeStep planned(kExperts, kTopK, &sched);
  const int32_t bad[] = {3, -1};
  EXPECT_THROW(planned.stage_decode(0, 1, bad, 2), Error);
  EXPECT_THROW(MoeStep(4, 5, nullptr), Error);
}

// The resident plan: the device runs the whole layer from its own routes
// (an all-resident model, a pinned layer, a gated layer's device half):
// one call, nothing read back or planned, with or without a scheduler, and
// the scheduler's clock and residency untouched.
TEST(MoeStep, ResidentPlanRunsOnTheDeviceAlone) {
  std::mt19937 rng(21);
  StepScheduler sched(options(8, 4, "lru"));
  sched.initial_placement();
  MoeStep tiered(kExperts, kTopK, &sched), host_only(kExperts, kTopK, nullptr);
  for (MoeStep* step : {&tiered, &host_only})
    for (int n : {1, 3, 64}) {
      const Routes r = random_routes(rng, n);
      FakeTiers tiers(r, n, false);
      tiers.tables_ = &step->tables();
      tiers.device_runs_ = true;
      const size_t resident_before = sched.residency().resident_count();
      step->run(0, 1, n, tiers);
      EXPECT_EQ(tiers.calls_, std::vector<std::string>{"run_on_device"});
      for (int p = 0; p < n * kTopK; ++p) EXPECT_EQ(tiers.computed_[static_cast<size_t>(p)], 1) << "pair " << p;
      EXPECT_EQ(tiers.h_, reference(r, n));
      EXPECT_EQ(sched.residency().resident_count(), resident_before);
      EXPECT_EQ(step->tables().n_tokens, 0);  // nothing grouped
    }
}

// Are all of token 0's routed experts resident (what the device's gate check
// finds, staging aside)?
bool all_resident(const StepScheduler& sched, int layer, const Routes& r) {
  for (int j = 0; j < kTopK; ++j)
    if (!sched.residency().resident(static_cast<ExpertKey>(layer * kExperts + r.ids[static_cast<size_t>(j)])))
      return false;
  return true;
}

// The gated plan: the host half of gated decode tokens over every case. The
// device goes on where it finds every expert resident (then the plan only
// keeps the books: no pointing, copies or host rows); else the device tier's
// copies, then the host's rows into the device's sum, then the staging.
void check_gated(const Case& cs, int steps, uint32_t seed, uint64_t& present, uint64_t& host_pairs) {
  SCOPED_TRACE("gated, policy " + cs.policy + ", " + std::to_string(cs.cache_slots) + " slots, cpu " +
               std::to_string(cs.cpu_gbps));
  StepScheduler sched(options(cs.cache_slots, cs.transit, cs.policy));
  CostModel cost;
  cost.cpu_gbps = cs.cpu_gbps;
  cost.cpu_gflops = cs.cpu_gbps * 10;
  sched.set_cost(cost);
  sched.initial_placement();
  MoeStep step(kExperts, kTopK, &sched);
  std::mt19937 rng(seed);
  for (int s = 0; s < steps; ++s) {
    sched.begin_pass(1, true);
    for (int layer = 0; layer < kLayers; ++layer) {
      const Routes r = random_routes(rng, 1);
      FakeTiers tiers(r, 1, true);
      tiers.tables_ = &step.tables();
      tiers.gated_ = true;
      tiers.present_ = all_resident(sched, layer, r);
      if (layer + 1 < kLayers) {  // a prediction of the next layer
        tiers.pred_layer_ = layer + 1;
        tiers.pred_ = random_routes(rng, 1).ids;
      }
      step.run(static_cast<uint64_t>(s), layer, 1, tiers);
      present += tiers.present_;
      ASSERT_NE(tiers.sp_, nullptr);
      std::map<int, Tier> tier_of_expert;
      for (const PlannedExpert& pe : tiers.sp_->plan.experts) tier_of_expert[int(pe.key % kExperts)] = pe.tier;
      for (int p = 0; p < kTopK; ++p) {
        EXPECT_EQ(tiers.computed_[static_cast<size_t>(p)], 1) << "pair " << p;
        const Tier t = tier_of_expert.at(r.ids[static_cast<size_t>(p)]);
        EXPECT_EQ(tiers.tier_of_pair_[static_cast<size_t>(p)], t == Tier::Host ? 1 : 0) << "pair " << p;
        host_pairs += t == Tier::Host;
      }
      EXPECT_EQ(tiers.h_, reference(r, 1));  // the device's sum, host rows in it
      const std::vector<std::string>& c = tiers.calls_;
      ASSERT_GE(c.size(), 3u);
      // The device half ran already, whole when present; never the waves.
      if (tiers.present_) {
        EXPECT_EQ(c[0], "fetch_routes");
        EXPECT_EQ(c[1], "run_on_device");
        EXPECT_TRUE(tiers.pointed_.empty());
        EXPECT_EQ(first_of(c, "decode_on_device"), c.size());
        EXPECT_EQ(first_of(c, "compute_share"), c.size());
      } else {
        EXPECT_EQ(c[0], "fetch_routes");
        EXPECT_EQ(first_of(c, "run_on_device"), c.size());
        EXPECT_LT(first_of(c, "planned"), first_of(c, "decode_on_device"));
        if (first_of(c, "point") < c.size()) EXPECT_LT(last_of(c, "point"), first_of(c, "decode_on_device"));
        for (const auto& [e, t] : tier_of_expert) EXPECT_EQ(tiers.pointed_.count(e) == 1, t != Tier::Host);
      }
      for (const char* never : {"upload_tables", "begin_waves", "compute_wave", "stage_prompt"})
        EXPECT_EQ(first_of(c, never), c.size()) << never;
      // The host's rows, then their combine, then the staging, then done.
      const bool host = first_of(c, "compute_share") < c.size();
      EXPECT_EQ(host, first_of(c, "combine") < c.size());
      if (host) EXPECT_EQ(first_of(c, "compute_share") + 1, first_of(c, "combine"));
      if (tiers.pred_layer_ >= 0) {
        EXPECT_EQ(std::count(c.begin(), c.end(), "stage_decode"), 1);
        if (host) EXPECT_LT(first_of(c, "combine"), first_of(c, "stage_decode"));
      } else {
        EXPECT_EQ(first_of(c, "stage_decode"), c.size());
      }
      EXPECT_EQ(c.back(), "enqueued");
    }
    sched.end_pass();
  }
}

TEST(MoeStep, GatedPlanEveryPairOnceInItsTier) {
  uint32_t seed = 400;
  uint64_t present = 0, host_pairs = 0;
  for (const Case& cs : kCases) check_gated(cs, 8, seed++, present, host_pairs);
  check_gated({"lru", 64, 4, 1e4}, 4, seed++, present, host_pairs);  // room for every expert
  // Both halves of the gated plan were taken, and the host tier had rows.
  EXPECT_GT(present, 0u);
  EXPECT_GT(host_pairs, 0u);
}

// A device that went on with experts the policy does not hold resident is a
// bug between the bitmap and the policy: the step says so.
TEST(MoeStep, GatedPresentMustAgreeWithThePlan) {
  StepScheduler sched(options(0, 2, "lru"));  // no cache slots: nothing is resident
  sched.initial_placement();
  MoeStep step(kExperts, kTopK, &sched);
  std::mt19937 rng(5);
  const Routes r = random_routes(rng, 1);
  FakeTiers tiers(r, 1, true);
  tiers.tables_ = &step.tables();
  tiers.gated_ = true;
  tiers.present_ = true;
  sched.begin_pass(1, true);
  try {
    step.run(0, 0, 1, tiers);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("present on the device but not in the residency policy"), std::string::npos)
        << e.what();
  }
  sched.end_pass();
}

}  // namespace
}  // namespace ms
