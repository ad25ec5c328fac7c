#include "cuda/backend/device_state_store.h"

#include <cstring>
#include <string>

#include "util/error.h"

namespace ms::cuda {

PinnedBuffer& DeviceStateStore::entry(int e) {
  if (e < 0) throw Error("device state store: a negative checkpoint entry");
  if (static_cast<size_t>(e) >= entries_.size()) entries_.resize(static_cast<size_t>(e) + 1);
  PinnedBuffer& b = entries_[static_cast<size_t>(e)];
  if (b.size() != kv_.recurrent_slot_stride()) b = PinnedBuffer(kv_.recurrent_slot_stride());
  return b;
}

void DeviceStateStore::save(int e) {
  PinnedBuffer& b = entry(e);
  MS_CUDA_CHECK(cudaMemcpyAsync(b.get(), kv_.recurrent_slot(slot_), b.size(), cudaMemcpyDeviceToHost, stream_));
}

void DeviceStateStore::restore(int e) {
  if (e < 0 || static_cast<size_t>(e) >= entries_.size() || entries_[static_cast<size_t>(e)].size() == 0)
    throw Error("device state store: checkpoint " + std::to_string(e) + " was never written");
  const PinnedBuffer& b = entries_[static_cast<size_t>(e)];
  MS_CUDA_CHECK(cudaMemcpyAsync(kv_.recurrent_slot(slot_), b.get(), b.size(), cudaMemcpyHostToDevice, stream_));
}

void DeviceStateStore::copy_entries_from(const StateStore& other) {
  const auto* o = dynamic_cast<const DeviceStateStore*>(&other);
  if (o == nullptr) throw Error("device state store: a fork across backends");
  // The source's copies may still be in flight on the stream.
  MS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t e = 0; e < o->entries_.size(); ++e) {
    if (o->entries_[e].size() == 0) continue;
    PinnedBuffer& b = entry(static_cast<int>(e));
    std::memcpy(b.get(), o->entries_[e].get(), b.size());
  }
}

}  // namespace ms::cuda
