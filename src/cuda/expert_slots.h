// Device memory for routed experts that are not all resident: one arena per
// slot pool (cache slots, then transit slots, each holding one expert's gate,
// up and down matrices back to back), and per layer a device table of expert
// -> slot address that the expert kernels read through (MatrixSet::table), so
// the same kernels serve resident and streamed experts. Decides nothing: the
// slot numbers come from experts/residency.h. A layer's expert biases
// (gpt-oss) are not in the slots: small f32 arrays indexed by expert id, kept
// resident with the dense weights for every expert (cuda/backend/
// device_weights.h), which the table's ExpertWeights point at.
//
// CUDA-only header.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cuda/device.h"
#include "cuda/expert_bias.h"
#include "cuda/expert_ffn.h"

namespace ms::cuda {

// Where the three matrices sit inside a slot (256-byte aligned offsets).
struct SlotGeometry {
  uint64_t gate_bytes = 0, up_bytes = 0, down_bytes = 0;
  uint64_t up_offset = 0, down_offset = 0, slot_bytes = 0;
  static SlotGeometry of(uint64_t gate, uint64_t up, uint64_t down);
};

class DeviceExpertSlots {
 public:
  struct PoolSpec {
    uint64_t slot_bytes = 0;
    uint32_t slots = 0;  // cache slots plus transit slots
  };
  struct LayerSpec {
    int32_t pool = -1;  // -1: a dense layer
    DType gate_type = DType::F32, up_type = DType::F32, down_type = DType::F32;
    int64_t n_embd = 0, n_ff = 0;
    SlotGeometry geometry;
    ExpertBias bias;  // device biases (resident, by expert id) and the activation
  };

  DeviceExpertSlots() = default;
  DeviceExpertSlots(const std::vector<PoolSpec>& pools, const std::vector<LayerSpec>& layers, int n_expert);

  // Device bytes all pools and tables take (for the budget).
  static uint64_t bytes_needed(const std::vector<PoolSpec>& pools, size_t n_layers, int n_expert);

  void* slot_address(int32_t pool, int32_t slot) const;
  // Points table entry (layer, expert) at a slot in the host mirror; upload()
  // makes the device table match on `stream` (nothing to do, and no driver
  // call, when no entry of the layer changed since its last upload).
  void point(int layer, int expert, int32_t pool, int32_t slot);
  void upload(int layer, cudaStream_t stream);
  // gate/up/down through the layer's table (what cuda::expert kernels take).
  const ExpertWeights& weights(int layer) const { return weights_[static_cast<size_t>(layer)]; }
  const LayerSpec& layer(int layer) const { return layers_[static_cast<size_t>(layer)]; }
  uint64_t capacity() const;

 private:
  std::vector<PoolSpec> pools_;
  std::vector<LayerSpec> layers_;
  int n_expert_ = 0;
  std::vector<DeviceArena> arenas_;   // one per pool
  std::vector<char*> pool_base_;
  DeviceArena table_arena_;
  PinnedBuffer table_host_;           // [layer][expert] pointers
  std::vector<void**> table_dev_;     // per layer
  std::vector<uint8_t> dirty_;        // per layer: the mirror changed since the last upload
  std::vector<ExpertWeights> weights_;
};

}  // namespace ms::cuda
