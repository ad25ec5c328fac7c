#include "cuda/expert_slots.h"

#include <string>

#include "util/error.h"

namespace ms::cuda {
namespace {
constexpr uint64_t kAlign = 256;
uint64_t align_up(uint64_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }
}  // namespace

SlotGeometry SlotGeometry::of(uint64_t gate, uint64_t up, uint64_t down) {
  SlotGeometry g;
  g.gate_bytes = gate;
  g.up_bytes = up;
  g.down_bytes = down;
  g.up_offset = align_up(gate);
  g.down_offset = g.up_offset + align_up(up);
  g.slot_bytes = g.down_offset + align_up(down);
  return g;
}

uint64_t DeviceExpertSlots::bytes_needed(const std::vector<PoolSpec>& pools, size_t n_layers, int n_expert) {
  uint64_t n = align_up(n_layers * static_cast<uint64_t>(n_expert) * sizeof(void*));
  for (const PoolSpec& p : pools) n += align_up(p.slot_bytes * p.slots);
  return n;
}

DeviceExpertSlots::DeviceExpertSlots(const std::vector<PoolSpec>& pools, const std::vector<LayerSpec>& layers,
                                     int n_expert)
    : pools_(pools), layers_(layers), n_expert_(n_expert) {
  for (size_t p = 0; p < pools.size(); ++p) {
    arenas_.emplace_back("expert slots (pool " + std::to_string(p) + ")",
                         static_cast<size_t>(std::max<uint64_t>(kAlign, pools[p].slot_bytes * pools[p].slots)));
    pool_base_.push_back(static_cast<char*>(arenas_.back().alloc(pools[p].slot_bytes * pools[p].slots, kAlign)));
  }
  const size_t entries = layers.size() * static_cast<size_t>(n_expert);
  table_arena_ = DeviceArena("expert tables", std::max<size_t>(kAlign, entries * sizeof(void*)));
  auto* dev = static_cast<void**>(table_arena_.alloc(entries * sizeof(void*), kAlign));
  table_host_ = PinnedBuffer(entries * sizeof(void*));
  weights_.resize(layers.size());
  dirty_.assign(layers.size(), 0);
  for (size_t l = 0; l < layers.size(); ++l) {
    table_dev_.push_back(dev + l * static_cast<size_t>(n_expert));
    const LayerSpec& L = layers[l];
    if (L.pool < 0) continue;
    // Every entry starts at the pool's first slot: any expert id reads real,
    // finite weights even before it is placed (the kernels clamp ids, never
    // follow a null pointer).
    for (int e = 0; e < n_expert; ++e) point(static_cast<int>(l), e, L.pool, 0);
    ExpertWeights& w = weights_[l];
    w.n_expert = n_expert;
    w.gate = {L.gate_type, L.n_ff, L.n_embd, table_dev_[l], 0, nullptr, 0};
    w.up = {L.up_type, L.n_ff, L.n_embd, table_dev_[l], static_cast<int64_t>(L.geometry.up_offset), nullptr, 0};
    w.down = {L.down_type, L.n_embd, L.n_ff, table_dev_[l], static_cast<int64_t>(L.geometry.down_offset), nullptr, 0};
    L.bias.apply_to(w);
  }
  MS_CUDA_CHECK(cudaMemcpy(dev, table_host_.get(), entries * sizeof(void*), cudaMemcpyHostToDevice));
  dirty_.assign(layers.size(), 0);  // the device tables equal the mirror
}

void* DeviceExpertSlots::slot_address(int32_t pool, int32_t slot) const {
  const PoolSpec& p = pools_.at(static_cast<size_t>(pool));
  if (slot < 0 || static_cast<uint32_t>(slot) >= p.slots)
    throw Error("expert slots: slot " + std::to_string(slot) + " outside pool " + std::to_string(pool));
  return pool_base_[static_cast<size_t>(pool)] + p.slot_bytes * static_cast<uint64_t>(slot);
}

void DeviceExpertSlots::point(int layer, int expert, int32_t pool, int32_t slot) {
  void*& entry = table_host_.as<void*>()[static_cast<size_t>(layer) * n_expert_ + expert];
  void* const addr = slot_address(pool, slot);
  if (entry != addr) dirty_.at(static_cast<size_t>(layer)) = 1;
  entry = addr;
}

void DeviceExpertSlots::upload(int layer, cudaStream_t stream) {
  if (!dirty_.at(static_cast<size_t>(layer))) return;
  dirty_[static_cast<size_t>(layer)] = 0;
  const size_t first = static_cast<size_t>(layer) * n_expert_;
  MS_CUDA_CHECK(cudaMemcpyAsync(table_dev_[static_cast<size_t>(layer)], table_host_.as<void*>() + first,
                                sizeof(void*) * n_expert_, cudaMemcpyHostToDevice, stream));
}

uint64_t DeviceExpertSlots::capacity() const {
  uint64_t n = table_arena_.capacity();
  for (const DeviceArena& a : arenas_) n += a.capacity();
  return n;
}

}  // namespace ms::cuda
