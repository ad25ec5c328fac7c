#include "engine/moe_step.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace ms {

namespace {
double seconds_since(MoeStep::Clock::time_point t) {
  return std::chrono::duration<double>(MoeStep::Clock::now() - t).count();
}
}  // namespace

MoeStep::MoeStep(int n_expert, int k, StepScheduler* sched) : n_expert_(n_expert), k_(k), sched_(sched) {
  if (n_expert < 1 || k < 1 || k > n_expert)
    throw Error("MoE step: " + std::to_string(k) + " experts used of " + std::to_string(n_expert));
}

// The n k routed ids, checked, grouped by expert (pair order within each)
// and as the scheduler's keys and token counts.
void MoeStep::group(int layer, const int32_t* ids, int n) {
  const int E = n_expert_, np = n * k_;
  t_.n_tokens = n;
  t_.start.assign(static_cast<size_t>(E) + 1, 0);
  for (int p = 0; p < np; ++p) {
    if (ids[p] < 0 || ids[p] >= E) throw Error("router chose expert " + std::to_string(ids[p]) + " of " + std::to_string(E));
    ++t_.start[static_cast<size_t>(ids[p]) + 1];
  }
  t_.keys.clear();
  t_.tokens.clear();
  for (int e = 0; e < E; ++e) {
    const int32_t c = t_.start[static_cast<size_t>(e) + 1];
    if (c) {
      t_.keys.push_back(static_cast<ExpertKey>(layer) * static_cast<ExpertKey>(E) + static_cast<ExpertKey>(e));
      t_.tokens.push_back(static_cast<uint32_t>(c));
    }
    t_.start[static_cast<size_t>(e) + 1] += t_.start[static_cast<size_t>(e)];
  }
  t_.by_expert.resize(static_cast<size_t>(np));
  cursor_.assign(t_.start.begin(), t_.start.end() - 1);
  for (int p = 0; p < np; ++p) t_.by_expert[static_cast<size_t>(cursor_[static_cast<size_t>(ids[p])]++)] = p;
}

void MoeStep::split(int layer, const LayerSchedule* ls, bool rows_at_pair, MoeTiers* tiers) {
  t_.host_work.clear();
  t_.host_pair.clear();
  t_.host_rows = 0;
  t_.host_rows_at_pair = rows_at_pair;
  auto add_host = [&](int e) {
    ExpertWork wk{e, {}, {}};
    const int32_t q0 = t_.start[static_cast<size_t>(e)], q1 = t_.start[static_cast<size_t>(e) + 1];
    wk.tokens.reserve(static_cast<size_t>(q1 - q0));
    wk.slots.reserve(static_cast<size_t>(q1 - q0));
    for (int32_t q = q0; q < q1; ++q) {
      const int32_t p = t_.by_expert[static_cast<size_t>(q)];
      wk.tokens.push_back(p / k_);
      wk.slots.push_back(rows_at_pair ? p : t_.host_rows);
      t_.host_pair.push_back(p);
      ++t_.host_rows;
    }
    t_.host_work.push_back(std::move(wk));
  };
  if (!ls) {
    for (ExpertKey key : t_.keys) add_host(static_cast<int>(key % static_cast<ExpertKey>(n_expert_)));
    return;
  }
  const StepPlan& sp = *ls->plan;
  for (size_t i = 0; i < sp.plan.experts.size(); ++i) {
    const PlannedExpert& pe = sp.plan.experts[i];
    const int e = static_cast<int>(pe.key % static_cast<ExpertKey>(n_expert_));
    if (pe.tier == Tier::Host) add_host(e);
    else if (tiers) tiers->point(layer, e, sp.where[i]);
  }
}

void MoeStep::build_rows(const LayerSchedule& ls) {
  if (chunk_rows_ > 0) return build_chunked_rows(ls);
  const StepPlan& sp = *ls.plan;
  const std::vector<std::vector<size_t>>& waves = ls.waves;
  const bool from_stage = ls.from_prompt_stage;
  // Waves before this one are the prompt stage's copy groups.
  const size_t first_transit_wave = from_stage ? std::max<size_t>(1, sched_->prompt_stage_groups()) : 0;
  const size_t np = t_.by_expert.size();
  t_.token_of_row.resize(np);
  t_.pair_of_row.resize(np);
  t_.group_offset.resize(sp.plan.experts.size() + 1);
  t_.group_expert.resize(sp.plan.experts.size());
  t_.waves.clear();
  int rows = 0, groups = 0;
  for (size_t wv = 0; wv < waves.size(); ++wv) {
    MoeWave w;
    w.index = wv;
    w.row_begin = rows;
    w.group_begin = groups;
    w.prompt_group = from_stage && wv < first_transit_wave ? static_cast<int>(wv) : -1;
    for (size_t i : waves[wv]) {
      const int e = static_cast<int>(sp.plan.experts[i].key % static_cast<ExpertKey>(n_expert_));
      t_.group_offset[static_cast<size_t>(groups)] = rows;
      t_.group_expert[static_cast<size_t>(groups)] = e;
      ++groups;
      for (int32_t q = t_.start[static_cast<size_t>(e)]; q < t_.start[static_cast<size_t>(e) + 1]; ++q) {
        const int32_t p = t_.by_expert[static_cast<size_t>(q)];
        t_.token_of_row[static_cast<size_t>(rows)] = p / k_;
        t_.pair_of_row[static_cast<size_t>(rows)] = p;
        ++rows;
      }
      w.max_rows = std::max(w.max_rows, t_.pairs_of(e));
      w.copies = w.copies || sp.copy[i];
    }
    w.row_end = rows;
    w.group_end = groups;
    t_.waves.push_back(w);
  }
  t_.group_offset[static_cast<size_t>(groups)] = rows;
  t_.rows = rows;
  t_.groups = groups;
}

void MoeStep::build_chunked_rows(const LayerSchedule& ls) {
  const StepPlan& sp = *ls.plan;
  const bool from_stage = ls.from_prompt_stage;
  const size_t first_transit_wave = from_stage ? std::max<size_t>(1, sched_->prompt_stage_groups()) : 0;
  const size_t np = t_.by_expert.size();
  t_.token_of_row.resize(np);
  t_.pair_of_row.resize(np);
  t_.group_offset.clear();
  t_.group_expert.clear();
  t_.waves.clear();
  int rows = 0;
  MoeWave w;
  int open_expert = -1, open_rows = 0;  // the chunk's last group
  auto start_chunk = [&](size_t wv, bool copies) {
    w = MoeWave{};
    w.index = wv;
    w.row_begin = rows;
    w.group_begin = static_cast<int>(t_.group_offset.size());
    w.copies = copies;
    w.prompt_group = from_stage && wv < first_transit_wave ? static_cast<int>(wv) : -1;
    open_expert = -1;
  };
  auto end_chunk = [&] {
    w.row_end = rows;
    w.group_end = static_cast<int>(t_.group_offset.size());
    t_.group_offset.push_back(rows - w.row_begin);  // the chunk's end entry
    t_.group_expert.push_back(-1);
    t_.waves.push_back(w);
  };
  for (size_t wv = 0; wv < ls.waves.size(); ++wv) {
    bool copies = false;
    for (size_t i : ls.waves[wv]) copies = copies || sp.copy[i];
    start_chunk(wv, copies);
    for (size_t i : ls.waves[wv]) {
      const int e = static_cast<int>(sp.plan.experts[i].key % static_cast<ExpertKey>(n_expert_));
      for (int32_t q = t_.start[static_cast<size_t>(e)]; q < t_.start[static_cast<size_t>(e) + 1]; ++q) {
        if (rows - w.row_begin == chunk_rows_) {
          end_chunk();
          start_chunk(wv, false);
        }
        if (open_expert != e) {  // a group opens: a new expert, or the chunk's first rows of a cut one
          t_.group_offset.push_back(rows - w.row_begin);
          t_.group_expert.push_back(e);
          open_expert = e;
          open_rows = 0;
        }
        const int32_t p = t_.by_expert[static_cast<size_t>(q)];
        t_.token_of_row[static_cast<size_t>(rows)] = p / k_;
        t_.pair_of_row[static_cast<size_t>(rows)] = p;
        ++rows;
        w.max_rows = std::max(w.max_rows, ++open_rows);
      }
      open_expert = -1;  // the next expert opens its own group
    }
    end_chunk();
  }
  t_.rows = rows;
  t_.groups = static_cast<int>(t_.group_offset.size());
}

void MoeStep::note_drafts(uint64_t step, int n) {
  t_.certain.clear();
  if (draft_rank_.empty()) return;
  if (static_cast<int>(draft_rank_.size()) != n)
    throw Error("MoE step: draft ranks for " + std::to_string(draft_rank_.size()) + " tokens, but the pass has " +
                std::to_string(n));
  if (!sched_->options().tuning.draft_credit) return;  // every token counts when routed
  t_.certain.resize(t_.keys.size());
  for (size_t i = 0; i < t_.keys.size(); ++i) {
    const int e = static_cast<int>(t_.keys[i] % static_cast<ExpertKey>(n_expert_));
    uint32_t c = 0;
    for (int32_t q = t_.start[static_cast<size_t>(e)]; q < t_.start[static_cast<size_t>(e) + 1]; ++q) {
      const int32_t rank = draft_rank_[static_cast<size_t>(t_.by_expert[static_cast<size_t>(q)] / k_)];
      if (rank <= 0) ++c;
      else draft_uses_.push_back({step, t_.keys[i], rank});
    }
    t_.certain[i] = c;
  }
}

void MoeStep::confirm_drafts(int accepted) {
  std::vector<DraftUse>& u = draft_uses_;
  u.erase(std::remove_if(u.begin(), u.end(), [&](const DraftUse& d) { return d.rank > accepted; }), u.end());
  std::sort(u.begin(), u.end(), [](const DraftUse& a, const DraftUse& b) {
    return a.step != b.step ? a.step < b.step : a.key < b.key;
  });
  // One credit per layer step: the keys of one step and layer, ascending.
  std::vector<ExpertKey> keys;
  std::vector<uint32_t> uses;
  const auto E = static_cast<ExpertKey>(n_expert_);
  for (size_t i = 0; i < u.size();) {
    keys.clear();
    uses.clear();
    size_t j = i;
    for (; j < u.size() && u[j].step == u[i].step && u[j].key / E == u[i].key / E; ++j) {
      if (!keys.empty() && keys.back() == u[j].key) ++uses.back();
      else keys.push_back(u[j].key), uses.push_back(1);
    }
    if (sched_) sched_->credit(u[i].step, keys, uses);
    i = j;
  }
  u.clear();
  draft_rank_.clear();
}

MoeShare MoeStep::host_share(int layer) const {
  MoeShare s;
  s.tier = Tier::Host;
  s.layer = layer;
  s.n_tokens = t_.n_tokens;
  s.work = &t_.host_work;
  s.rows = t_.host_rows_at_pair ? t_.n_tokens * k_ : t_.host_rows;
  s.pair_of_row = t_.host_rows_at_pair ? nullptr : t_.host_pair.data();
  return s;
}

DecodeStage MoeStep::stage_decode(uint64_t step, int layer, const int32_t* ids, int n) {
  if (!sched_) return {};
  const ExpertResidency& res = sched_->residency();
  if (layer < 0 || layer >= static_cast<int>(sched_->options().residency.n_layer) ||
      res.pool_of_layer(static_cast<uint32_t>(layer)) < 0)
    return {};
  std::vector<ExpertKey> predicted;
  predicted.reserve(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    if (ids[j] < 0 || ids[j] >= n_expert_)
      throw Error("router (prediction) chose expert " + std::to_string(ids[j]) + " of " + std::to_string(n_expert_));
    predicted.push_back(static_cast<ExpertKey>(layer) * static_cast<ExpertKey>(n_expert_) + static_cast<ExpertKey>(ids[j]));
  }
  return sched_->stage_decode(step, static_cast<uint32_t>(layer), predicted);
}

void MoeStep::run(uint64_t step, int layer, int n, MoeTiers& tiers) {
  // ---- the resident plan: the device runs the layer from its own routes
  // (nothing to read back or plan: every expert is resident for good, or
  // the device checks residency itself behind a gate)
  if (tiers.device_runs_layer(layer, n)) {
    tiers.run_on_device(layer, n);
    return;
  }
  const auto t0 = Clock::now();
  // ---- route
  const bool with_input = !sched_ || StepScheduler::input_with_routes(n);
  const MoeRoutes r = tiers.fetch_routes(layer, n, with_input);
  const auto t_plan = r.arrived != Clock::time_point{} ? r.arrived : Clock::now();
  group(layer, r.ids, n);
  if (sched_) note_drafts(step, n);
  if (!sched_) {
    split(layer, nullptr, true, nullptr);
    tiers.compute_share(host_share(layer));
    tiers.combine(layer, n);
    return;
  }
  if (r.gated) {
    if (n != 1) throw Error("MoE step: a gated layer step is one decode token, not " + std::to_string(n));
    return run_gated(step, layer, r, tiers, t_plan);
  }

  // ---- plan
  const LayerSchedule& ls = sched_->plan_layer(step, static_cast<uint32_t>(layer), t_.keys, t_.tokens, false, true, t_.certain);
  const StepPlan& sp = *ls.plan;
  split(layer, &ls, false, &tiers);
  tiers.planned(layer, ls, t_);
  auto stage_prediction = [&] {
    if (!r.pred_ids) return;
    if (report_times_) sched_->note_host_overhead(seconds_since(t0));
    tiers.stage_decode(r.pred_layer, stage_decode(step, r.pred_layer, r.pred_ids, r.pred_n));
  };

  // ---- one decode token with every expert on the device: the backend's
  // fused kernel, no rows (every streamed expert has its own slot: all are
  // copied before the compute).
  if (sched_->decode_all_on_gpu(n, ls, tiers.decode_kernels_take(layer))) {
    std::vector<size_t>& all = device_experts_;
    all.clear();
    bool copies = false;
    for (const auto& wave : ls.waves)
      for (size_t i : wave) {
        all.push_back(i);
        copies = copies || sp.copy[i];
      }
    tiers.decode_on_device(layer, sp, all, copies);
    stage_prediction();
    tiers.enqueued(layer);
    return;
  }

  // ---- execute: the waves (copies overlap the previous wave's compute),
  // then the staging behind them, then the host's rows meanwhile
  build_rows(ls);
  if (!t_.host_work.empty() && !with_input) tiers.fetch_input(layer, n);
  tiers.upload_tables(layer, t_);
  const bool any_copy = std::any_of(t_.waves.begin(), t_.waves.end(), [](const MoeWave& w) { return w.copies; });
  tiers.begin_waves(layer, any_copy);
  for (const MoeWave& w : t_.waves) {
    if (w.row_end == w.row_begin) continue;
    if (w.copies) tiers.copy_wave(layer, sp, ls.waves[w.index], w.index);
    tiers.compute_wave(layer, n, sp, ls.waves[w.index], w);
  }
  tiers.end_waves(layer, any_copy);
  stage_prediction();
  // A prompt: the next tiered layer's cold experts, behind this layer's
  // copies, while this layer, the host's share and the layers between
  // compute. (A pinned layer that came here for scratch stages nothing.)
  if (sched_->stages_prompt(n) && !sched_->layer_pinned(static_cast<uint32_t>(layer))) {
    tiers.stage_prompt(sched_->stage_prompt(step, sched_->next_tiered(layer), n));
    // The host's share of a prompt's layer starts only now: the scheduler
    // counts this delay against it from the next pass on.
    if (report_times_) sched_->note_prompt_cpu_delay(seconds_since(t_plan));
  }
  tiers.enqueued(layer);

  // ---- host tier, then combine
  if (!t_.host_work.empty()) tiers.compute_share(host_share(layer));
  tiers.combine(layer, n);
}

// The host half of a gated decode token: the device already runs the fused
// kernel behind the layer's gate, over the slot table, with the host's rows
// (at their pair indices) in its sum.
void MoeStep::run_gated(uint64_t step, int layer, const MoeRoutes& r, MoeTiers& tiers, Clock::time_point t_plan) {
  // ---- plan: a layer the device found present with some expert staged
  // must not admit (its cache slots may be read by the layers after).
  const LayerSchedule& ls =
      sched_->plan_layer(step, static_cast<uint32_t>(layer), t_.keys, t_.tokens, true, !(r.present && r.staged), t_.certain);
  const StepPlan& sp = *ls.plan;
  if (r.present)  // the device went on: the plan must hold every expert where it found them, copying none
    for (size_t i = 0; i < sp.plan.experts.size(); ++i) {
      const PlannedExpert& pe = sp.plan.experts[i];
      if (!(pe.tier == Tier::Resident || (r.staged && pe.staged)) || sp.copy[i])
        throw Error("MoE step: layer " + std::to_string(layer) +
                    " was present on the device but not in the residency policy (a bug)");
    }
  // A present layer's slot table is the one the device used: nothing pointed.
  split(layer, &ls, true, r.present ? nullptr : &tiers);
  tiers.planned(layer, ls, t_);

  // ---- execute: the device tier's copies, then its experts may go on
  if (!r.present) {
    std::vector<size_t>& device = device_experts_;
    device.clear();
    bool copies = false;
    for (size_t i = 0; i < sp.plan.experts.size(); ++i) {
      if (sp.plan.experts[i].tier == Tier::Host) continue;
      device.push_back(i);
      copies = copies || sp.copy[i];
    }
    tiers.decode_on_device(layer, sp, device, copies);
  }
  // The host tier's rows (at their pair indices) into the device's sum,
  // which waits for them.
  if (!t_.host_work.empty()) {
    if (report_times_) sched_->note_host_overhead(seconds_since(t_plan));
    tiers.compute_share(host_share(layer));
    tiers.combine(layer, 1);
  }
  // The next tiered layer's predicted experts, behind this layer's copies.
  // After the host's experts, not before: the link's DMA reads host memory
  // as the CPU does, and here the device waits for the CPU's rows
  // (bench/results/hybrid_bench.md, "Run 13").
  if (r.pred_ids) tiers.stage_decode(r.pred_layer, stage_decode(step, r.pred_layer, r.pred_ids, r.pred_n));
  tiers.enqueued(layer);
}

}  // namespace ms
