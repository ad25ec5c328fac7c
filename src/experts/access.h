// The replay unit of a trace: a "layer step" is one MoE layer of one forward
// pass (one decode token, or a prompt batch), needing a set of distinct experts
// at once (the working set). Policies, Belady's MIN, the planner and the
// simulator all consume this form, not raw per-token records.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "experts/trace.h"

namespace ms {

// An expert of the whole model: layer * n_expert + expert.
using ExpertKey = uint32_t;

struct LayerStep {
  uint32_t step = 0;        // ordinal of the forward pass (0, 1, 2, ...): the policies' clock
  uint32_t layer = 0;
  Phase phase = Phase::Decode;
  uint32_t tokens = 0;      // tokens of this forward pass at this layer
  uint32_t first = 0;       // into AccessSequence::keys / uses
  uint32_t count = 0;       // distinct experts needed
  uint32_t pred_first = 0;  // into pred_keys / pred_conf
  uint32_t pred_count = 0;  // predicted experts of the next MoE layer (0 when the trace has none)
};

struct AccessSequence {
  uint32_t n_layer = 0, n_expert = 0;
  uint32_t n_steps = 0;             // forward passes
  std::vector<LayerStep> steps;     // in replay order: forward pass, then layer in model order
  std::vector<ExpertKey> keys;      // per layer step, sorted ascending
  std::vector<uint32_t> uses;       // tokens that chose keys[i]
  std::vector<ExpertKey> pred_keys; // keys of the next MoE layer predicted from this layer's state
  std::vector<float> pred_conf;     // fraction of the step's tokens whose prediction named it

  std::span<const ExpertKey> keys_of(const LayerStep& s) const { return {keys.data() + s.first, s.count}; }
  std::span<const uint32_t> uses_of(const LayerStep& s) const { return {uses.data() + s.first, s.count}; }
  std::span<const ExpertKey> predictions_of(const LayerStep& s) const { return {pred_keys.data() + s.pred_first, s.pred_count}; }
  std::span<const float> confidences_of(const LayerStep& s) const { return {pred_conf.data() + s.pred_first, s.pred_count}; }
  uint64_t total_accesses() const { return keys.size(); }
};

// Groups a trace's records by forward pass (the records' step field) and
// layer. Accesses are counted per distinct expert per layer step: a prompt
// batch where 30 tokens chose one expert loads it once.
AccessSequence build_access_sequence(const Trace& trace);

inline uint32_t key_layer(ExpertKey key, uint32_t n_expert) { return key / n_expert; }
inline uint32_t key_expert(ExpertKey key, uint32_t n_expert) { return key % n_expert; }

}  // namespace ms
