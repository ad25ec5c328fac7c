// The device KV cache: per attention layer a K and a V buffer,
// [n_head_kv][ctx][head_dim] of f16 (bits in uint16_t) or f32 (exact, twice
// the bytes), in one arena. Holds one sequence at a time; the host-side
// KvCache only counts its positions.
//
// CUDA-only header; used by CudaBackend.
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/device.h"

namespace ms::cuda {

class DeviceKvCache {
 public:
  DeviceKvCache() = default;
  // Allocates and zeroes n_layer layers' K and V for ctx positions.
  DeviceKvCache(int n_layer, int n_head_kv, int head_dim, int64_t ctx, bool f32);

  // The same geometry in the other element type (contents lost). Addresses
  // change: whatever holds them (a captured graph) must be dropped first.
  void reallocate(bool f32);

  int64_t ctx() const { return ctx_; }
  bool f32() const { return f32_; }
  uint64_t bytes() const { return arena_.capacity(); }

  // Calls f(k_cache, v_cache) with layer il's cache pointers as their element
  // type (uint16_t: f16 bits, or float); every cache launcher has both overloads.
  template <class F>
  void with_layer(int il, F&& f) const {
    void* k = k_[static_cast<size_t>(il)];
    void* v = v_[static_cast<size_t>(il)];
    if (f32_)
      f(static_cast<float*>(k), static_cast<float*>(v));
    else
      f(static_cast<uint16_t*>(k), static_cast<uint16_t*>(v));
  }

 private:
  void allocate();

  int n_layer_ = 0, n_head_kv_ = 0, head_dim_ = 0;
  int64_t ctx_ = 0;
  bool f32_ = false;
  DeviceArena arena_;
  std::vector<void*> k_, v_;  // per layer
};

}  // namespace ms::cuda
