// The device sequence state (DESIGN.md: sequence state is per layer kind):
//  - attention layers: a K and a V buffer, [n_head_kv][ctx][head_dim] of f16
//    (bits in uint16_t), f32 (exact, twice the bytes) or q8_0 (rows of
//    head_dim/32 BlockQ8_0, 34 bytes per 32 elements), in one arena;
//  - recurrent (Gated DeltaNet) layers of hybrids: the f32 conv window
//    ([conv_kernel - 1][conv_dim]) and delta-rule state matrix
//    ([n_v_heads][head_v][head_k]) of src/cpu/delta_net.h, in a second arena,
//    fixed-size whatever the context.
// Holds one sequence at a time; the host-side KvCache only counts its
// positions. The recurrent state cannot be rewound: the backend zeroes it
// when a sequence starts at position 0 (zero_recurrent), as the CPU does.
//
// CUDA-only header; used by CudaBackend.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cuda/device.h"
#include "engine/kv_cache.h"
#include "quant/blocks.h"

namespace ms::cuda {

// Which layers keep a recurrent state instead of K/V, and its size per layer
// (f32 elements). Empty `recurrent`: every layer has attention.
struct RecurrentShape {
  std::vector<bool> recurrent;  // [n_layer]
  int64_t conv_elems = 0;       // (conv_kernel - 1) * conv_dim
  int64_t state_elems = 0;      // n_v_heads * head_v * head_k
};

class DeviceKvCache {
 public:
  DeviceKvCache() = default;
  // Allocates and zeroes n_layer layers' K and V for ctx positions (only for
  // the attention layers when rec.recurrent is given) and the recurrent state.
  // Throws ms::Error (naming --kv-type) for q8_0 with head_dim not a multiple of 32.
  DeviceKvCache(int n_layer, int n_head_kv, int head_dim, int64_t ctx, KvType type, const RecurrentShape& rec = {});
  DeviceKvCache(int n_layer, int n_head_kv, int head_dim, int64_t ctx, bool f32, const RecurrentShape& rec = {})
      : DeviceKvCache(n_layer, n_head_kv, head_dim, ctx, f32 ? KvType::F32 : KvType::F16, rec) {}

  // The same geometry in another element type (K/V contents lost; the
  // recurrent state is f32 either way and stays). K/V addresses change:
  // whatever holds them (a captured graph) must be dropped first.
  void reallocate(KvType type);
  void reallocate(bool f32) { reallocate(f32 ? KvType::F32 : KvType::F16); }

  int64_t ctx() const { return ctx_; }
  KvType type() const { return type_; }
  bool f32() const { return type_ == KvType::F32; }
  uint64_t bytes() const { return arena_.capacity() + rec_arena_.capacity(); }

  // Calls f(k_cache, v_cache) with layer il's cache pointers as their element
  // type (uint16_t: f16 bits, float, or BlockQ8_0); the cache launchers have
  // an overload for each. Throws ms::Error for a recurrent layer (no K/V).
  template <class F>
  void with_layer(int il, F&& f) const {
    void* k = k_[static_cast<size_t>(il)];
    void* v = v_[static_cast<size_t>(il)];
    if (k == nullptr) no_kv(il);
    switch (type_) {
      case KvType::F32: f(static_cast<float*>(k), static_cast<float*>(v)); break;
      case KvType::Q8_0: f(static_cast<BlockQ8_0*>(k), static_cast<BlockQ8_0*>(v)); break;
      default: f(static_cast<uint16_t*>(k), static_cast<uint16_t*>(v)); break;
    }
  }

  // Recurrent layers: the conv window and the delta-rule state of layer il
  // (throws ms::Error for an attention layer).
  bool has_recurrent() const { return rec_arena_.capacity() > 0; }
  float* conv_state(int il) const { return rec_ptr(il, 0); }
  float* delta_state(int il) const { return rec_ptr(il, rec_.conv_elems); }
  // Zeroes every recurrent layer's state on `stream` (a new sequence).
  void zero_recurrent(cudaStream_t stream);

 private:
  void allocate();
  float* rec_ptr(int il, int64_t offset) const;
  bool is_recurrent(int il) const { return !rec_.recurrent.empty() && rec_.recurrent[static_cast<size_t>(il)]; }
  [[noreturn]] static void no_kv(int il);

  int n_layer_ = 0, n_head_kv_ = 0, head_dim_ = 0;
  int64_t ctx_ = 0;
  KvType type_ = KvType::F16;
  RecurrentShape rec_;
  DeviceArena arena_;      // K/V
  DeviceArena rec_arena_;  // recurrent state (hybrids)
  std::vector<void*> k_, v_;   // per layer (null for recurrent layers)
  std::vector<float*> state_;  // per layer: conv window, then the delta-rule state (null for attention layers)
};

}  // namespace ms::cuda
