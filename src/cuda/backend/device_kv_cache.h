// The device sequence state (DESIGN.md: sequence state is per layer kind):
//  - attention layers: a K and a V buffer, [n_head_kv][ctx][head_dim] of f16
//    (bits in uint16_t), f32 (exact, twice the bytes) or q8_0 (rows of
//    head_dim/32 BlockQ8_0, 34 bytes per 32 elements), in one arena;
//  - recurrent (Gated DeltaNet) layers of hybrids: the f32 conv window
//    ([conv_kernel - 1][conv_dim]) and delta-rule state matrix
//    ([n_v_heads][head_v][head_k]) of src/cpu/delta_net.h, in a second arena,
//    fixed-size whatever the context.
// Holds n_seq sequences (slots 0..n_seq-1), each with its own K/V and
// recurrent state; the host-side KvCache only counts a sequence's positions
// (and says which slot it runs on). Layout, so that a kernel can address slot
// s of layer il as base + s * stride: per attention layer, K as n_seq blocks
// of [n_head_kv][ctx][head_dim] (slot_stride() bytes apart), V likewise; the
// recurrent state slot-major (one slot's layers together, so a new sequence's
// state is zeroed in one memset and checkpointed in one copy). The backend
// zeroes a slot's when its sequence starts at position 0 (zero_recurrent),
// as the CPU does; rollback restores a checkpoint (DeviceStateStore).
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
  // the attention layers when rec.recurrent is given) and the recurrent state,
  // n_seq times. Throws ms::Error (naming --kv-type) for q8_0 with head_dim
  // not a multiple of 32.
  DeviceKvCache(int n_layer, int n_head_kv, int head_dim, int64_t ctx, KvType type, const RecurrentShape& rec = {},
                int n_seq = 1);
  DeviceKvCache(int n_layer, int n_head_kv, int head_dim, int64_t ctx, bool f32, const RecurrentShape& rec = {})
      : DeviceKvCache(n_layer, n_head_kv, head_dim, ctx, f32 ? KvType::F32 : KvType::F16, rec) {}

  // The same geometry in another element type (K/V contents lost; the
  // recurrent state is f32 either way and stays). K/V addresses change:
  // whatever holds them (a captured graph) must be dropped first.
  void reallocate(KvType type);
  void reallocate(bool f32) { reallocate(f32 ? KvType::F32 : KvType::F16); }

  int64_t ctx() const { return ctx_; }
  int n_seq() const { return n_seq_; }
  KvType type() const { return type_; }
  // Bytes from one slot's K (or V) of a layer to the next slot's (a whole
  // number of the type's elements: halves, floats or BlockQ8_0).
  size_t slot_stride() const { return slot_stride_; }
  // Bytes from one slot's recurrent state to the next's (whole floats).
  size_t recurrent_slot_stride() const { return rec_slot_bytes_; }
  bool f32() const { return type_ == KvType::F32; }
  uint64_t bytes() const { return arena_.capacity() + rec_arena_.capacity(); }

  // Calls f(k_cache, v_cache) with layer il's cache pointers for sequence
  // slot `slot` as their element type (uint16_t: f16 bits, float, or
  // BlockQ8_0); the cache launchers have an overload for each. Throws
  // ms::Error for a recurrent layer (no K/V) or a slot out of range.
  template <class F>
  void with_layer(int il, int slot, F&& f) const {
    check_slot(slot);
    void* k = k_[static_cast<size_t>(il)];
    void* v = v_[static_cast<size_t>(il)];
    if (k == nullptr) no_kv(il);
    k = static_cast<char*>(k) + static_cast<size_t>(slot) * slot_stride_;
    v = static_cast<char*>(v) + static_cast<size_t>(slot) * slot_stride_;
    switch (type_) {
      case KvType::F32: f(static_cast<float*>(k), static_cast<float*>(v)); break;
      case KvType::Q8_0: f(static_cast<BlockQ8_0*>(k), static_cast<BlockQ8_0*>(v)); break;
      default: f(static_cast<uint16_t*>(k), static_cast<uint16_t*>(v)); break;
    }
  }

  // Recurrent layers: the conv window and the delta-rule state of layer il
  // in slot `slot` (throws ms::Error for an attention layer).
  bool has_recurrent() const { return rec_arena_.capacity() > 0; }
  float* conv_state(int il, int slot) const { return rec_ptr(il, slot, 0); }
  float* delta_state(int il, int slot) const { return rec_ptr(il, slot, rec_.conv_elems); }
  // Zeroes slot `slot`'s recurrent state on `stream` (a new sequence there).
  void zero_recurrent(int slot, cudaStream_t stream);
  // Slot `slot`'s recurrent state, all its layers (recurrent_slot_stride()
  // bytes): what a checkpoint copies.
  void* recurrent_slot(int slot) const;
  // A fork on the device: slot `to` takes slot `from`'s first n_pos K/V rows
  // of every attention layer and its recurrent state, on `stream`.
  void copy_slot(int from, int to, int64_t n_pos, cudaStream_t stream) const;

 private:
  void allocate();
  float* rec_ptr(int il, int slot, int64_t offset) const;
  void check_slot(int slot) const {
    if (slot < 0 || slot >= n_seq_) bad_slot(slot);
  }
  [[noreturn]] void bad_slot(int slot) const;
  bool is_recurrent(int il) const { return !rec_.recurrent.empty() && rec_.recurrent[static_cast<size_t>(il)]; }
  [[noreturn]] static void no_kv(int il);

  int n_layer_ = 0, n_head_kv_ = 0, head_dim_ = 0;
  int64_t ctx_ = 0;
  int n_seq_ = 1;
  size_t slot_stride_ = 0;      // K/V bytes of one slot of one layer
  size_t rec_slot_bytes_ = 0;   // recurrent state bytes of one slot (all its layers)
  KvType type_ = KvType::F16;
  RecurrentShape rec_;
  DeviceArena arena_;      // K/V
  DeviceArena rec_arena_;  // recurrent state (hybrids)
  std::vector<void*> k_, v_;   // per layer (null for recurrent layers)
  std::vector<float*> state_;  // per layer, slot 0: conv window, then the delta-rule state (null for attention layers)
};

}  // namespace ms::cuda
