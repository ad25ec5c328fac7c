#include "engine/simulator.h"

#include <algorithm>

#include "engine/moe_step.h"
#include "engine/moe_tiers.h"
#include "experts/belady.h"
#include "experts/step_scheduler.h"
#include "util/error.h"

namespace ms {

PrefetchMode parse_prefetch_mode(const std::string& name) {
  if (name == "none" || name.empty()) return PrefetchMode::None;
  if (name == "oracle") return PrefetchMode::Oracle;
  if (name == "predicted") return PrefetchMode::Predicted;
  throw Error("unknown prefetch mode '" + name + "' (use none, oracle or predicted)");
}

const char* prefetch_mode_name(PrefetchMode m) {
  switch (m) {
    case PrefetchMode::None: return "none";
    case PrefetchMode::Oracle: return "oracle";
    case PrefetchMode::Predicted: return "predicted";
  }
  return "?";
}

std::vector<uint64_t> belady_hits_per_layer(const AccessSequence& seq, const PoolLayout& layout) {
  std::vector<uint64_t> per_layer(seq.n_layer, 0);
  const uint32_t n_keys = seq.n_layer * seq.n_expert;
  for (size_t p = 0; p < layout.pools.size(); ++p) {
    RequestSequence req;
    std::vector<uint32_t> layer_of_request;
    for (const LayerStep& s : seq.steps) {
      if (layout.pool_of_layer[s.layer] != int32_t(p)) continue;
      req.push(seq.keys_of(s));
      layer_of_request.push_back(s.layer);
    }
    std::vector<uint32_t> hits;
    belady_hits(req, layout.pools[p].slots, n_keys, &hits);
    for (size_t i = 0; i < hits.size(); ++i) per_layer[layer_of_request[i]] += hits[i];
  }
  return per_layer;
}

namespace {

uint64_t stage_plan_size(const StagePlan* p) { return p ? p->copies.size() : 0; }


// A decode step's prediction for tiered layer `target`, most likely first:
// the real next layer step (oracle) or the trace's predictions.
std::vector<ExpertKey> predicted_for(const AccessSequence& seq, size_t i, uint32_t target, const SimOptions& opts) {
  const LayerStep& s = seq.steps[i];
  std::vector<std::pair<float, ExpertKey>> ranked;
  if (opts.prefetch == PrefetchMode::Oracle) {
    if (i + 1 < seq.steps.size() && seq.steps[i + 1].step == s.step && seq.steps[i + 1].layer == target) {
      const LayerStep& n = seq.steps[i + 1];
      const auto keys = seq.keys_of(n);
      const auto uses = seq.uses_of(n);
      for (size_t j = 0; j < keys.size(); ++j) ranked.push_back({float(uses[j]), keys[j]});
    }
  } else {
    const auto pk = seq.predictions_of(s);
    const auto pc = seq.confidences_of(s);
    for (size_t j = 0; j < pk.size(); ++j)
      if (pc[j] >= opts.prefetch_min_confidence && pk[j] / seq.n_expert == target) ranked.push_back({pc[j], pk[j]});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<ExpertKey> out;
  for (const auto& [conf, key] : ranked) out.push_back(key);
  return out;
}

// Seconds the link needs for a stage's copies.
double stage_link_s(const StagePlan* st, const ExpertResidency& res, const CostModel& cost) {
  double s = 0;
  if (st)
    for (const auto& [key, where] : st->copies) s += cost.copy_s(res.bytes_of(key));
  return s;
}

// A layer step's routes as MoeStep takes them, [tokens][k]: each routed
// expert of the step used by as many tokens as the trace says (pairs in
// expert order, pair p to token p mod tokens: an expert's pairs land on
// distinct tokens, as a use count is at most the step's tokens). The plan
// depends on the experts and their counts only.
void routes_of(const AccessSequence& seq, const LayerStep& s, uint32_t k, std::vector<int32_t>& ids) {
  const auto keys = seq.keys_of(s);
  const auto uses = seq.uses_of(s);
  const uint64_t n = s.tokens, pairs = uint64_t{n} * k;
  uint64_t total = 0;
  for (size_t j = 0; j < keys.size(); ++j) {
    if (uses[j] > n) throw Error("trace: an expert used by more tokens than its layer step has");
    total += uses[j];
  }
  if (total != pairs)
    throw Error("trace: a layer step of " + std::to_string(n) + " tokens routes " + std::to_string(total) +
                " pairs, not " + std::to_string(pairs));
  ids.assign(pairs, 0);
  uint64_t p = 0;
  for (size_t j = 0; j < keys.size(); ++j)
    for (uint32_t u = 0; u < uses[j]; ++u, ++p)
      ids[(p % n) * k + p / n] = static_cast<int32_t>(keys[j] % seq.n_expert);
}

// The replay's tiers: the engine's MoeStep (engine/moe_step.h) drives them
// as it drives a backend's, and nothing moves. The routes come from the
// trace, a decode step's prediction from it too (or from the next layer
// step: oracle); what the plan and the staging chose is kept for the result.
// Gated decode: the device's residency check is modelled as every routed
// expert resident, or staged by a published stage of this pass (the
// engine's device may check before the host published: this is the best case).
class SimTiers final : public MoeTiers {
 public:
  SimTiers(const StepScheduler& sched, uint32_t n_expert) : sched_(sched), n_expert_(n_expert) {}

  void begin(const std::vector<int32_t>& ids, uint32_t pass, bool gated) {
    ids_ = &ids;
    pass_ = pass;
    gated_ = gated;
    pred_layer_ = -1;
    ls_ = nullptr;
    stage_ = {};
  }
  void predict(int layer, const std::vector<ExpertKey>& keys) {
    pred_layer_ = layer;
    pred_.clear();
    for (ExpertKey key : keys) pred_.push_back(static_cast<int32_t>(key % n_expert_));
  }

  MoeRoutes fetch_routes(int layer, int n, bool) override {
    MoeRoutes r;
    r.ids = ids_->data();
    if (pred_layer_ >= 0) {
      static const int32_t none = 0;  // an empty prediction is still one (the scheduler's bank turns)
      r.pred_ids = pred_.empty() ? &none : pred_.data();
      r.pred_layer = pred_layer_;
      r.pred_n = static_cast<int>(pred_.size());
    }
    if (!gated_) return r;
    r.gated = true;
    r.present = true;
    const size_t k = ids_->size() / static_cast<size_t>(n);
    for (size_t j = 0; j < k; ++j) {
      const ExpertKey key = static_cast<ExpertKey>(layer) * n_expert_ + static_cast<ExpertKey>((*ids_)[j]);
      if (sched_.residency().resident(key)) continue;
      if (stamp_.size() > key && stamp_[key] == pass_ + 1) r.staged = true;
      else r.present = false;
    }
    r.staged = r.staged && r.present;
    return r;
  }
  void planned(int, const LayerSchedule& ls, const MoeStepTables&) override { ls_ = &ls; }
  bool decode_kernels_take(int) const override { return true; }
  void stage_decode(int layer, const DecodeStage& ds) override {
    stage_.decode = ds.plan;
    stage_.decoded = true;
    if (!ds.publish || !ds.plan) return;
    for (const auto& [key, where] : ds.plan->copies) {
      if (stamp_.size() <= key) stamp_.resize(static_cast<size_t>(key) + 1, 0);
      stamp_[key] = pass_ + 1;
    }
    (void)layer;
  }
  void stage_prompt(const PromptStage& ps) override { stage_.prompt = ps.plan; }
  void compute_share(const MoeShare&) override {}
  void combine(int, int) override {}

  // What the last layer step's plan and staging were (valid until the next).
  const LayerSchedule* ls_ = nullptr;
  struct Stage {
    const StagePlan* decode = nullptr;
    bool decoded = false;
    const StagePlan* prompt = nullptr;
  } stage_;

 private:
  const StepScheduler& sched_;
  uint32_t n_expert_;
  const std::vector<int32_t>* ids_ = nullptr;
  uint32_t pass_ = 0;
  bool gated_ = false;
  int pred_layer_ = -1;
  std::vector<int32_t> pred_;
  std::vector<uint32_t> stamp_;  // [key]: 1 + the pass whose published stage holds it
};

}  // namespace

StepSchedulerOptions scheduler_options(const TraceHeader& h, const SimOptions& opts) {
  StepSchedulerOptions so;
  ResidencyConfig& rc = so.residency;
  rc.n_layer = h.n_layer;
  rc.n_expert = h.n_expert;
  rc.k = h.k;
  rc.slot_bytes = h.expert_bytes;
  rc.slot_bytes.resize(h.n_layer, 0);
  rc.capacity = opts.capacity;
  rc.policy = opts.policy;
  rc.policy_options = opts.policy_options;
  rc.transit_slots = opts.transit_slots;
  rc.cost = opts.cost;
  so.tuning = opts.step;
  if (opts.prefetch == PrefetchMode::None) so.tuning.prefetch = DecodePrefetch::Off;
  return so;
}

SimResult simulate(const Trace& trace, const AccessSequence& seq, const SimOptions& opts) {
  const TraceHeader& h = trace.header;
  if (opts.prefetch == PrefetchMode::Predicted && !h.has_predictions())
    throw Error("--prefetch predicted needs a trace with next-layer predictions (this one has none; try --prefetch oracle)");
  StepScheduler sched(scheduler_options(h, opts));
  sched.set_cost(opts.cost);
  sched.initial_placement(opts.warm_start);
  const ExpertResidency& res = sched.residency();
  const PoolLayout& layout = res.layout();
  // The engine's step over the replay's tiers; a replay's wall time is not
  // the engine's host time, so the step reports none to the scheduler.
  MoeStep step(static_cast<int>(h.n_expert), static_cast<int>(h.k), &sched);
  step.set_report_times(false);
  SimTiers tiers(sched, h.n_expert);
  std::vector<int32_t> ids;

  SimResult r;
  r.policy = res.policy_name();
  if (opts.prefetch != PrefetchMode::None) r.policy += std::string(" +prefetch:") + prefetch_mode_name(opts.prefetch);
  if (opts.gated) r.policy += " +gated";
  r.capacity = opts.capacity.describe();
  r.slots = layout.total_slots();
  r.slot_bytes = layout.total_bytes();
  r.fraction = double(r.slots) / double(std::max<uint64_t>(1, uint64_t(h.moe_layer_count()) * h.n_expert));
  std::vector<LayerSimStats> per_layer(h.n_layer);
  for (uint32_t l = 0; l < h.n_layer; ++l) per_layer[l].layer = l;

  uint32_t pass = ~0u;
  bool gated_pass = false;
  for (size_t i = 0; i < seq.steps.size(); ++i) {
    const LayerStep& s = seq.steps[i];
    const uint64_t copy_bytes_before = res.counters().copy_bytes, stage_bytes_before = res.counters().stage_bytes;
    if (s.step != pass) {  // a forward pass starts: maybe the first tiered layer's prompt stage
      if (pass != ~0u) sched.end_pass();
      pass = s.step;
      (s.phase == Phase::Prompt ? r.prompt_tokens : r.decode_tokens) += s.tokens;
      gated_pass = opts.gated && s.phase == Phase::Decode && s.tokens == 1;
      // (Its copies overlap the layers before the first tiered one: not timed.)
      if (sched.begin_pass(int(s.tokens), gated_pass))
        r.prompt_staged += stage_plan_size(sched.stage_prompt(s.step, sched.first_tiered(), int(s.tokens)).plan);
    }
    // The layer step through the engine's step: its plan, then the next
    // tiered layer's decode staging (a prediction) or prompt stage.
    routes_of(seq, s, h.k, ids);
    tiers.begin(ids, pass, gated_pass);
    const int next = sched.layer_pinned(s.layer) ? -1 : sched.next_tiered(int(s.layer));
    if (next >= 0 && s.phase == Phase::Decode && opts.prefetch != PrefetchMode::None)
      tiers.predict(next, predicted_for(seq, i, uint32_t(next), opts));
    step.run(s.step, int(s.layer), int(s.tokens), tiers);
    const LayerSchedule& ls = *tiers.ls_;
    const StepPlan& sp = *ls.plan;
    const ExpertPlan& plan = sp.plan;
    LayerSimStats& st = per_layer[s.layer];
    const auto keys = seq.keys_of(s);
    st.accesses += keys.size();
    st.hits += plan.n_resident;
    r.resident += plan.n_resident;
    r.streamed += plan.n_stream;
    r.host_computed += plan.n_host;
    r.staged += plan.n_staged;
    if (ls.bank >= 0) r.prefetch_used += sp.prediction.staged_used;

    // What this layer step queued on the link behind its own copies, while
    // it computes: the next tiered layer's decode staging, or its prompt stage.
    double stage_s = 0;
    if (tiers.stage_.decoded) {
      r.prefetched += stage_plan_size(tiers.stage_.decode);
      r.prefetch_bytes += res.counters().stage_bytes - stage_bytes_before;
      stage_s = stage_link_s(tiers.stage_.decode, res, sched.cost());
    } else if (tiers.stage_.prompt) {
      r.prompt_staged += stage_plan_size(tiers.stage_.prompt);
      stage_s = stage_link_s(tiers.stage_.prompt, res, sched.cost());
    }
    r.pcie_bytes += res.counters().copy_bytes - copy_bytes_before;
    // The plan's time counts an estimate of the stage's link time (a staged
    // layer's plan assumes the next stage is as large); here the real one
    // follows this step's own demand copies.
    double demand_s = 0;
    for (size_t j = 0; j < plan.experts.size(); ++j)
      if (sp.copy[j] && !sp.copy_from[j].valid()) demand_s += sched.cost().copy_s(res.bytes_of(plan.experts[j].key));
    const double time = std::max(plan.time_s, demand_s + stage_s);
    r.time_s += time;
    (s.phase == Phase::Prompt ? r.prompt_time_s : r.decode_time_s) += time;
  }
  if (pass != ~0u) sched.end_pass();

  for (const LayerSimStats& ls : per_layer) {
    if (!h.is_moe_layer(ls.layer)) continue;
    r.layers.push_back(ls);
    r.accesses += ls.accesses;
    r.hits += ls.hits;
  }
  r.hit_rate = r.accesses ? double(r.hits) / double(r.accesses) : 0;
  if (opts.belady) set_belady(r, belady_hits_per_layer(seq, layout));
  return r;
}

void set_belady(SimResult& r, const std::vector<uint64_t>& per_layer_hits) {
  r.belady_hits = 0;
  for (LayerSimStats& ls : r.layers) {
    ls.belady_hits = ls.layer < per_layer_hits.size() ? per_layer_hits[ls.layer] : 0;
    r.belady_hits += ls.belady_hits;
  }
  r.belady_hit_rate = r.accesses ? double(r.belady_hits) / double(r.accesses) : 0;
}

}  // namespace ms
