// The decode step as a CUDA graph: captured once from the step's launches
// (which read token, position and attention length from device memory, so
// one graph serves every step), replayed per token, re-captured only when the
// attention launch must cover more positions (every kGraphKvStep).
//
// CUDA-only header; used by CudaBackend.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <functional>

namespace ms::cuda {

// The attention launch of a decode graph covers this many positions more at
// a time; the graph is re-captured when the sequence outgrows it.
constexpr int kGraphKvStep = 256;

// The attention length a decode step at position p is launched (and
// captured) for: p rounded up past the next kGraphKvStep, at most ctx.
inline int decode_kv_span(int64_t p, int64_t ctx) {
  return static_cast<int>(std::min<int64_t>(ctx, (p + kGraphKvStep) / kGraphKvStep * kGraphKvStep));
}

class DecodeGraph {
 public:
  DecodeGraph() = default;
  ~DecodeGraph();
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;

  // A graph captured for this attention length is ready to launch.
  bool ready(int max_kv_len) const { return exec_ != nullptr && kv_len_ == max_kv_len; }
  // Drops the graph there is (if any) and captures enqueue() on `stream` as
  // the one for max_kv_len. Throws ms::Error when a launch cannot be captured
  // (the capture is ended and nothing is kept).
  void capture(cudaStream_t stream, int max_kv_len, const std::function<void()>& enqueue);
  void launch(cudaStream_t stream);
  // Drops the graph: it holds device addresses that are about to change.
  void reset();
  int captures() const { return captures_; }  // how often a graph was captured

 private:
  cudaGraphExec_t exec_ = nullptr;
  int kv_len_ = 0;  // the max_kv_len the graph was captured with
  int captures_ = 0;
};

}  // namespace ms::cuda
