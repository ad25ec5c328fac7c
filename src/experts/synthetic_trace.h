// Synthetic routing traces, for tests and for designing policies before real
// traces exist. Each MoE layer has its own popularity: Zipf with exponent
// `skew` (0 = uniform router) over a random permutation of the experts; each
// token picks k distinct experts by weighted sampling without replacement.
// Temporal locality, two models (`locality_model`):
//   repeat: with probability `locality`, each of a token's choices repeats
//     one of the previous token's choices at that layer (the fraction
//     measured is that plus chance; the last 8 tokens add little more).
//   window: the model `gen --router-locality` builds into real weights
//     (experts/locality_model.h): logits are a Zipf bias (-skew * ln(rank+1),
//     as gen's --router-skew), a share of a moving average over the last tens
//     of tokens (shared by all layers, each projecting it its own way) and a
//     fresh part; `locality` is the fraction of a decode token's experts the
//     previous token chose, and the last 8 tokens hold most of the rest, as
//     real routers do (docs/traces.md).
#pragma once
#include <cstdint>
#include <string>

#include "experts/trace.h"

namespace ms {

struct SyntheticTraceOptions {
  std::string model = "synthetic";
  uint32_t n_layer = 48;
  uint32_t n_expert = 128;
  uint32_t k = 8;
  uint32_t sequences = 1;        // independent sequences, one after the other
  uint32_t tokens = 2000;        // per sequence, prompt included
  uint32_t prompt_tokens = 128;  // per sequence, the first ones
  uint32_t prompt_batch = 128;   // prompt tokens per forward pass
  double skew = 1.0;             // Zipf exponent of expert popularity
  double locality = 0.0;         // 0..1
  std::string locality_model = "repeat";  // repeat | window (see above)
  double drift = 0.0;            // per token: chance a layer's two popularity ranks swap (non-stationary)
  double predict_accuracy = -1;  // < 0: no predictions; else chance each predicted id is right
  uint64_t expert_bytes = 0;     // bytes of one expert (0: a Qwen3-30B-A3B q4_K-like 1.7 MB)
  uint32_t dense_first_layers = 0;  // leading layers without routed experts
  uint64_t seed = 1;
};

// Deterministic for a given options struct (own PRNG, no global state).
Trace make_synthetic_trace(const SyntheticTraceOptions& opts);

}  // namespace ms
