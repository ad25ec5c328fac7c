// Diagnostics for tiered experts (HybridMoeOptions::link_timeline): when the
// copy stream carried what during a prompt pass. An event follows each group
// of copies; after the pass, each group's bytes at the measured link rate
// give the link's busy time, and the rest of the time between two groups is
// idle: before a layer's demand copies (the link waited for that layer's
// routes) or elsewhere (waiting for a slot's reader, or nothing queued).
// One stderr line per pass. CUDA-only header; mechanism, decides nothing.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/device.h"

namespace ms {

class LinkTimeline {
 public:
  // level 0: off; 1: one line per pass; 2: also one line per planned layer.
  explicit LinkTimeline(int level) : level_(level) {}
  bool on() const { return level_ > 0; }
  // Start of a pass (an event on the copy stream).
  void begin(cudaStream_t copy);
  // After a group of copies of `bytes` for `layer`: demand copies (after its
  // routes) or a stage (before them).
  void mark(cudaStream_t copy, uint64_t bytes, int layer, bool demand);
  // On the compute stream, for the per-layer lines: layer's routes are
  // ready (what 0), its waves are done (1), its combine is done (2).
  void mark_compute(cudaStream_t compute, int layer, int what);
  // After the pass has synchronised (the copy stream included): the line,
  // then at level 2 one line per planned layer.
  void report(int n_tokens, double pass_s, double link_gbps);

 private:
  struct Mark {
    uint64_t bytes = 0;
    int layer = -1;
    bool demand = false;
  };
  int level_ = 0;
  bool active_ = false;
  cuda::Event start_{true};
  std::vector<std::unique_ptr<cuda::Event>> events_;
  std::vector<Mark> marks_;
  struct ComputeMark {
    int layer = -1, what = 0;
  };
  std::vector<std::unique_ptr<cuda::Event>> compute_events_;
  std::vector<ComputeMark> compute_marks_;
};

}  // namespace ms
