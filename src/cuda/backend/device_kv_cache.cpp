// DeviceKvCache: the K/V arena of CudaBackend.
#include "cuda/backend/device_kv_cache.h"

#include "cuda/backend/arena_layout.h"
#include "util/error.h"

namespace ms::cuda {

DeviceKvCache::DeviceKvCache(int n_layer, int n_head_kv, int head_dim, int64_t ctx, bool f32)
    : n_layer_(n_layer), n_head_kv_(n_head_kv), head_dim_(head_dim), ctx_(ctx), f32_(f32) {
  allocate();
}

void DeviceKvCache::reallocate(bool f32) {
  f32_ = f32;
  allocate();
}

void DeviceKvCache::allocate() {
  const size_t elem = f32_ ? sizeof(float) : sizeof(uint16_t);
  const size_t half_layer = static_cast<size_t>(n_head_kv_) * static_cast<size_t>(ctx_) * head_dim_ * elem;
  arena_ = DeviceArena();  // the old cache goes first: both may not fit at once
  arena_ = DeviceArena(f32_ ? "KV cache (f32)" : "KV cache (f16)", 2 * arena_align_up(half_layer) * n_layer_);
  k_.assign(static_cast<size_t>(n_layer_), nullptr);
  v_.assign(static_cast<size_t>(n_layer_), nullptr);
  for (int il = 0; il < n_layer_; ++il) {
    k_[static_cast<size_t>(il)] = arena_.alloc(half_layer);
    v_[static_cast<size_t>(il)] = arena_.alloc(half_layer);
  }
  MS_CUDA_CHECK(cudaMemset(arena_.base(), 0, arena_.capacity()));
  // The memset runs on the legacy stream; the backend's stream does not wait for it.
  MS_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace ms::cuda
