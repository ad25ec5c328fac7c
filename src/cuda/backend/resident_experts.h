// Routed experts when every one of them is resident: each layer's gate, up
// and down matrices of all experts back to back in one device arena, so a
// layer's experts are addressed as base + e * stride (cuda::MatrixSet). The
// tiered counterpart is cuda::DeviceExpertSlots (expert_slots.h), which
// addresses them through a per-layer table of slot pointers; both hand the
// expert kernels a cuda::ExpertWeights per layer.
//
// CUDA-only header; used by CudaBackend.
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/device.h"
#include "cuda/expert_ffn.h"
#include "model/weights.h"

namespace ms::cuda {

class ResidentExperts {
 public:
  ResidentExperts() = default;  // no experts (a dense model, or experts tiered)
  // Uploads every layer's experts; throws ms::Error (from the arena) when the
  // device has not enough memory.
  explicit ResidentExperts(const ModelWeights& w);

  // Layer il's experts (a layer without experts: n_expert 0).
  const ExpertWeights& weights(int il) const { return layers_[static_cast<size_t>(il)]; }
  uint64_t bytes() const { return arena_.capacity(); }

 private:
  DeviceArena arena_;
  std::vector<ExpertWeights> layers_;
};

}  // namespace ms::cuda
