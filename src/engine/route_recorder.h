// Records the router's choices of a Backend (CPU or CUDA) into a routing
// trace (`moestream run --record-routes FILE`, format in docs/traces.md):
//
//   RouteRecorder rec(path, weights, n_prompt);   // writes the header
//   rec.attach(backend);                          // installs the route hook
//   generate(...);                                // every MoE layer is recorded
//   rec.finish(&backend);                         // detaches, closes the file
//
// Forward passes are found from the hook calls themselves: a call for a layer
// at or below the previous one starts a new pass (a prompt batch or one
// decode token), so the engine needs no extra hook. Positions count up from 0;
// tokens before `n_prompt` are marked Prompt, the rest Decode.
//
// With `predictions`, every record also holds the top-k_pred experts of router
// L+1 applied to layer L's FFN input (the "can layer L predict layer L+1"
// statistic of `trace stats`); the hook is then installed asking for that
// input (RouteEvent::hidden). Routers are dequantized once; the cost is one
// small matmul per layer and token, and k_pred ids per record.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "experts/trace.h"
#include "model/weights.h"

namespace ms {

class RouteRecorder {
 public:
  struct Options {
    bool gate_weights = true;   // store the k gate weights (f16)
    bool predictions = false;   // store router L+1's top-k on layer L's state
    std::string model_name;     // header's model field (free text)
  };
  // Opens `path` and writes the header for `w`. Throws ms::Error for a dense
  // model (nothing to record) or an unwritable file.
  RouteRecorder(const std::string& path, const ModelWeights& w, uint32_t n_prompt, Options opt);
  RouteRecorder(const std::string& path, const ModelWeights& w, uint32_t n_prompt)
      : RouteRecorder(path, w, n_prompt, Options{}) {}

  // The header this recorder writes (also what the tests compare against).
  static TraceHeader header_for(const ModelWeights& w, const Options& opt);

  // Installs the route hook on `be` (replacing any other).
  void attach(Backend& be);
  // The hook body: one MoE layer of one forward pass. Throws ms::Error for an
  // event that does not fit the header or lacks what the trace holds (gate
  // weights; the FFN input when predicting).
  void record(const RouteEvent& ev);
  // Removes the hook from `be` (if given) and closes the file; throws
  // ms::Error if the data could not be written.
  void finish(Backend* be = nullptr);

  uint64_t records_written() const { return writer_->records_written(); }
  uint32_t steps() const { return writer_->step(); }

 private:
  void predict(int layer, int n_tokens, const float* hidden);

  const ModelWeights& w_;
  Options opt_;
  TraceHeader header_;
  std::unique_ptr<TraceWriter> writer_;
  uint32_t n_prompt_ = 0;
  int last_layer_ = 1 << 30;   // forces a new step at the first call
  uint32_t pos0_ = 0;          // position of the current pass's first token
  uint32_t next_pos_ = 0;      // position of the next pass's first token
  std::vector<std::vector<float>> router_f32_;  // [layer] n_expert x n_embd (predictions only)
  std::vector<uint32_t> positions_;
  std::vector<uint16_t> ids16_, pred_;
  std::vector<float> logits_;
};

}  // namespace ms
