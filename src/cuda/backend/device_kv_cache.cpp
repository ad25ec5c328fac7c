// DeviceKvCache: the K/V arena and the recurrent-state arena of CudaBackend.
#include "cuda/backend/device_kv_cache.h"

#include <string>

#include "cuda/attention.h"
#include "cuda/backend/arena_layout.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

// Bytes of one K (or V) row of hd elements, and the type's name. Kept here
// rather than taken from engine/kv_cache.cpp: the kernel benches link the
// CUDA library's kernels without the engine's library.
size_t row_bytes(KvType t, int hd) {
  switch (t) {
    case KvType::F32: return sizeof(float) * static_cast<size_t>(hd);
    case KvType::Q8_0: return sizeof(BlockQ8_0) * static_cast<size_t>(hd / QK);
    default: return sizeof(uint16_t) * static_cast<size_t>(hd);
  }
}
const char* name(KvType t) { return t == KvType::F32 ? "f32" : t == KvType::Q8_0 ? "q8_0" : "f16"; }
void check_type(KvType t, int hd) {
  if (t == KvType::Q8_0) check_q8_0_head_dim("device KV cache (--kv-type q8_0)", hd);
}

}  // namespace

DeviceKvCache::DeviceKvCache(int n_layer, int n_head_kv, int head_dim, int64_t ctx, KvType type,
                             const RecurrentShape& rec, int n_seq)
    : n_layer_(n_layer), n_head_kv_(n_head_kv), head_dim_(head_dim), ctx_(ctx), n_seq_(n_seq), type_(type), rec_(rec) {
  check_type(type_, head_dim_);
  if (n_seq_ < 1) throw Error("device KV cache: " + std::to_string(n_seq_) + " sequences (at least 1)");
  if (!rec_.recurrent.empty() && static_cast<int>(rec_.recurrent.size()) != n_layer)
    throw Error("device KV cache: the recurrent layout has " + std::to_string(rec_.recurrent.size()) +
                " layers, not " + std::to_string(n_layer));
  state_.assign(static_cast<size_t>(n_layer_), nullptr);
  int n_rec = 0;
  for (int il = 0; il < n_layer_; ++il) n_rec += is_recurrent(il) ? 1 : 0;
  if (n_rec > 0) {
    const size_t per_layer = arena_align_up(sizeof(float) * static_cast<size_t>(rec_.conv_elems + rec_.state_elems));
    rec_slot_bytes_ = per_layer * static_cast<size_t>(n_rec);
    rec_arena_ = DeviceArena("recurrent state", rec_slot_bytes_ * static_cast<size_t>(n_seq_));
    // Slot 0's layers first; slot s's at + s * rec_slot_bytes_ (rec_ptr).
    for (int il = 0; il < n_layer_; ++il)
      if (is_recurrent(il)) state_[static_cast<size_t>(il)] = static_cast<float*>(rec_arena_.alloc(per_layer));
    for (int s = 1; s < n_seq_; ++s) rec_arena_.alloc(rec_slot_bytes_);
    MS_CUDA_CHECK(cudaMemset(rec_arena_.base(), 0, rec_arena_.capacity()));
  }
  allocate();  // ends with a device sync, which also covers the memset above
}

void DeviceKvCache::reallocate(KvType type) {
  check_type(type, head_dim_);
  type_ = type;
  allocate();
}

void DeviceKvCache::allocate() {
  // One slot's K (or V) of a layer; n_seq of them, slot_stride_ apart: a
  // whole number of elements (34-byte q8_0 blocks too), so a kernel may take
  // the stride in elements; the layer's block is aligned as a whole.
  slot_stride_ = static_cast<size_t>(n_head_kv_) * static_cast<size_t>(ctx_) * row_bytes(type_, head_dim_);
  const size_t half_layer = arena_align_up(slot_stride_ * static_cast<size_t>(n_seq_));
  int n_attn = 0;
  for (int il = 0; il < n_layer_; ++il) n_attn += is_recurrent(il) ? 0 : 1;
  arena_ = DeviceArena();  // the old cache goes first: both may not fit at once
  const std::string what = std::string("KV cache (") + name(type_) + ")";
  arena_ = DeviceArena(what, 2 * arena_align_up(half_layer) * n_attn);
  k_.assign(static_cast<size_t>(n_layer_), nullptr);
  v_.assign(static_cast<size_t>(n_layer_), nullptr);
  for (int il = 0; il < n_layer_; ++il) {
    if (is_recurrent(il)) continue;
    k_[static_cast<size_t>(il)] = arena_.alloc(half_layer);
    v_[static_cast<size_t>(il)] = arena_.alloc(half_layer);
  }
  if (arena_.capacity() > 0) MS_CUDA_CHECK(cudaMemset(arena_.base(), 0, arena_.capacity()));
  // The memset runs on the legacy stream; the backend's stream does not wait for it.
  MS_CUDA_CHECK(cudaDeviceSynchronize());
}

float* DeviceKvCache::rec_ptr(int il, int slot, int64_t offset) const {
  check_slot(slot);
  float* p = state_.empty() ? nullptr : state_[static_cast<size_t>(il)];
  if (p == nullptr)
    throw Error("device KV cache: layer " + std::to_string(il) + " has no recurrent state (it is an attention layer)");
  return reinterpret_cast<float*>(reinterpret_cast<char*>(p) + static_cast<size_t>(slot) * rec_slot_bytes_) + offset;
}

void DeviceKvCache::zero_recurrent(int slot, cudaStream_t stream) {
  check_slot(slot);
  if (has_recurrent())
    MS_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(rec_arena_.base()) + static_cast<size_t>(slot) * rec_slot_bytes_,
                                  0, rec_slot_bytes_, stream));
}

void* DeviceKvCache::recurrent_slot(int slot) const {
  check_slot(slot);
  if (!has_recurrent()) throw Error("device KV cache: no recurrent layers");
  return static_cast<char*>(rec_arena_.base()) + static_cast<size_t>(slot) * rec_slot_bytes_;
}

void DeviceKvCache::copy_slot(int from, int to, int64_t n_pos, cudaStream_t stream) const {
  check_slot(from);
  check_slot(to);
  if (from == to) return;
  if (n_pos < 0 || n_pos > ctx_) throw Error("device KV cache: cannot copy " + std::to_string(n_pos) + " positions");
  // Per layer, K and V: n_head_kv rows of n_pos positions, ctx positions apart.
  const size_t row = row_bytes(type_, head_dim_);
  const size_t pitch = static_cast<size_t>(ctx_) * row;
  if (n_pos > 0)
    for (int il = 0; il < n_layer_; ++il) {
      if (is_recurrent(il)) continue;
      for (void* base : {k_[static_cast<size_t>(il)], v_[static_cast<size_t>(il)]}) {
        char* b = static_cast<char*>(base);
        MS_CUDA_CHECK(cudaMemcpy2DAsync(b + static_cast<size_t>(to) * slot_stride_, pitch,
                                        b + static_cast<size_t>(from) * slot_stride_, pitch,
                                        static_cast<size_t>(n_pos) * row, static_cast<size_t>(n_head_kv_),
                                        cudaMemcpyDeviceToDevice, stream));
      }
    }
  if (has_recurrent())
    MS_CUDA_CHECK(cudaMemcpyAsync(recurrent_slot(to), recurrent_slot(from), rec_slot_bytes_, cudaMemcpyDeviceToDevice,
                                  stream));
}

void DeviceKvCache::bad_slot(int slot) const {
  throw Error("device KV cache: sequence slot " + std::to_string(slot) + " does not exist (it holds " +
              std::to_string(n_seq_) + ")");
}

void DeviceKvCache::no_kv(int il) {
  throw Error("device KV cache: layer " + std::to_string(il) + " is recurrent (Gated DeltaNet) and has no K/V");
}

}  // namespace ms::cuda
