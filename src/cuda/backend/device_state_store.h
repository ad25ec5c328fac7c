// Checkpoints of one sequence's recurrent state when that state lives on the
// device (KvCache's StateStore): each entry is a pinned host copy of the
// slot's recurrent region (every Gated DeltaNet layer's conv window and
// delta-rule state, one contiguous copy), written and read on the backend's
// stream so that it is ordered with the forward passes around it. Host
// memory, not VRAM: the expert cache keeps the device's bytes, and a
// checkpoint is taken at most once per prompt chunk or `spacing` decode
// steps, where the copy (PCIe) is small beside the pass.
//
// CUDA-only header; used by CudaBackend.
#pragma once
#include <cuda_runtime_api.h>

#include <vector>

#include "cuda/backend/device_kv_cache.h"
#include "cuda/device.h"
#include "engine/kv_cache.h"

namespace ms::cuda {

class DeviceStateStore final : public StateStore {
 public:
  // Entries are allocated when first written (pinned memory is slow to take).
  DeviceStateStore(const DeviceKvCache& kv, int slot, cudaStream_t stream) : kv_(kv), slot_(slot), stream_(stream) {}
  void save(int entry) override;
  void restore(int entry) override;
  void copy_entries_from(const StateStore& other) override;

 private:
  PinnedBuffer& entry(int e);
  const DeviceKvCache& kv_;
  int slot_;
  cudaStream_t stream_;
  std::vector<PinnedBuffer> entries_;
};

}  // namespace ms::cuda
