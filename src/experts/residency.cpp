#include "experts/residency.h"

#include <algorithm>
#include <stdexcept>

#include "util/error.h"

namespace ms {

TraceHeader residency_header(const ResidencyConfig& cfg) {
  TraceHeader h;
  h.n_layer = cfg.n_layer;
  h.n_expert = cfg.n_expert;
  h.k = cfg.k;
  h.expert_bytes = cfg.slot_bytes;
  h.expert_bytes.resize(cfg.n_layer, 0);
  return h;
}

namespace {

PoolLayout layout_for(const ResidencyConfig& cfg) {
  if (cfg.n_layer == 0 || cfg.n_expert == 0) throw Error("expert residency: the model has no routed experts");
  if (cfg.capacity) return make_pool_layout(residency_header(cfg), *cfg.capacity);
  CapacitySpec cap;
  cap.kind = CapacitySpec::Kind::Bytes;
  cap.value = double(cfg.pool_bytes);
  return make_pool_layout(residency_header(cfg), cap);
}

PolicyOptions policy_options(const ResidencyConfig& cfg) {
  PolicyOptions o;
  if (cfg.policy_options) {
    o = *cfg.policy_options;
    o.n_keys = cfg.n_layer * cfg.n_expert;
    return o;
  }
  o.n_keys = cfg.n_layer * cfg.n_expert;
  o.admit_margin = cfg.admit_margin;
  if (cfg.profile) o.pinned = cfg.profile->hottest(o.n_keys);
  return o;
}

}  // namespace

ExpertResidency::ExpertResidency(const ResidencyConfig& cfg)
    : cfg_(cfg),
      layout_(layout_for(cfg)),
      cache_(layout_, cfg.n_expert, cfg.policy, policy_options(cfg)),
      planner_(cfg.cost, residency_header(cfg).expert_bytes, cfg.n_expert) {
  slot_of_key_.assign(size_t(cfg.n_layer) * cfg.n_expert, -1);
  free_slots_.resize(layout_.pools.size());
  transit_next_.assign(layout_.pools.size(), 0);
  for (size_t p = 0; p < layout_.pools.size(); ++p)
    for (size_t s = layout_.pools[p].slots; s-- > 0;) free_slots_[p].push_back(int32_t(s));
}

int32_t ExpertResidency::take_slot(int32_t pool) {
  auto& f = free_slots_[size_t(pool)];
  // The policy admitted more experts than the pool has slots: a bug in the
  // policy's capacity accounting, never a user error.
  if (f.empty()) throw std::logic_error("expert residency: no free slot in pool " + std::to_string(pool));
  const int32_t s = f.back();
  f.pop_back();
  return s;
}

void ExpertResidency::release(ExpertKey key) {
  int32_t& s = slot_of_key_[key];
  if (s < 0) throw std::logic_error("expert residency: evicting an expert that holds no slot");
  free_slots_[size_t(layout_.pool_of_layer[key / cfg_.n_expert])].push_back(s);
  s = -1;
}

SlotRef ExpertResidency::slot_of(ExpertKey key) const {
  if (key >= slot_of_key_.size() || slot_of_key_[key] < 0) return {};
  return {layout_.pool_of_layer[key / cfg_.n_expert], slot_of_key_[key]};
}

size_t ExpertResidency::resident_count() const {
  size_t n = 0;
  for (int32_t s : slot_of_key_) n += s >= 0;
  return n;
}

bool ExpertResidency::whole_layers() const { return cache_.name() == "layers" || cache_.name() == "layers-first"; }

namespace {

// The layers of a pool in the order "layers" fills them: bit-reversed index
// order, so that the first m of them, for any m, are spread about evenly
// over the pool (0, n/2, n/4, 3n/4, ...).
std::vector<uint32_t> spread_order(const std::vector<uint32_t>& layers) {
  uint32_t bits = 0;
  while ((size_t(1) << bits) < layers.size()) ++bits;
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < (1u << bits); ++i) {
    uint32_t r = 0;
    for (uint32_t b = 0; b < bits; ++b) r |= ((i >> b) & 1u) << (bits - 1 - b);
    if (r < layers.size()) out.push_back(layers[r]);
  }
  return out;
}

}  // namespace

bool ExpertResidency::layer_pinned(uint32_t layer) const {
  if (!whole_layers() || layer >= cfg_.n_layer || layout_.pool_of_layer[layer] < 0) return false;
  for (uint32_t e = 0; e < cfg_.n_expert; ++e)
    if (slot_of_key_[size_t(layer) * cfg_.n_expert + e] < 0) return false;
  return true;
}

std::vector<std::pair<ExpertKey, SlotRef>> ExpertResidency::initial_placement(bool fill) {
  std::vector<std::pair<ExpertKey, SlotRef>> out;
  auto place = [&](ExpertKey key) {
    const int32_t pool = layout_.pool_of_layer[key / cfg_.n_expert];
    slot_of_key_[key] = take_slot(pool);
    out.push_back({key, slot_of(key)});
  };
  // What the policy starts with (pinned experts), then offers in order: the
  // profile's hottest, then expert e of every layer of a pool for e = 0, 1, ...
  // (an even spread when nothing is known about popularity).
  for (ExpertKey key : cache_.resident())
    if (slot_of_key_[key] < 0) place(key);
  if (!fill) return out;
  std::vector<ExpertKey> offers;
  if (whole_layers()) {
    // Layer after layer: as many layers as fit hold every expert; spread
    // over the model, or the first ones ("layers-first").
    const bool first = cache_.name() == "layers-first";
    for (const Pool& pool : layout_.pools)
      for (uint32_t layer : first ? pool.layers : spread_order(pool.layers))
        for (uint32_t e = 0; e < cfg_.n_expert; ++e) offers.push_back(layer * cfg_.n_expert + e);
  } else {
    if (cfg_.profile) offers = cfg_.profile->hottest(slot_of_key_.size());
    for (const Pool& pool : layout_.pools)
      for (uint32_t e = 0; e < cfg_.n_expert; ++e)
        for (uint32_t layer : pool.layers) offers.push_back(layer * cfg_.n_expert + e);
  }
  std::vector<ExpertKey> evicted;
  std::vector<size_t> room(layout_.pools.size());
  for (size_t p = 0; p < room.size(); ++p) room[p] = free_slots_[p].size();
  for (ExpertKey key : offers) {
    const int32_t pool = layout_.pool_of_layer[key / cfg_.n_expert];
    if (pool < 0 || room[size_t(pool)] == 0 || slot_of_key_[key] >= 0) continue;
    evicted.clear();
    // Offered only while the pool has room: nothing may be evicted.
    if (!cache_.prefetch(0, key, 1.0f, {}, evicted)) continue;
    if (!evicted.empty()) throw std::logic_error("expert residency: initial placement evicted an expert");
    place(key);
    --room[size_t(pool)];
  }
  return out;
}

// Fills bank b for layer's step with the not-resident, distinct experts of
// `keys` (in order, at most cap), each in the slot next_slot() gives, and
// lists their copies in the stage plan.
void ExpertResidency::fill_bank(Bank& b, uint64_t step, uint32_t layer, int32_t pool, std::span<const ExpertKey> keys,
                                uint32_t cap, const std::function<int32_t()>& next_slot) {
  StagePlan& sp = stage_plan_;
  b.step = step;
  b.layer = layer;
  b.predicted.assign(keys.begin(), keys.end());
  b.staged.clear();
  for (ExpertKey key : keys) {
    if (b.staged.size() >= cap) break;
    if (key / cfg_.n_expert != layer) throw Error("expert residency: a stage for another layer");
    if (resident(key)) continue;
    bool dup = false;
    for (const auto& [k, s] : b.staged) dup = dup || k == key;
    if (dup) continue;
    const int32_t slot = next_slot();
    b.staged.push_back({key, slot});
    sp.copies.push_back({key, SlotRef{pool, slot}});
    counters_.stage_bytes += planner_.bytes_of(key);
    counters_.copy_bytes += planner_.bytes_of(key);
  }
  std::sort(b.staged.begin(), b.staged.end());
  counters_.staged += b.staged.size();
}

const StagePlan& ExpertResidency::stage(uint64_t step, uint32_t layer, std::span<const ExpertKey> predicted,
                                        uint32_t max_experts) {
  StagePlan& sp = stage_plan_;
  sp.bank = -1;
  sp.copies.clear();
  if (cfg_.stage_bank == 0 || layer >= cfg_.n_layer) return sp;
  const int32_t pool = layout_.pool_of_layer[layer];
  if (pool < 0) return sp;
  // A newer prediction for the same layer step replaces the old one.
  for (Bank& b : banks_)
    if (b.layer == int64_t(layer) && b.step == step) b.layer = -1;
  const int32_t bank = next_bank_;
  next_bank_ ^= 1;
  const uint32_t first = uint32_t(layout_.pools[size_t(pool)].slots) + cfg_.transit_slots + uint32_t(bank) * cfg_.stage_bank;
  uint32_t used = 0;
  fill_bank(banks_[bank], step, layer, pool, predicted, std::min(max_experts, cfg_.stage_bank),
            [&] { return int32_t(first + used++); });
  last_stage_bytes_ = 0;
  for (const auto& [key, where] : sp.copies) last_stage_bytes_ += planner_.bytes_of(key);
  sp.bank = bank;
  return sp;
}

const StagePlan& ExpertResidency::stage_transit(uint64_t step, uint32_t layer, std::span<const ExpertKey> wanted,
                                                uint32_t max_experts) {
  StagePlan& sp = stage_plan_;
  sp.bank = -1;
  sp.copies.clear();
  transit_bank_.layer = -1;
  if (cfg_.transit_slots == 0 || layer >= cfg_.n_layer) return sp;
  const int32_t pool = layout_.pool_of_layer[layer];
  if (pool < 0) return sp;
  // The next transit slots, in the order the plan's streamed experts take them.
  const uint32_t cache_slots = uint32_t(layout_.pools[size_t(pool)].slots);
  uint32_t& t = transit_next_[size_t(pool)];
  fill_bank(transit_bank_, step, layer, pool, wanted, std::min(max_experts, cfg_.transit_slots), [&] {
    const int32_t slot = int32_t(cache_slots + t);
    t = (t + 1) % cfg_.transit_slots;
    return slot;
  });
  sp.bank = StagePlan::kTransitBank;
  return sp;
}

const StepPlan& ExpertResidency::plan(uint64_t step, uint32_t layer, std::span<const ExpertKey> keys,
                                      std::span<const uint32_t> tokens, double link_backlog_s, bool may_admit,
                                      std::span<const uint32_t> certain) {
  StepPlan& p = plan_;
  // What was staged for this layer step (prefetch), if anything.
  Bank* bank = nullptr;
  for (Bank& b : banks_)
    if (b.layer == int64_t(layer) && b.step == step) bank = &b;
  const bool from_transit = transit_bank_.layer == int64_t(layer) && transit_bank_.step == step;
  if (from_transit) bank = &transit_bank_;  // a prompt's stage; banks serve decode
  std::vector<ExpertKey> staged_keys;
  if (bank)
    for (const auto& [k, s] : bank->staged) staged_keys.push_back(k);
  // What the link carries before this step's copies: the caller's backlog
  // when it knows it. Otherwise, with a decode prediction, assume the link
  // carries the next layer's staging too (about as much as this layer's),
  // and leave it that room. A prompt's stage was copied while earlier layers
  // computed.
  const double link_busy = link_backlog_s >= 0 ? link_backlog_s
                           : bank && !from_transit
                               ? double(last_stage_bytes_) / (planner_.cost().pcie_gbps * 1e9)
                               : 0.0;
  cache_.set_admission(may_admit);
  p.plan = planner_.plan(step, layer, keys, tokens, cache_, staged_keys, link_busy, certain);
  cache_.set_admission(true);
  p.staged_bank = -1;
  p.prediction = PredictionOutcome{};
  if (bank) {
    PredictionOutcome& o = p.prediction;
    o.predicted = uint32_t(bank->predicted.size());
    for (ExpertKey k : bank->predicted) o.correct += std::binary_search(keys.begin(), keys.end(), k);
    o.routed = uint32_t(keys.size());
    o.staged = uint32_t(bank->staged.size());
    o.cold = p.plan.n_stream + p.plan.n_host;
  }
  uint32_t admitted_staged = 0;  // admitted experts copied from their staging slot
  // Evictions free slots first; admissions then take them.
  for (ExpertKey key : p.plan.evicted) release(key);
  const int32_t pool = layout_.pool_of_layer[layer];
  for (ExpertKey key : p.plan.admitted) slot_of_key_[key] = take_slot(pool);
  const size_t n = p.plan.experts.size();
  p.where.assign(n, SlotRef{});
  p.copy_from.assign(n, SlotRef{});
  p.copy.assign(n, 0);
  p.transit.assign(n, 0);
  const uint32_t cache_slots = pool >= 0 ? uint32_t(layout_.pools[size_t(pool)].slots) : 0;
  for (size_t i = 0; i < n; ++i) {
    const PlannedExpert& e = p.plan.experts[i];
    if (e.tier == Tier::Host) continue;
    if (e.staged) {
      const auto it = std::lower_bound(bank->staged.begin(), bank->staged.end(), std::pair<ExpertKey, int32_t>{e.key, -1});
      if (it == bank->staged.end() || it->first != e.key) throw std::logic_error("expert residency: a staged expert holds no slot");
      p.where[i] = {pool, it->second};
      p.transit[i] = 1;
      continue;
    }
    if (e.tier == Tier::Resident || e.admit) {
      p.where[i] = slot_of(e.key);
      if (!p.where[i].valid()) throw std::logic_error("expert residency: a resident expert holds no slot");
      p.copy[i] = e.admit;
      if (e.admit && bank) {
        const auto it =
            std::lower_bound(bank->staged.begin(), bank->staged.end(), std::pair<ExpertKey, int32_t>{e.key, -1});
        if (it != bank->staged.end() && it->first == e.key) p.copy_from[i] = {pool, it->second}, ++admitted_staged;
      }
      continue;
    }
    // Streamed for this step only.
    if (cfg_.transit_slots == 0) throw std::logic_error("expert residency: streaming needs transit slots");
    uint32_t& t = transit_next_[size_t(pool)];
    p.where[i] = {pool, int32_t(cache_slots + t)};
    t = (t + 1) % cfg_.transit_slots;
    p.copy[i] = 1;
    p.transit[i] = 1;
  }
  if (bank) {
    p.prediction.staged_used = p.plan.n_staged + admitted_staged;
    p.prediction.staged_admitted = admitted_staged;
    if (p.prediction.staged_used)
      p.staged_bank = from_transit ? StagePlan::kTransitBank : int32_t(bank - banks_);
    counters_.staged_used += p.prediction.staged_used;
    bank->layer = -1;  // used: a bank serves one plan
  }
  ++counters_.layer_steps;
  counters_.resident += p.plan.n_resident;
  counters_.streamed += p.plan.n_stream;  // admitted ones included
  counters_.host += p.plan.n_host;
  counters_.admitted += p.plan.admitted.size();
  counters_.evicted += p.plan.evicted.size();
  for (size_t i = 0; i < n; ++i)
    if (p.copy[i] && !p.copy_from[i].valid()) counters_.copy_bytes += planner_.bytes_of(p.plan.experts[i].key);
  return p;
}

}  // namespace ms
