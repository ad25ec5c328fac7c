#include "experts/trace_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <list>
#include <map>
#include <nlohmann/json.hpp>

#include "experts/access.h"

namespace ms {
namespace {

double percentile(std::vector<uint32_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, size_t(q * double(v.size())));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

}  // namespace

TraceStats compute_trace_stats(const Trace& trace) {
  const TraceHeader& h = trace.header;
  TraceStats s;
  s.model = h.model;
  s.n_layer = h.n_layer;
  s.n_expert = h.n_expert;
  s.k = h.k;
  s.records = trace.records.size();
  const AccessSequence seq = build_access_sequence(trace);
  s.steps = seq.n_steps;

  const size_t L = h.n_layer, E = h.n_expert;
  std::vector<uint64_t> count(L * E, 0), tokens(L, 0);
  // Previous decode token's choice per (sequence, layer), for repeat probability.
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint32_t, uint32_t>> prev;  // -> (pos, record index)
  std::vector<uint64_t> repeat_hits(L, 0), repeat_pairs(L, 0);
  // Prediction recall: prediction stored at layer L for (seq, pos), checked at the next MoE layer.
  std::vector<int64_t> next_moe(L, -1);
  for (int64_t l = int64_t(L) - 2; l >= 0; --l) next_moe[l] = h.is_moe_layer(uint32_t(l + 1)) ? l + 1 : next_moe[l + 1];
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint32_t> pending_pred;  // (seq, pos, target layer) -> record
  std::vector<uint64_t> pred_hit(L, 0), pred_total(L, 0);
  // The last kWindow tokens per (sequence, layer): (pos, record index), newest last.
  constexpr uint32_t kWindow = 8;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<std::pair<uint32_t, uint32_t>>> recent;
  std::vector<uint64_t> window_hits(L, 0), window_total(L, 0);
  // One LRU cache per layer over every token in file order (prompt tokens
  // fill it too); decode tokens are counted.
  s.lru40_slots = uint32_t(std::max<uint64_t>(h.k, uint64_t(std::llround(0.4 * double(E)))));
  std::vector<std::list<uint16_t>> lru(L);
  std::vector<std::list<uint16_t>::iterator> lru_at(L * E);
  std::vector<uint8_t> lru_in(L * E, 0);
  std::vector<uint64_t> lru_hits(L, 0), lru_total(L, 0);

  for (uint32_t i = 0; i < trace.records.size(); ++i) {
    const TraceRecord& r = trace.records[i];
    const auto ids = trace.ids_of(r);
    ++tokens[r.layer];
    for (uint16_t e : ids) ++count[r.layer * E + e];
    if (r.phase == Phase::Prompt) ++s.prompt_tokens;  // counted per layer; normalised below
    else ++s.decode_tokens;
    if (r.phase == Phase::Decode) {
      auto it = prev.find({r.seq, r.layer});
      if (it != prev.end() && it->second.first + 1 == r.pos) {
        const auto before = trace.ids_of(trace.records[it->second.second]);
        for (uint16_t e : ids) repeat_hits[r.layer] += std::find(before.begin(), before.end(), e) != before.end();
        repeat_pairs[r.layer] += h.k;
      }
    }
    prev[{r.seq, r.layer}] = {r.pos, i};
    std::vector<std::pair<uint32_t, uint32_t>>& win = recent[{r.seq, r.layer}];
    // Counted only with all 8 positions before it present (a sequence's first tokens are not).
    if (r.phase == Phase::Decode && win.size() == kWindow && win.front().first + kWindow == r.pos &&
        win.back().first + 1 == r.pos) {
      for (uint16_t e : ids) {
        bool seen = false;
        for (const auto& [pos, idx] : win) {
          const auto before = trace.ids_of(trace.records[idx]);
          seen = seen || std::find(before.begin(), before.end(), e) != before.end();
        }
        window_hits[r.layer] += seen;
      }
      window_total[r.layer] += h.k;
    }
    if (!win.empty() && win.back().first + 1 != r.pos) win.clear();  // a gap or a new sequence at this id
    win.emplace_back(r.pos, i);
    if (win.size() > kWindow) win.erase(win.begin());
    std::list<uint16_t>& cache = lru[r.layer];
    for (uint16_t e : ids) {
      const size_t key = size_t(r.layer) * E + e;
      const bool hit = lru_in[key] != 0;
      if (r.phase == Phase::Decode) lru_hits[r.layer] += hit, ++lru_total[r.layer];
      if (hit) cache.erase(lru_at[key]);
      cache.push_front(e);
      lru_at[key] = cache.begin();
      lru_in[key] = 1;
      if (cache.size() > s.lru40_slots) {
        lru_in[size_t(r.layer) * E + cache.back()] = 0;
        cache.pop_back();
      }
    }
    if (h.has_predictions()) {
      auto it = pending_pred.find({r.seq, r.pos, r.layer});
      if (it != pending_pred.end()) {
        const auto pred = trace.predictions_of(trace.records[it->second]);
        const uint32_t from = trace.records[it->second].layer;
        for (uint16_t e : ids) pred_hit[from] += std::find(pred.begin(), pred.end(), e) != pred.end();
        pred_total[from] += h.k;
        pending_pred.erase(it);
      }
      if (next_moe[r.layer] >= 0) pending_pred[{r.seq, r.pos, uint32_t(next_moe[r.layer])}] = i;
    }
  }
  const uint32_t moe = std::max(1u, h.moe_layer_count());
  s.prompt_tokens /= moe;
  s.decode_tokens /= moe;

  // Reuse distance in forward passes, per layer.
  std::vector<std::vector<uint32_t>> reuse(L);
  std::vector<int64_t> last(L * E, -1);
  for (const LayerStep& st : seq.steps)
    for (ExpertKey k : seq.keys_of(st)) {
      if (last[k] >= 0) reuse[st.layer].push_back(uint32_t(st.step - last[k]));
      last[k] = st.step;
    }

  double n_layers = 0;
  LayerTraceStats& o = s.overall;
  o.layer = h.n_layer;
  o.repeat_prob = o.repeat_prob_independent = o.prediction_recall = 0;
  o.repeat_within_8 = o.lru40_hit_rate = 0;
  double n_repeat = 0, n_pred = 0, n_window = 0, n_lru = 0;  // layers that have these figures
  for (uint32_t l = 0; l < L; ++l) {
    if (!h.is_moe_layer(l)) continue;
    LayerTraceStats ls;
    ls.layer = l;
    ls.tokens = tokens[l];
    std::vector<uint64_t> c(count.begin() + l * E, count.begin() + (l + 1) * E);
    std::sort(c.rbegin(), c.rend());
    uint64_t total = 0;
    for (uint64_t x : c) total += x, ls.experts_used += x > 0;
    if (total > 0) {
      uint64_t acc = 0;
      const size_t top = std::max<size_t>(1, E / 10);
      for (size_t e = 0; e < E; ++e) {
        if (e < top) ls.top10_share += double(c[e]) / double(total);
        acc += c[e];
        if (!ls.experts_for_50 && acc * 2 >= total) ls.experts_for_50 = uint32_t(e + 1);
        if (!ls.experts_for_90 && acc * 10 >= total * 9) ls.experts_for_90 = uint32_t(e + 1);
        if (c[e]) {
          const double p = double(c[e]) / double(total);
          ls.norm_entropy -= p * std::log(p);
        }
      }
      if (E > 1) ls.norm_entropy /= std::log(double(E));
      // Independent tokens: expert e is in a token's set with probability q_e
      // = count/tokens, so a chosen expert repeats with probability sum q_e^2 / k.
      double q2 = 0;
      for (uint64_t x : c) q2 += std::pow(double(x) / double(tokens[l]), 2);
      ls.repeat_prob_independent = q2 / h.k;
    }
    std::vector<uint32_t>& r = reuse[l];
    if (!r.empty()) {
      double sum = 0;
      for (uint32_t d : r) sum += d;
      ls.reuse_mean = sum / double(r.size());
      ls.reuse_median = percentile(r, 0.5);
      ls.reuse_p90 = percentile(r, 0.9);
    }
    if (repeat_pairs[l]) {
      ls.repeat_prob = double(repeat_hits[l]) / double(repeat_pairs[l]);
      n_repeat += 1;
    }
    if (window_total[l]) {
      ls.repeat_within_8 = double(window_hits[l]) / double(window_total[l]);
      o.repeat_within_8 += ls.repeat_within_8;
      n_window += 1;
    }
    if (lru_total[l]) {
      ls.lru40_hit_rate = double(lru_hits[l]) / double(lru_total[l]);
      o.lru40_hit_rate += ls.lru40_hit_rate;
      n_lru += 1;
    }
    ls.experts_for_90_share = E > 0 ? double(ls.experts_for_90) / double(E) : 0;
    o.experts_for_90_share += ls.experts_for_90_share;
    if (pred_total[l]) {
      ls.prediction_recall = double(pred_hit[l]) / double(pred_total[l]);
      n_pred += 1;
    }
    s.layers.push_back(ls);
    n_layers += 1;
    o.tokens += ls.tokens;
    o.experts_used += ls.experts_used;
    o.top10_share += ls.top10_share;
    o.norm_entropy += ls.norm_entropy;
    o.experts_for_50 += ls.experts_for_50;
    o.experts_for_90 += ls.experts_for_90;
    o.reuse_mean += ls.reuse_mean;
    o.reuse_median += ls.reuse_median;
    o.reuse_p90 += ls.reuse_p90;
    o.repeat_prob += std::max(0.0, ls.repeat_prob);
    o.repeat_prob_independent += ls.repeat_prob_independent;
    o.prediction_recall += std::max(0.0, ls.prediction_recall);
  }
  if (n_layers > 0) {
    const double n = n_layers;
    o.experts_used = uint32_t(std::lround(o.experts_used / n));
    o.top10_share /= n;
    o.norm_entropy /= n;
    o.experts_for_50 = uint32_t(std::lround(o.experts_for_50 / n));
    o.experts_for_90 = uint32_t(std::lround(o.experts_for_90 / n));
    o.reuse_mean /= n;
    o.reuse_median /= n;
    o.reuse_p90 /= n;
    o.repeat_prob = n_repeat > 0 ? o.repeat_prob / n_repeat : -1;
    o.repeat_within_8 = n_window > 0 ? o.repeat_within_8 / n_window : -1;
    o.lru40_hit_rate = n_lru > 0 ? o.lru40_hit_rate / n_lru : -1;
    o.experts_for_90_share /= n;
    o.repeat_prob_independent /= n;
    o.prediction_recall = n_pred > 0 ? o.prediction_recall / n_pred : -1;
  }
  return s;
}

namespace {
nlohmann::json layer_json(const LayerTraceStats& l) {
  nlohmann::json j;
  j["layer"] = l.layer;
  j["tokens"] = l.tokens;
  j["experts_used"] = l.experts_used;
  j["top10_share"] = l.top10_share;
  j["norm_entropy"] = l.norm_entropy;
  j["experts_for_50pct"] = l.experts_for_50;
  j["experts_for_90pct"] = l.experts_for_90;
  j["reuse_distance_mean"] = l.reuse_mean;
  j["reuse_distance_median"] = l.reuse_median;
  j["reuse_distance_p90"] = l.reuse_p90;
  j["repeat_prob"] = l.repeat_prob >= 0 ? nlohmann::json(l.repeat_prob) : nlohmann::json(nullptr);
  j["repeat_prob_independent"] = l.repeat_prob_independent;
  j["prediction_recall"] = l.prediction_recall >= 0 ? nlohmann::json(l.prediction_recall) : nlohmann::json(nullptr);
  j["repeat_within_8"] = l.repeat_within_8 >= 0 ? nlohmann::json(l.repeat_within_8) : nlohmann::json(nullptr);
  j["lru40_hit_rate"] = l.lru40_hit_rate >= 0 ? nlohmann::json(l.lru40_hit_rate) : nlohmann::json(nullptr);
  j["experts_for_90pct_share"] = l.experts_for_90_share;
  return j;
}
}  // namespace

nlohmann::json trace_stats_json(const TraceStats& s) {
  nlohmann::json j;
  j["model"] = s.model;
  j["n_layer"] = s.n_layer;
  j["n_expert"] = s.n_expert;
  j["k"] = s.k;
  j["records"] = s.records;
  j["steps"] = s.steps;
  j["prompt_tokens"] = s.prompt_tokens;
  j["decode_tokens"] = s.decode_tokens;
  j["lru40_slots"] = s.lru40_slots;
  j["overall"] = layer_json(s.overall);
  j["overall"].erase("layer");
  j["layers"] = nlohmann::json::array();
  for (const auto& l : s.layers) j["layers"].push_back(layer_json(l));
  return j;
}

std::string trace_stats_text(const TraceStats& s) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "trace of %s: %u layers x %u experts, k=%u; %llu records, %llu forward passes, "
                "%llu prompt + %llu decode tokens\n\n",
                s.model.c_str(), s.n_layer, s.n_expert, s.k, (unsigned long long)s.records,
                (unsigned long long)s.steps, (unsigned long long)s.prompt_tokens, (unsigned long long)s.decode_tokens);
  out += buf;
  out += "layer  used  top10%  entropy  n50  n90  reuse mean/med/p90  repeat (indep)  last8  lru40  pred.recall\n";
  const auto row = [&](const LayerTraceStats& l, const char* name) {
    char rep[32] = "    -         ", pred[16] = "     -", win[16] = "    -", lru[16] = "    -";
    if (l.repeat_prob >= 0) std::snprintf(rep, sizeof rep, "%5.3f (%5.3f)", l.repeat_prob, l.repeat_prob_independent);
    if (l.repeat_within_8 >= 0) std::snprintf(win, sizeof win, "%5.3f", l.repeat_within_8);
    if (l.lru40_hit_rate >= 0) std::snprintf(lru, sizeof lru, "%5.3f", l.lru40_hit_rate);
    if (l.prediction_recall >= 0) std::snprintf(pred, sizeof pred, "%6.3f", l.prediction_recall);
    char lname[16];
    if (name) std::snprintf(lname, sizeof lname, "%s", name);
    else std::snprintf(lname, sizeof lname, "%u", l.layer);
    std::snprintf(buf, sizeof buf, "%5s  %4u  %5.1f%%  %7.3f  %3u  %3u  %6.1f/%5.0f/%5.0f  %s  %s  %s  %s\n", lname,
                  l.experts_used, 100 * l.top10_share, l.norm_entropy, l.experts_for_50, l.experts_for_90,
                  l.reuse_mean, l.reuse_median, l.reuse_p90, rep, win, lru, pred);
    out += buf;
  };
  for (const auto& l : s.layers) row(l, nullptr);
  row(s.overall, "all");
  // The published figures for real routers, in the same words.
  const LayerTraceStats& o = s.overall;
  const auto pct = [](double x) { return x >= 0 ? std::to_string(int(std::lround(100 * x))) + "%" : std::string("-"); };
  out += "\nlocality (decode, mean over layers): " + pct(o.repeat_prob) + " of a token's experts were chosen by the previous token, " +
         pct(o.repeat_within_8) + " within the last 8; an LRU cache of " + std::to_string(s.lru40_slots) +
         " experts per layer (40%) hits " + pct(o.lru40_hit_rate) + "; 90% of the choices go to " +
         pct(o.experts_for_90_share) + " of the experts\n";
  return out;
}

}  // namespace ms
