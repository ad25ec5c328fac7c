#include "engine/sim_devices.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "util/bytes.h"
#include "util/error.h"

namespace ms {

PlacementModel placement_model_of(const TraceHeader& h, uint64_t dense_bytes, uint64_t reserve_bytes,
                                  uint64_t hidden_bytes) {
  PlacementModel m;
  m.k = h.k;
  m.reserve_bytes = reserve_bytes;
  m.hidden_bytes = hidden_bytes;
  m.layers.resize(h.n_layer);
  for (uint32_t l = 0; l < h.n_layer; ++l) {
    PlacementLayer& L = m.layers[l];
    // Even shares, the remainder on the first layers: the sum is dense_bytes.
    L.dense_bytes = dense_bytes / h.n_layer + (l < dense_bytes % h.n_layer ? 1 : 0);
    if (h.is_moe_layer(l)) L.n_expert = h.n_expert, L.expert_bytes = h.expert_bytes[l];
  }
  return m;
}

ExpertPopularity trace_popularity(const TraceHeader& h, const AccessSequence& seq) {
  ExpertPopularity pop(h.n_layer);
  for (uint32_t l = 0; l < h.n_layer; ++l)
    if (h.is_moe_layer(l)) pop[l].assign(h.n_expert, 0);
  uint64_t tokens = 0;
  uint32_t pass = ~0u;
  for (const LayerStep& s : seq.steps) {
    if (s.phase != Phase::Decode) continue;
    if (s.step != pass) pass = s.step, tokens += s.tokens;
    const auto keys = seq.keys_of(s);
    const auto uses = seq.uses_of(s);
    for (size_t i = 0; i < keys.size(); ++i) pop[s.layer][keys[i] % h.n_expert] += uses[i];
  }
  if (tokens == 0) throw Error("the trace has no decode tokens to measure expert popularity from");
  for (auto& row : pop)
    for (double& v : row) v /= double(tokens);
  return pop;
}

DeviceSimResult simulate_devices(const Trace& trace, const AccessSequence& seq, const DeviceSimOptions& o) {
  const TraceHeader& h = trace.header;
  const PlacementModel model = placement_model_of(h, o.dense_bytes, o.reserve_bytes, o.hidden_bytes);
  DeviceSimResult r;
  r.plan = plan_device_placement(model, o.devices, o.rates,
                                 o.popularity.empty() ? trace_popularity(h, seq) : o.popularity);
  const DevicePlacement& plan = r.plan;
  const PlacementCosts c(model, o.devices, o.rates);
  const size_t D = o.devices.size();
  const bool fixed = o.policy == "plan";
  r.policy = fixed ? "plan (the planner's residents, fixed)" : o.policy + " per device";

  // Each device's cache over its own layers' experts.
  std::vector<std::unique_ptr<CachePolicy>> cache(D);
  r.devices.resize(D);
  for (size_t d = 0; d < D; ++d) {
    const DevicePlan& dp = plan.devices[d];
    DeviceSimStats& st = r.devices[d];
    st.id = dp.id;
    st.first_layer = dp.first_layer;
    st.end_layer = dp.end_layer;
    if (fixed) {
      st.slots = dp.n_own;
      continue;
    }
    uint64_t largest = 0;
    for (uint32_t l = dp.first_layer; l < dp.end_layer; ++l) largest = std::max(largest, model.layers[l].expert_bytes);
    const uint64_t room = dp.budget - dp.fixed_bytes - dp.hosted_expert_bytes;
    st.slots = largest ? room / largest : 0;
    if (st.slots == 0) continue;
    PolicyOptions po = o.policy_options;
    po.n_keys = h.n_layer * h.n_expert;
    cache[d] = make_policy(o.policy, st.slots, po);
  }

  // Per decode token: the dense weights, the hand-offs between owners, the head.
  PlacementCost per_token;
  for (uint32_t l = 0; l < h.n_layer; ++l) {
    per_token.dense_s += c.dense_s(l, plan.owner[l]);
    if (l > 0 && plan.owner[l] != plan.owner[l - 1]) {
      per_token.handoff_s += c.handoff_s(plan.owner[l - 1], plan.owner[l]);
      per_token.peer_bytes += double(o.hidden_bytes);
    }
  }
  per_token.head_s = c.head_s(plan.owner.back());

  PlacementCost sum;
  AccessResult ar;
  std::vector<ExpertKey> own_keys;
  std::vector<uint32_t> own_uses;
  uint32_t pass = ~0u;
  for (const LayerStep& s : seq.steps) {
    const bool decode = s.phase == Phase::Decode;
    if (s.step != pass) {
      pass = s.step;
      (decode ? r.decode_tokens : r.prompt_tokens) += s.tokens;
      if (decode) {
        sum.dense_s += s.tokens * per_token.dense_s;
        sum.handoff_s += s.tokens * per_token.handoff_s;
        sum.head_s += s.tokens * per_token.head_s;
        sum.peer_bytes += s.tokens * per_token.peer_bytes;
        for (uint32_t l = 1; l < h.n_layer; ++l)
          if (plan.owner[l] != plan.owner[l - 1])
            r.devices[plan.owner[l - 1]].peer_bytes += uint64_t{s.tokens} * o.hidden_bytes;
      }
    }
    const uint32_t l = s.layer;
    const size_t owner = plan.owner[l];
    DeviceSimStats& st = r.devices[owner];
    const auto keys = seq.keys_of(s);
    const auto uses = seq.uses_of(s);
    const uint64_t bytes = model.layers[l].expert_bytes;
    // The dynamic cache sees the step's experts that are not on a peer.
    own_keys.clear();
    own_uses.clear();
    for (size_t i = 0; i < keys.size(); ++i)
      if (plan.experts[l][keys[i] % h.n_expert].home != ExpertHome::Peer)
        own_keys.push_back(keys[i]), own_uses.push_back(uses[i]);
    ar.clear();
    if (cache[owner]) cache[owner]->access(s.step, own_keys, own_uses, ar);
    std::sort(ar.admitted.begin(), ar.admitted.end());
    if (!decode) continue;
    for (size_t i = 0; i < keys.size(); ++i) {
      const ExpertPlace& planned = plan.experts[l][keys[i] % h.n_expert];
      ExpertPlace p = planned;
      if (!fixed && planned.home != ExpertHome::Peer) {
        const bool admitted = std::binary_search(ar.admitted.begin(), ar.admitted.end(), keys[i]);
        if (admitted) p = {ExpertHome::Stream, -1};  // copied in over the link, then kept
        else if (cache[owner] && cache[owner]->contains(keys[i])) p = {ExpertHome::Owner, int8_t(owner)};
        else p = {c.cold_home(l, owner), -1};
      }
      const uint64_t u = uses[i];
      const double t = double(u) * c.use_s(l, owner, p);
      st.accesses += u;
      switch (p.home) {
        case ExpertHome::Owner: st.hits += u, sum.owner_s += t; break;
        case ExpertHome::Peer:
          st.peer_served += u, sum.peer_s += t;
          r.devices[size_t(p.device)].hosted += u;
          // The hidden state there and the result back.
          st.peer_bytes += u * o.hidden_bytes;
          r.devices[size_t(p.device)].peer_bytes += u * o.hidden_bytes;
          sum.peer_bytes += double(u) * 2.0 * double(o.hidden_bytes);
          break;
        case ExpertHome::Stream:
          st.streamed += u, sum.stream_s += t;
          st.link_bytes += u * bytes;
          sum.link_bytes += double(u) * double(bytes);
          break;
        case ExpertHome::Cpu: st.cpu += u, sum.cpu_s += t; break;
      }
    }
  }
  if (r.decode_tokens == 0) throw Error("sim --devices: the trace has no decode tokens (the cost model is per decode token)");
  const double n = double(r.decode_tokens);
  r.measured = {sum.dense_s / n, sum.owner_s / n, sum.peer_s / n, sum.stream_s / n, sum.cpu_s / n,
                sum.handoff_s / n, sum.head_s / n, sum.link_bytes / n, sum.peer_bytes / n};
  return r;
}

std::string device_sim_table(const DeviceSimResult& r) {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-6s  %-9s  %6s  %9s  %8s  %9s  %9s  %9s  %9s  %12s  %12s\n", "device", "layers",
                "slots", "accesses", "hit rate", "on peers", "streamed", "CPU", "hosted", "link bytes", "peer bytes");
  s += buf;
  for (const DeviceSimStats& d : r.devices) {
    const std::string layers = d.first_layer == d.end_layer       ? "-"
                               : d.end_layer == d.first_layer + 1 ? std::to_string(d.first_layer)
                                                                  : std::to_string(d.first_layer) + "-" +
                                                                        std::to_string(d.end_layer - 1);
    std::snprintf(buf, sizeof buf, "  %-6d  %-9s  %6zu  %9llu  %7.1f%%  %9llu  %9llu  %9llu  %9llu  %12s  %12s\n", d.id,
                  layers.c_str(), d.slots, static_cast<unsigned long long>(d.accesses), 100.0 * d.hit_rate(),
                  static_cast<unsigned long long>(d.peer_served), static_cast<unsigned long long>(d.streamed),
                  static_cast<unsigned long long>(d.cpu), static_cast<unsigned long long>(d.hosted),
                  format_bytes(d.link_bytes).c_str(), format_bytes(d.peer_bytes).c_str());
    s += buf;
  }
  const double meas = r.cost_per_token_s(), pred = r.predicted_per_token_s();
  std::snprintf(buf, sizeof buf,
                "  cost per decode token: %.3f ms replayed (%llu decode tokens; %llu prompt tokens not timed), "
                "%.3f ms planned (%+.2f%%)\n",
                meas * 1e3, static_cast<unsigned long long>(r.decode_tokens),
                static_cast<unsigned long long>(r.prompt_tokens), pred * 1e3,
                pred > 0 ? 100.0 * (meas - pred) / pred : 0.0);
  s += buf;
  std::snprintf(buf, sizeof buf, "  per token: link %s, peer %s\n",
                format_bytes(uint64_t(std::llround(r.measured.link_bytes))).c_str(),
                format_bytes(uint64_t(std::llround(r.measured.peer_bytes))).c_str());
  s += buf;
  return s;
}

}  // namespace ms
