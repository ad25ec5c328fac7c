// CudaBackend's MTP drafting support (cuda_backend.h): the hidden hook's
// host rows, the CPU backend that runs the MTP block's layer for it, and the
// head norm's weights on the device (the output head runs there).
// CUDA-only header; include it only from src/cuda/backend.
#pragma once
#include <memory>
#include <vector>

#include "cpu/thread_pool.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda/device.h"
#include "engine/backend.h"
#include "engine/cpu_backend.h"

namespace ms {

struct CudaBackend::MtpOnHost {
  HiddenHook hook;
  std::vector<float> rows;  // the last pass's hidden rows, normed on the host
  // forward_seqs: every row of a multi-sequence pass, copied back before
  // the head gathers the logit rows over them (Impl::run_seqs).
  std::vector<float> pass_rows;
  // The hook's event for n residual-stream rows on the host (raw: before
  // the output norm, which is applied here as the head applies it).
  void emit(const KvCache& kv, int64_t pos0, int n, const float* raw, const float* norm, int64_t D, float eps);
  std::unique_ptr<ThreadPool> own_pool;  // when Options::cpu_pool is null
  std::unique_ptr<CpuBackend> cpu;       // made at the first MTP forward or cache
  std::vector<float> last_row;           // the block's output before the head norm
  cuda::DeviceBuffer head_norm;          // the block's head norm weights, for the device head
};

}  // namespace ms
