// What a routing trace says about caching: per-layer expert popularity and its
// skew, reuse distance, how often the next token at a layer picks the same
// experts again (the previous token, the last 8, an LRU cache of 40% of the
// experts: the figures published for real routers, so a recorded and a
// synthetic trace compare side by side), and how well router L+1 applied to
// layer L's hidden state predicts layer L+1's choice (when the trace has
// predictions).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "experts/trace.h"

namespace ms {

struct LayerTraceStats {
  uint32_t layer = 0;
  uint64_t tokens = 0;            // records at this layer
  uint32_t experts_used = 0;      // distinct experts chosen at least once
  double top10_share = 0;         // share of choices going to the 10% most chosen experts
  double norm_entropy = 0;        // entropy of the choice distribution / log(n_expert): 1 = uniform
  uint32_t experts_for_50 = 0;    // fewest experts covering half of the choices
  uint32_t experts_for_90 = 0;
  double reuse_mean = 0;          // forward passes between consecutive uses of an expert at this layer
  double reuse_median = 0;
  double reuse_p90 = 0;
  double repeat_prob = -1;        // P(an expert of token t is chosen again by token t+1), decode, same sequence
  // Locality as published measurements of real routers state it (decode
  // tokens, each with its k experts; -1 when the trace has no such tokens):
  double repeat_within_8 = -1;    // share of a token's experts that one of the 8 tokens before it chose
  double lru40_hit_rate = -1;     // hits of an LRU cache of 40% of the layer's experts (at least k), per token
  double experts_for_90_share = 0;  // experts_for_90 / n_expert
  double repeat_prob_independent = -1;  // the same if tokens chose independently from the popularity
  double prediction_recall = -1;  // share of layer L+1's experts that the prediction at L named
};

struct TraceStats {
  std::string model;
  uint32_t n_layer = 0, n_expert = 0, k = 0;
  uint64_t records = 0, steps = 0, prompt_tokens = 0, decode_tokens = 0;
  std::vector<LayerTraceStats> layers;  // MoE layers
  LayerTraceStats overall;              // averages over layers (layer = n_layer)
  uint32_t lru40_slots = 0;             // the LRU cache's size per layer
};

TraceStats compute_trace_stats(const Trace& trace);
nlohmann::json trace_stats_json(const TraceStats& s);
std::string trace_stats_text(const TraceStats& s);  // a human table

}  // namespace ms
