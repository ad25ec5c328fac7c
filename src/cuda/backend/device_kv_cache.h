// The device sequence state (DESIGN.md: sequence state is per layer kind):
//  - attention layers: a K and a V buffer, [n_head_kv][ctx][head_dim] of f16
//    (bits in uint16_t) or f32 (exact, twice the bytes), in one arena;
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
  DeviceKvCache(int n_layer, int n_head_kv, int head_dim, int64_t ctx, bool f32, const RecurrentShape& rec = {});

  // The same geometry in the other element type (K/V contents lost; the
  // recurrent state is f32 either way and stays). K/V addresses change:
  // whatever holds them (a captured graph) must be dropped first.
  void reallocate(bool f32);

  int64_t ctx() const { return ctx_; }
  bool f32() const { return f32_; }
  uint64_t bytes() const { return arena_.capacity() + rec_arena_.capacity(); }

  // Calls f(k_cache, v_cache) with layer il's cache pointers as their element
  // type (uint16_t: f16 bits, or float); every cache launcher has both
  // overloads. Throws ms::Error for a recurrent layer (it has no K/V).
  template <class F>
  void with_layer(int il, F&& f) const {
    void* k = k_[static_cast<size_t>(il)];
    void* v = v_[static_cast<size_t>(il)];
    if (k == nullptr) no_kv(il);
    if (f32_)
      f(static_cast<float*>(k), static_cast<float*>(v));
    else
      f(static_cast<uint16_t*>(k), static_cast<uint16_t*>(v));
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
  bool f32_ = false;
  RecurrentShape rec_;
  DeviceArena arena_;      // K/V
  DeviceArena rec_arena_;  // recurrent state (hybrids)
  std::vector<void*> k_, v_;   // per layer (null for recurrent layers)
  std::vector<float*> state_;  // per layer: conv window, then the delta-rule state (null for attention layers)
};

}  // namespace ms::cuda
