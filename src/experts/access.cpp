#include "experts/access.h"

#include <algorithm>
#include <map>

namespace ms {

AccessSequence build_access_sequence(const Trace& trace) {
  const TraceHeader& h = trace.header;
  AccessSequence a;
  a.n_layer = h.n_layer;
  a.n_expert = h.n_expert;
  // The next MoE layer after each layer: predictions name router L+1's choice.
  std::vector<int64_t> next_moe(h.n_layer, -1);
  for (int64_t l = int64_t(h.n_layer) - 2; l >= 0; --l)
    next_moe[l] = h.is_moe_layer(uint32_t(l + 1)) ? l + 1 : next_moe[l + 1];

  std::vector<uint32_t> count(h.n_expert), pred_count(h.n_expert);
  std::vector<std::vector<const TraceRecord*>> by_layer(h.n_layer);
  size_t i = 0;
  while (i < trace.records.size()) {
    const uint32_t step = trace.records[i].step;
    size_t j = i;
    for (auto& v : by_layer) v.clear();
    for (; j < trace.records.size() && trace.records[j].step == step; ++j)
      by_layer[trace.records[j].layer].push_back(&trace.records[j]);
    for (uint32_t layer = 0; layer < h.n_layer; ++layer) {
      const auto& recs = by_layer[layer];
      if (recs.empty()) continue;
      LayerStep s;
      s.step = a.n_steps;
      s.layer = layer;
      s.phase = recs.front()->phase;
      s.tokens = static_cast<uint32_t>(recs.size());
      s.first = static_cast<uint32_t>(a.keys.size());
      for (const TraceRecord* r : recs)
        for (uint16_t e : trace.ids_of(*r)) ++count[e];
      for (uint32_t e = 0; e < h.n_expert; ++e) {
        if (!count[e]) continue;
        a.keys.push_back(layer * h.n_expert + e);
        a.uses.push_back(count[e]);
        count[e] = 0;
      }
      s.count = static_cast<uint32_t>(a.keys.size() - s.first);
      s.pred_first = static_cast<uint32_t>(a.pred_keys.size());
      if (h.has_predictions() && next_moe[layer] >= 0) {
        for (const TraceRecord* r : recs)
          for (uint16_t e : trace.predictions_of(*r)) ++pred_count[e];
        for (uint32_t e = 0; e < h.n_expert; ++e) {
          if (!pred_count[e]) continue;
          a.pred_keys.push_back(uint32_t(next_moe[layer]) * h.n_expert + e);
          a.pred_conf.push_back(float(pred_count[e]) / float(recs.size()));
          pred_count[e] = 0;
        }
      }
      s.pred_count = static_cast<uint32_t>(a.pred_keys.size() - s.pred_first);
      a.steps.push_back(s);
    }
    ++a.n_steps;
    i = j;
  }
  return a;
}

}  // namespace ms
