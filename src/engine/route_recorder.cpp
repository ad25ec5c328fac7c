#include "engine/route_recorder.h"

#include <algorithm>
#include <numeric>

#include "quant/quant.h"
#include "quant/types.h"
#include "util/error.h"

namespace ms {

TraceHeader RouteRecorder::header_for(const ModelWeights& w, const Options& opt) {
  const ModelConfig& c = w.cfg;
  if (!c.is_moe()) throw Error("--record-routes: the model (" + c.describe() + ") has no routed experts to record");
  if (c.n_expert > 65535) throw Error("--record-routes: traces hold expert ids below 65536");
  TraceHeader h;
  h.model = opt.model_name.empty() ? c.describe() : opt.model_name;
  h.arch = c.arch_name;
  h.n_layer = static_cast<uint32_t>(c.n_layer);
  h.n_expert = static_cast<uint32_t>(c.n_expert);
  h.k = static_cast<uint32_t>(c.n_expert_used);
  h.expert_bytes.assign(h.n_layer, 0);
  for (uint32_t l = 0; l < h.n_layer; ++l) {
    const ExpertWeights& ex = w.layers[l].experts;
    if (ex.n_expert > 0) {
      h.expert_bytes[l] = ex.expert_bytes();
      if (h.quant.empty()) h.quant = type_name(ex.gate_type);
    }
  }
  if (opt.gate_weights) h.flags |= kTraceHasGateWeights;
  if (opt.predictions) {
    h.flags |= kTraceHasPredictions;
    h.k_pred = h.k;
  }
  h.validate();
  return h;
}

RouteRecorder::RouteRecorder(const std::string& path, const ModelWeights& w, uint32_t n_prompt, Options opt)
    : w_(w), opt_(std::move(opt)), header_(header_for(w, opt_)), n_prompt_(n_prompt) {
  if (opt_.predictions) {
    // Dequantize every router once: predictions need router L+1 on layer L's state.
    const int64_t D = w.cfg.n_embd;
    router_f32_.resize(static_cast<size_t>(w.cfg.n_layer));
    for (int l = 0; l < w.cfg.n_layer; ++l) {
      const TensorView& r = w.layers[static_cast<size_t>(l)].router;
      if (!r || header_.expert_bytes[static_cast<size_t>(l)] == 0) continue;
      auto& m = router_f32_[static_cast<size_t>(l)];
      m.resize(static_cast<size_t>(r.rows * D));
      for (int64_t e = 0; e < r.rows; ++e) dequantize_row(r.type, r.data + e * r.row_bytes(), m.data() + e * D, D);
    }
  }
  writer_ = std::make_unique<TraceWriter>(path, header_);
}

void RouteRecorder::attach(Backend& be) {
  be.set_route_hook([this](const RouteEvent& ev) { record(ev); }, opt_.predictions);
}

void RouteRecorder::finish(Backend* be) {
  if (be) be->set_route_hook(nullptr);
  writer_->close();
}

// Top-k_pred experts of the next MoE layer's router on this layer's FFN input;
// the last MoE layer repeats its own choice (nothing follows it to check).
void RouteRecorder::predict(int layer, int n, const float* hidden) {
  const uint32_t kp = header_.k_pred, E = header_.n_expert;
  const int64_t D = w_.cfg.n_embd;
  pred_.assign(static_cast<size_t>(n) * kp, 0);
  int next = layer + 1;
  while (next < w_.cfg.n_layer && router_f32_[static_cast<size_t>(next)].empty()) ++next;
  if (next >= w_.cfg.n_layer) {
    std::copy(ids16_.begin(), ids16_.end(), pred_.begin());  // k_pred == k
    return;
  }
  const std::vector<float>& R = router_f32_[static_cast<size_t>(next)];
  logits_.resize(E);
  std::vector<uint16_t> order(E);
  for (int t = 0; t < n; ++t) {
    const float* x = hidden + t * D;
    for (uint32_t e = 0; e < E; ++e) {
      const float* row = R.data() + e * D;
      float s = 0;
      for (int64_t i = 0; i < D; ++i) s += row[i] * x[i];
      logits_[e] = s;
    }
    std::iota(order.begin(), order.end(), uint16_t{0});
    std::partial_sort(order.begin(), order.begin() + kp, order.end(),
                      [&](uint16_t a, uint16_t b) { return logits_[a] > logits_[b] || (logits_[a] == logits_[b] && a < b); });
    std::copy(order.begin(), order.begin() + kp, pred_.begin() + static_cast<size_t>(t) * kp);
  }
}

void RouteRecorder::record(const RouteEvent& ev) {
  const int layer = ev.layer, n = ev.n_tokens, k = ev.k;
  if (k != static_cast<int>(header_.k) || layer < 0 || layer >= static_cast<int>(header_.n_layer))
    throw Error("--record-routes: the backend reported layer " + std::to_string(layer) + " with k = " +
                std::to_string(k) + ", the trace header has " + std::to_string(header_.n_layer) + " layers, k = " +
                std::to_string(header_.k));
  // Predictions without the FFN input, or gate weights without weights, would
  // record garbage: refuse instead.
  if (opt_.predictions && !ev.hidden)
    throw Error("--record-predictions: the backend did not supply the layers' FFN input (RouteEvent::hidden)");
  if (opt_.gate_weights && !ev.weights)
    throw Error("--record-routes: the backend did not supply the gate weights (RouteEvent::weights)");
  if (layer <= last_layer_) {  // a new forward pass
    writer_->begin_step();
    pos0_ = next_pos_;
    next_pos_ += static_cast<uint32_t>(n);
  }
  last_layer_ = layer;
  ids16_.resize(static_cast<size_t>(n) * k);
  for (size_t i = 0; i < ids16_.size(); ++i) ids16_[i] = static_cast<uint16_t>(ev.ids[i]);
  if (opt_.predictions) predict(layer, n, ev.hidden);
  const std::span<const float> all_w =
      opt_.gate_weights ? std::span<const float>(ev.weights, static_cast<size_t>(n) * k) : std::span<const float>{};
  // A pass may straddle the end of the prompt (a caller batching freely):
  // record the prompt part and the decode part separately.
  int t = 0;
  while (t < n) {
    const bool prompt = pos0_ + static_cast<uint32_t>(t) < n_prompt_;
    int t_end = t;
    while (t_end < n && (pos0_ + static_cast<uint32_t>(t_end) < n_prompt_) == prompt) ++t_end;
    const size_t cnt = static_cast<size_t>(t_end - t);
    positions_.resize(cnt);
    for (size_t i = 0; i < cnt; ++i) positions_[i] = pos0_ + static_cast<uint32_t>(t) + static_cast<uint32_t>(i);
    const size_t off = static_cast<size_t>(t) * k;
    writer_->record_batch(static_cast<uint32_t>(layer), prompt ? Phase::Prompt : Phase::Decode, positions_, {},
                          std::span<const uint16_t>(ids16_).subspan(off, cnt * k),
                          all_w.empty() ? all_w : all_w.subspan(off, cnt * k),
                          opt_.predictions ? std::span<const uint16_t>(pred_).subspan(static_cast<size_t>(t) * header_.k_pred,
                                                                                        cnt * header_.k_pred)
                                           : std::span<const uint16_t>{});
    t = t_end;
  }
}

}  // namespace ms
