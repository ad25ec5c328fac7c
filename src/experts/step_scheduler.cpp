#include "experts/step_scheduler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "experts/prefetch.h"
#include "util/error.h"

namespace ms {
namespace {

ResidencyConfig rounded(const StepSchedulerOptions& o) {
  ResidencyConfig rc = o.residency;
  rc.transit_slots = StepScheduler::transit_slots(rc.transit_slots);
  rc.stage_bank = StepScheduler::stage_bank(rc.k, o.tuning.prefetch);
  return rc;
}

}  // namespace

DecodePrefetch parse_decode_prefetch(const std::string& name) {
  if (name == "off") return DecodePrefetch::Off;
  if (name == "next") return DecodePrefetch::Next;
  if (name == "auto") return DecodePrefetch::Auto;
  throw Error("prefetch mode '" + name + "': use off, next or auto");
}

const char* decode_prefetch_name(DecodePrefetch p) {
  switch (p) {
    case DecodePrefetch::Off: return "off";
    case DecodePrefetch::Next: return "next";
    case DecodePrefetch::Auto: return "auto";
  }
  return "?";
}

uint32_t StepScheduler::stage_bank(uint32_t k, DecodePrefetch prefetch) {
  return prefetch == DecodePrefetch::Off ? 0 : k;
}

uint32_t StepScheduler::transit_slots(uint32_t asked) { return std::max<uint32_t>(2, asked & ~1u); }

uint32_t StepScheduler::prompt_transit(int n_expert) {
  const uint32_t half = static_cast<uint32_t>(std::max(0, n_expert)) / 2;
  return std::max(kPromptTransit, (half + kDecodeTransit - 1) / kDecodeTransit * kDecodeTransit);
}

uint32_t StepScheduler::choose_transit_slots(uint32_t asked, int max_tokens, int n_expert,
                                             const std::function<bool(uint32_t)>& fits) {
  if (asked > 0) return asked;
  if (max_tokens >= kPromptTransitFrom)
    for (uint32_t t = prompt_transit(n_expert); t > kDecodeTransit; t -= kDecodeTransit)
      if (fits(t)) return t;
  return kDecodeTransit;
}

StepScheduler::StepScheduler(const StepSchedulerOptions& opt)
    : opt_(opt), res_(rounded(opt)), cost_(opt.residency.cost) {
  const size_t NL = opt.residency.n_layer;
  if (!opt_.expert_bytes.empty() && opt_.expert_bytes.size() != NL)
    throw Error("step scheduler: expert bytes for " + std::to_string(opt_.expert_bytes.size()) + " layers, the model has " +
                std::to_string(NL));
  pinned_.assign(NL, 0);
  next_tiered_.assign(NL, -1);
  staged_at_.assign(NL, Clock::time_point{});
  staged_seq_.assign(NL, 0);
  route_gap_s_.assign(NL, 0.0);
}

uint64_t StepScheduler::expert_bytes(uint32_t layer) const {
  if (!opt_.expert_bytes.empty()) return opt_.expert_bytes[layer];
  return res_.bytes_of(layer * res_.n_expert());
}

void StepScheduler::set_cost(const CostModel& cost) {
  cost_ = cost;
  res_.set_cost(cost);
}

void StepScheduler::set_measured_cost(const CostProbe& p) {
  CostModel m;
  if (p.link_s > 0) m.pcie_gbps = p.link_bytes / p.link_s / 1e9;
  if (p.cpu_s > 0) m.cpu_gbps = p.cpu_bytes / p.cpu_s / 1e9;
  // In the cost model's flops (its flops_per_byte cancels out in cpu_s).
  prompt_cpu_gflops_ = p.batch_s > 0 ? p.batch_weight_bytes * m.flops_per_byte / p.batch_s / 1e9 : 0;
  if (p.hbm_s > 0) m.gpu_hbm_gbps = p.hbm_bytes / p.hbm_s / 1e9;
  m.apply(opt_.tuning.cost);
  if (opt_.tuning.cost.sets(&CostModel::cpu_gflops)) prompt_cpu_gflops_ = 0;  // the user's figure
  m.validate();
  set_cost(m);
}

std::vector<std::pair<ExpertKey, SlotRef>> StepScheduler::initial_placement(bool fill) {
  auto out = res_.initial_placement(fill);
  const int NL = static_cast<int>(pinned_.size());
  n_pinned_ = 0;
  for (int l = 0; l < NL; ++l) {
    pinned_[static_cast<size_t>(l)] = res_.layer_pinned(static_cast<uint32_t>(l));
    n_pinned_ += pinned_[static_cast<size_t>(l)];
  }
  int next = -1;
  for (int l = NL - 1; l >= 0; --l) {
    next_tiered_[static_cast<size_t>(l)] = next;
    if (res_.pool_of_layer(static_cast<uint32_t>(l)) >= 0 && !pinned_[static_cast<size_t>(l)]) next = l;
  }
  first_tiered_ = next;
  prompt_stage_min_ = 0;
  const double share = double(opt_.residency.k) / double(res_.n_expert());
  if (opt_.tuning.prompt_stage && first_tiered_ >= 0 && share < 1.0 && res_.transit_slots() >= 2 * wave_experts())
    prompt_stage_min_ = std::max(2, static_cast<int>(std::ceil(std::log(0.05) / std::log(1.0 - share))));
  return out;
}

uint32_t StepScheduler::wave_experts() const {
  return std::max<uint32_t>(1, std::min<uint32_t>(8, res_.transit_slots() / 2));
}

bool StepScheduler::prompt_copies_win(int layer, int n) const {
  if (layer < 0) return false;
  const uint64_t bytes = expert_bytes(static_cast<uint32_t>(layer));
  const int k = static_cast<int>(opt_.residency.k), E = static_cast<int>(res_.n_expert());
  const auto per_expert = static_cast<uint32_t>(std::max(1, n * k / E));
  return cost_.copy_s(bytes) < cost_.cpu_s(bytes, per_expert);
}

bool StepScheduler::begin_pass(int n_tokens, bool gated) {
  gated_pass_ = gated;
  if (!stages_prompt(n_tokens)) return false;
  // The CPU's share starts late on a staged prompt layer (measured), and
  // computes at its batch rate; where the link wins, it carries every cold
  // expert and the CPU takes none (see prompt_cpu).
  CostModel prompt = cost_;
  prompt.cpu_start_us = prompt_cpu_start_s_ * 1e6;
  if (prompt_cpu_gflops_ > 0) prompt.cpu_gflops = prompt_cpu_gflops_;
  res_.set_cost(prompt);
  if (!opt_.tuning.prompt_cpu && prompt_copies_win(first_tiered_, n_tokens)) res_.set_host_tier(false);
  prompt_cost_set_ = true;
  return true;
}

void StepScheduler::end_pass() {
  gated_pass_ = false;
  if (!prompt_cost_set_) return;
  res_.set_cost(cost_);
  res_.set_host_tier(true);
  prompt_cost_set_ = false;
}

const LayerSchedule& StepScheduler::plan_layer(uint64_t step, uint32_t layer, std::span<const ExpertKey> keys,
                                               std::span<const uint32_t> tokens, bool gated_layer, bool may_admit,
                                               std::span<const uint32_t> certain) {
  LayerSchedule& s = sched_;
  const double backlog = gated_layer && opt_.tuning.stage_gap ? link_backlog_s() : -1.0;
  const StepPlan& sp = res_.plan(step, layer, keys, tokens, backlog, may_admit, certain);
  s.plan = &sp;
  s.from_prompt_stage = sp.staged_bank == StagePlan::kTransitBank;
  s.bank = s.from_prompt_stage ? -1 : sp.staged_bank;
  s.n_transit = 0;
  for (auto& w : s.waves) w.clear();
  if (gated_layer) return s;  // the gated step copies in one go: no waves
  if (s.from_prompt_stage && prompt_.layer != static_cast<int>(layer))
    throw std::logic_error("step scheduler: a prompt stage of another layer");
  const uint32_t half = wave_experts();
  const size_t first_transit_wave = s.from_prompt_stage ? std::max<size_t>(1, prompt_.group_end.size()) : 0;
  s.waves.resize(first_transit_wave + 1);
  const uint32_t E = res_.n_expert();
  for (size_t i = 0; i < sp.plan.experts.size(); ++i) {
    const PlannedExpert& pe = sp.plan.experts[i];
    if (pe.tier == Tier::Host) continue;
    size_t wv = 0;
    if (pe.staged && s.from_prompt_stage) {
      const int g = prompt_group(pe.key % E);
      if (g < 0) throw std::logic_error("step scheduler: a staged expert of no copy group");
      wv = static_cast<size_t>(g);
    } else if (sp.transit[i] && sp.copy[i]) {
      wv = first_transit_wave + s.n_transit++ / half;
    }  // resident, admitted and a decode bank's staged ones: wave 0
    if (s.waves.size() <= wv) s.waves.resize(wv + 1);
    s.waves[wv].push_back(i);
  }
  return s;
}

bool StepScheduler::decode_all_on_gpu(int n_tokens, const LayerSchedule& s, bool kernels_take_layer) const {
  return n_tokens == 1 && s.plan != nullptr && s.plan->plan.n_host == 0 && s.n_transit <= res_.transit_slots() &&
         kernels_take_layer;
}

DecodeStage StepScheduler::stage_decode(uint64_t step, uint32_t layer, std::span<const ExpertKey> predicted) {
  DecodeStage out;
  if (layer >= pinned_.size() || res_.pool_of_layer(layer) < 0) return out;
  uint32_t cap = res_.stage_bank();
  uint32_t cold = 0;  // predicted and not resident
  for (ExpertKey k : predicted) cold += !res_.resident(k);
  if (opt_.tuning.prefetch == DecodePrefetch::Auto) {
    // Staged copies run in the background, but the link has only its
    // bandwidth; the experts not staged run on the CPU after the layer's
    // fixed host cost. In the gated step the link starts behind its backlog,
    // and the layer's routes come a measured stretch later.
    const uint64_t bytes = res_.bytes_of(layer * res_.n_expert());
    const bool gap_known = gated_pass_ && opt_.tuning.stage_gap;
    const double gap = gap_known ? route_gap_s_[layer] : 0.0;
    const double backlog = gap_known ? link_backlog_s() : 0.0;
    cap = decode_stage_count(cold, gap, backlog, min_overhead_s_, cost_.copy_s(bytes), cost_.cpu_s(bytes, 1));
    if (gated_pass_) staging_.gap_sum_s += gap, staging_.staged_sum += cap, ++staging_.stagings;
  }
  out.plan = &res_.stage(step, layer, predicted, cap);
  out.publish = gated_pass_ && opt_.tuning.staged_hits && out.plan->copies.size() == size_t{cold};
  return out;
}

const PromptStage& StepScheduler::stage_prompt(uint64_t step, int layer, int n_tokens) {
  prompt_.layer = -1;
  prompt_.plan = nullptr;
  prompt_.group_end.clear();
  if (!prompt_copies_win(layer, n_tokens)) return prompt_;
  const uint32_t E = res_.n_expert();
  std::vector<ExpertKey> wanted(E);  // ascending: at these pass sizes all are routed
  for (uint32_t e = 0; e < E; ++e) wanted[e] = static_cast<ExpertKey>(layer) * E + e;
  const StagePlan& st = res_.stage_transit(step, static_cast<uint32_t>(layer), wanted, res_.transit_slots());
  if (st.copies.empty()) return prompt_;
  prompt_.layer = layer;
  prompt_.plan = &st;
  prompt_group_.assign(E, -1);
  const uint32_t g = wave_experts();
  for (size_t j = 0; j < st.copies.size(); ++j) {
    prompt_group_[st.copies[j].first % E] = static_cast<int16_t>(j / g);
    if ((j + 1) % g == 0 || j + 1 == st.copies.size()) prompt_.group_end.push_back(j + 1);
  }
  return prompt_;
}

int StepScheduler::prompt_group(uint32_t expert) const {
  if (prompt_.layer < 0 || expert >= prompt_group_.size()) return -1;
  return prompt_group_[expert];
}

void StepScheduler::note_link(uint64_t bytes, Clock::time_point now) {
  link_free_at_ = std::max(link_free_at_, now) +
                  std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cost_.copy_s(bytes)));
}

double StepScheduler::link_backlog_s(Clock::time_point now) const {
  return std::max(0.0, std::chrono::duration<double>(link_free_at_ - now).count());
}

void StepScheduler::note_host_overhead(double s) {
  min_overhead_s_ = min_overhead_s_ > 0 ? std::min(min_overhead_s_, s) : s;
}

void StepScheduler::note_staged(uint32_t layer, uint32_t seq, Clock::time_point t) {
  staged_at_.at(layer) = t;
  staged_seq_.at(layer) = seq;
}

void StepScheduler::note_routes(uint32_t layer, uint32_t seq, Clock::time_point t) {
  if (staged_seq_.at(layer) != seq) return;
  // A moving average: the stretch moves little from token to token.
  const double gap = std::chrono::duration<double>(t - staged_at_[layer]).count();
  double& g = route_gap_s_[layer];
  g = g > 0 ? 0.8 * g + 0.2 * gap : gap;
}

void StepScheduler::note_prompt_cpu_delay(double s) {
  prompt_cpu_start_s_ = prompt_cpu_start_s_ > 0 ? 0.7 * prompt_cpu_start_s_ + 0.3 * s : s;
}

}  // namespace ms
