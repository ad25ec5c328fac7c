// DecodeGraph: capture and replay of CudaBackend's decode step.
#include "cuda/backend/decode_graph.h"

#include "cuda/device.h"
#include "util/error.h"

namespace ms::cuda {

DecodeGraph::~DecodeGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

void DecodeGraph::reset() {
  if (exec_) {
    MS_CUDA_CHECK(cudaGraphExecDestroy(exec_));
    exec_ = nullptr;
  }
}

void DecodeGraph::capture(cudaStream_t stream, int max_kv_len, const std::function<void()>& enqueue) {
  reset();
  cudaGraph_t g = nullptr;
  MS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  MS_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  const cudaError_t err = cudaGraphInstantiate(&exec_, g, 0);
  cudaGraphDestroy(g);
  MS_CUDA_CHECK(err);
  kv_len_ = max_kv_len;
  ++captures_;
}

void DecodeGraph::launch(cudaStream_t stream) { MS_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

}  // namespace ms::cuda
