// The CUDA kernel benchmarks' timer (kernel_bench.cu, quant_types_bench.cu):
// per_graph back-to-back launches captured as one CUDA graph, so the numbers
// hold no CPU launch overhead; two untimed replays (module load, first-touch
// of the weights' pages), then `reps` timed replays between device events.
// Returns the median replay divided by per_graph, in microseconds per launch.
// `launch(i)` gets the launch's index in the graph, so callers can rotate over
// copies of their weights (keeping them out of the L2 cache).
//
// These benches link the engine's kernel library, so they use its
// MS_CUDA_CHECK and Event (cuda/device.h); bench_check.cuh's CK is for the
// stand-alone benches built with a bare nvcc.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "cuda/device.h"

namespace ms::cuda {

inline double graph_median_us(cudaStream_t s, int per_graph, int reps, const std::function<void(int)>& launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per_graph; ++i) launch(i);
  MS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  MS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  Event a, b;
  for (int w = 0; w < 2; ++w) MS_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    a.record(s);
    MS_CUDA_CHECK(cudaGraphLaunch(exec, s));
    b.record(s);
    b.synchronize();
    t.push_back(b.ms_since(a) * 1000.0 / per_graph);
  }
  MS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MS_CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace ms::cuda
