#include "experts/simulator.h"

#include <algorithm>

#include "experts/belady.h"
#include "experts/planner.h"
#include "experts/prefetch.h"
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

SimResult simulate(const Trace& trace, const AccessSequence& seq, const SimOptions& opts) {
  const TraceHeader& h = trace.header;
  const PoolLayout layout = make_pool_layout(h, opts.capacity);
  PolicyOptions po = opts.policy_options;
  po.n_keys = h.n_layer * h.n_expert;
  PooledCache cache(layout, h.n_expert, opts.policy, po);
  Planner planner(opts.cost, h.expert_bytes, h.n_expert);
  if (opts.prefetch == PrefetchMode::Predicted && !h.has_predictions())
    throw Error("--prefetch predicted needs a trace with next-layer predictions (this one has none; try --prefetch oracle)");

  SimResult r;
  r.policy = cache.name();
  if (opts.prefetch != PrefetchMode::None) r.policy += std::string(" +prefetch:") + prefetch_mode_name(opts.prefetch);
  r.capacity = opts.capacity.describe();
  r.slots = layout.total_slots();
  r.slot_bytes = layout.total_bytes();
  r.fraction = double(r.slots) / double(std::max<uint64_t>(1, uint64_t(h.moe_layer_count()) * h.n_expert));
  std::vector<LayerSimStats> per_layer(h.n_layer);
  for (uint32_t l = 0; l < h.n_layer; ++l) per_layer[l].layer = l;

  std::vector<uint8_t> prefetched_unused(size_t(h.n_layer) * h.n_expert, 0);
  std::vector<PrefetchCandidate> candidates;
  const auto bytes_of = [&](ExpertKey k) { return planner.bytes_of(k); };
  uint32_t last_step = ~0u;
  for (size_t i = 0; i < seq.steps.size(); ++i) {
    const LayerStep& s = seq.steps[i];
    const auto keys = seq.keys_of(s);
    const ExpertPlan plan = planner.plan(s.step, s.layer, keys, seq.uses_of(s), cache);
    LayerSimStats& ls = per_layer[s.layer];
    ls.accesses += keys.size();
    ls.hits += plan.n_resident;
    r.resident += plan.n_resident;
    r.streamed += plan.n_stream;
    r.host_computed += plan.n_host;
    r.pcie_bytes += plan.pcie_bytes;
    for (const PlannedExpert& e : plan.experts)
      if (prefetched_unused[e.key]) {
        prefetched_unused[e.key] = 0;
        if (e.tier == Tier::Resident) ++r.prefetch_used;
      }
    for (ExpertKey e : plan.evicted) prefetched_unused[e] = 0;

    double time = plan.time_s;
    if (opts.prefetch != PrefetchMode::None) {
      candidates.clear();
      if (opts.prefetch == PrefetchMode::Oracle) {
        if (i + 1 < seq.steps.size())
          for (ExpertKey k : seq.keys_of(seq.steps[i + 1])) candidates.push_back({k, 1.0f, 1});
      } else {
        const auto pk = seq.predictions_of(s);
        const auto pc = seq.confidences_of(s);
        for (size_t j = 0; j < pk.size(); ++j) candidates.push_back({pk[j], pc[j], 1});
      }
      uint64_t cap = opts.prefetch_cap_bytes;
      if (cap == 0 && !candidates.empty()) cap = uint64_t(h.k) * bytes_of(candidates.front().key);
      const PrefetchPlan pf = plan_prefetch(s.step, candidates, cache, keys, cap, bytes_of,
                                            opts.prefetch_min_confidence);
      for (ExpertKey k : pf.evicted) prefetched_unused[k] = 0;
      for (ExpertKey k : pf.copies) prefetched_unused[k] = 1;
      r.prefetched += pf.copies.size();
      r.prefetch_bytes += pf.bytes;
      r.pcie_bytes += pf.bytes;
      // Prefetch copies queue behind this step's demand copies on the copy engine.
      double pf_s = 0;
      for (ExpertKey k : pf.copies) pf_s += opts.cost.copy_s(bytes_of(k));
      time = std::max(time, plan.copy_s + pf_s);
    }
    r.time_s += time;
    if (s.phase == Phase::Prompt) {
      r.prompt_time_s += time;
    } else {
      r.decode_time_s += time;
    }
    if (s.step != last_step) {
      (s.phase == Phase::Prompt ? r.prompt_tokens : r.decode_tokens) += s.tokens;
      last_step = s.step;
    }
  }

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
