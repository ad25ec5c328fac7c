#include "engine/sim_spec.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "engine/moe_step.h"
#include "engine/moe_tiers.h"
#include "experts/step_scheduler.h"
#include "util/error.h"

namespace ms {
namespace {

// Tiers that move nothing: the routes go in, the plan comes back.
class ReplayTiers final : public MoeTiers {
 public:
  std::vector<int32_t> ids;
  const LayerSchedule* ls = nullptr;
  MoeRoutes fetch_routes(int, int, bool) override {
    MoeRoutes r;
    r.ids = ids.data();
    return r;
  }
  void planned(int, const LayerSchedule& s, const MoeStepTables&) override { ls = &s; }
  void compute_share(const MoeShare&) override {}
  void combine(int, int) override {}
};

// A trace's passes as per-token routes: pass p's tokens are rows, each row
// k ids per layer (-1 for a layer with no routed experts).
struct Pass {
  Phase phase = Phase::Decode;
  std::vector<std::vector<int32_t>> rows;  // [token][layer * k + j]
};

std::vector<Pass> passes_of(const Trace& trace) {
  const TraceHeader& h = trace.header;
  std::vector<Pass> passes;
  size_t i = 0;
  while (i < trace.records.size()) {
    const uint32_t step = trace.records[i].step;
    Pass p;
    p.phase = trace.records[i].phase;
    // A token is a (seq, pos): its row, in order of first appearance.
    std::map<uint64_t, size_t> row_of;
    for (; i < trace.records.size() && trace.records[i].step == step; ++i) {
      const TraceRecord& r = trace.records[i];
      const auto [it, added] = row_of.emplace((uint64_t{r.seq} << 32) | r.pos, p.rows.size());
      if (added) p.rows.emplace_back(size_t{h.n_layer} * h.k, -1);
      const auto ids = trace.ids_of(r);
      for (uint32_t j = 0; j < h.k; ++j) p.rows[it->second][size_t{r.layer} * h.k + j] = ids[j];
    }
    if (p.phase == Phase::Decode && p.rows.size() != 1)
      throw Error("--spec needs a single-sequence trace: decode pass " + std::to_string(step) + " has " +
                  std::to_string(p.rows.size()) + " tokens");
    passes.push_back(std::move(p));
  }
  return passes;
}

struct Replay {
  const TraceHeader& h;
  StepScheduler sched;
  MoeStep step;
  ReplayTiers tiers;
  uint64_t pass = 0;
  SpecSimResult& r;

  Replay(const TraceHeader& header, const StepSchedulerOptions& so, const CostModel& cost, bool warm,
         SpecSimResult& out)
      : h(header), sched(so), step(int(header.n_expert), int(header.k), &sched), r(out) {
    sched.set_cost(cost);
    sched.initial_placement(warm);
    step.set_report_times(false);
  }

  // One forward pass over `rows`; the first `kept` rows are the sequence's
  // own tokens (decode statistics only).
  void forward(const std::vector<const std::vector<int32_t>*>& rows, bool decode, size_t kept) {
    const int n = int(rows.size());
    sched.begin_pass(n, false);
    const ExpertResidency& res = sched.residency();
    for (uint32_t layer = 0; layer < h.n_layer; ++layer) {
      if (!h.is_moe_layer(layer)) continue;
      tiers.ids.clear();
      for (const auto* row : rows)
        tiers.ids.insert(tiers.ids.end(), row->begin() + layer * h.k, row->begin() + (layer + 1) * h.k);
      if (std::any_of(tiers.ids.begin(), tiers.ids.end(), [](int32_t id) { return id < 0; }))
        throw Error("trace: a token has no routes at MoE layer " + std::to_string(layer));
      const uint64_t bytes0 = res.counters().copy_bytes;
      tiers.ls = nullptr;
      step.run(pass, int(layer), n, tiers);
      if (!decode || !tiers.ls) continue;
      const ExpertPlan& plan = tiers.ls->plan->plan;
      r.accesses += plan.experts.size();
      r.hits += plan.n_resident;
      r.streamed += plan.n_stream;
      r.host += plan.n_host;
      r.admitted += plan.admitted.size();
      r.evicted += plan.evicted.size();
      r.pcie_bytes += res.counters().copy_bytes - bytes0;
      r.decode_time_s += plan.time_s;
      for (const PlannedExpert& e : plan.experts) {
        const int32_t id = int32_t(e.key % h.n_expert);
        bool own = false;
        for (size_t t = 0; t < kept && !own; ++t)
          for (uint32_t j = 0; j < h.k; ++j) own = own || (*rows[t])[layer * h.k + j] == id;
        if (!own) continue;
        ++r.kept_accesses;
        r.kept_hits += e.tier == Tier::Resident;
      }
    }
    sched.end_pass();
    ++pass;
  }
};

}  // namespace

void check_spec_sim(const SimOptions& opts, const SpecSimOptions& spec) {
  if (!(spec.alpha >= 0 && spec.alpha <= 1)) throw Error("--spec oracle:ALPHA: ALPHA must be in [0, 1]");
  if (spec.draft_max < 0 || spec.draft_max > 64)
    throw Error("--draft-max must be in 0..64, got " + std::to_string(spec.draft_max));
  if (opts.prefetch != PrefetchMode::None || opts.gated)
    throw Error("--spec replays verifies without decode prefetch or the gated plan (drop --prefetch and --gated)");
}

SpecSimResult simulate_speculative(const Trace& trace, const SimOptions& opts, const SpecSimOptions& spec) {
  check_spec_sim(opts, spec);
  const TraceHeader& h = trace.header;
  const std::vector<Pass> passes = passes_of(trace);

  StepSchedulerOptions so = scheduler_options(h, opts);
  so.tuning.prefetch = DecodePrefetch::Off;
  so.tuning.draft_credit = spec.exclude_rejected;

  SpecSimResult r;
  Replay rp(h, so, opts.cost, opts.warm_start, r);
  r.policy = rp.sched.residency().policy_name();
  r.capacity = opts.capacity.describe();
  std::mt19937_64 rng(spec.seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<const std::vector<int32_t>*> rows;
  std::vector<int32_t> ranks;
  size_t i = 0;
  while (i < passes.size()) {
    if (passes[i].phase == Phase::Prompt) {
      rows.clear();
      for (const auto& row : passes[i].rows) rows.push_back(&row);
      rp.forward(rows, false, 0);
      ++i;
      continue;
    }
    // A run of decode tokens [i, end): verifies over it.
    size_t end = i;
    while (end < passes.size() && passes[end].phase == Phase::Decode) ++end;
    std::uniform_int_distribution<size_t> any(i, end - 1);
    for (size_t t = i; t < end;) {
      const size_t K = std::min<size_t>(size_t(spec.draft_max), end - 1 - t);
      size_t a = 0;
      while (a < K && coin(rng) < spec.alpha) ++a;
      rows.clear();
      for (size_t j = 0; j <= a; ++j) rows.push_back(&passes[t + j].rows[0]);
      for (size_t j = a; j < K; ++j) rows.push_back(&passes[any(rng)].rows[0]);
      if (K > 0) {  // the engine's verify marks its drafts; the scheduler's draft_credit decides
        ranks.resize(K + 1);
        for (size_t j = 0; j <= K; ++j) ranks[j] = int32_t(j);
        rp.step.set_draft_ranks(ranks);
      }
      rp.forward(rows, true, a + 1);
      if (K > 0) rp.step.confirm_drafts(int(a));
      ++r.decode_passes;
      r.drafted += K;
      r.accepted += a;
      r.emitted += a + 1;
      t += a + 1;
    }
    i = end;
  }
  return r;
}

std::string spec_table_header() {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-12s %-16s %-20s %8s %8s %9s %9s %10s %10s %10s\n", "policy", "capacity", "mode",
                "tok/pass", "hit", "own hit", "admit/tok", "MB/tok", "host/tok", "tok/s");
  return buf;
}

std::string spec_table_row(const std::string& mode, const SpecSimResult& r) {
  const double tok = double(std::max<uint64_t>(1, r.emitted));
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-12s %-16s %-20s %8.2f %7.1f%% %8.1f%% %9.2f %10.2f %10.2f %10.1f\n",
                r.policy.c_str(), r.capacity.c_str(), mode.c_str(),
                double(r.emitted) / double(std::max<uint64_t>(1, r.decode_passes)), 100 * r.hit_rate(),
                100 * r.kept_hit_rate(), double(r.admitted) / tok, double(r.pcie_bytes) / tok / 1e6,
                double(r.host) / tok, r.tokens_per_s());
  return buf;
}

}  // namespace ms
