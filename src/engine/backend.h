// What every forward pass (CPU, CUDA) offers the generation loop, the CLI and
// the benchmark: run tokens against a sequence's cache and return logits.
//
// Semantics shared by all backends: forward() runs `tokens` at positions
// kv.n_past() .. and appends them to the cache; logits receives n_vocab
// floats for the last token, or for every token ([n_tokens][n_vocab]) with
// all_logits. It throws ms::Error "context full (N tokens)" before computing
// anything if they do not fit, and for a token id outside the vocabulary.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "experts/telemetry.h"
#include "model/weights.h"

namespace ms {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual void forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits,
                       bool all_logits = false) = 0;
  // A cache for one sequence of up to ctx tokens. (Where the keys and values
  // live is the backend's business: the CUDA backend keeps them on the device
  // and the KvCache only counts positions.) KvType::F32 keeps K/V unrounded
  // for parity checks; a backend that cannot hold them throws ms::Error.
  // Overrides repeat the default (defaults bind to the static type).
  virtual KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const = 0;
  virtual const ModelConfig& config() const = 0;
  // "cpu", "cuda"
  virtual std::string name() const = 0;
  // Where routed experts were computed so far (hybrid false: all in one place).
  virtual ExpertTelemetry expert_telemetry() const { return {}; }
};

}  // namespace ms
