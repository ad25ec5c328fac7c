// Sampler settings shared by the speculative-decoding tests: greedy, and a
// sampling chain with every stage that changes a distribution (top-k, top-p,
// repetition penalty) and a fixed seed.
#pragma once
#include "engine/sampler.h"

namespace ms::spec_test {

inline SamplerParams greedy() {
  SamplerParams sp;
  sp.temperature = 0;
  return sp;
}

inline SamplerParams sampled() {
  SamplerParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 40;
  sp.top_p = 0.95f;
  sp.min_p = 0.0f;
  sp.repeat_penalty = 1.1f;
  sp.seed = 77;
  return sp;
}

}  // namespace ms::spec_test
