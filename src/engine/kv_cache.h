// The state of one sequence, per layer kind (DESIGN.md: sequence state):
//  - attention layers: keys and values as [n_kv][ctx][head_dim] elements (the
//    layout of src/cpu/attention.h and the CUDA backend). IEEE halves by
//    default; F32 keeps them unrounded, for numerical parity checks against
//    F32 references (at twice the memory). Sized once to the context; running
//    past it is an error, never a silent wrap.
//  - recurrent (linear-attention) layers of hybrids: a fixed-size f32 state,
//    whatever the sequence length: the conv window (the last conv_kernel - 1
//    inputs of the causal conv) and the delta-rule state matrix. All zeros
//    at position 0; clear() zeroes them.
// A recurrent state cannot be rewound: truncate() may keep all positions or
// none (can_truncate_to() says which are possible).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ms {

enum class KvType { F16, F32 };

// "f16", "f32" (the --kv-type spelling).
const char* kv_type_name(KvType t);
inline int kv_type_size(KvType t) { return t == KvType::F32 ? 4 : 2; }

// Which layers are recurrent and how big their state is (f32 elements).
// conv_elems = state_elems = 0 with recurrent layers: a backend that keeps
// the state elsewhere (the CUDA backend, on the device) still marks the cache
// as not rewindable.
struct RecurrentLayout {
  std::vector<bool> recurrent;  // [n_layer]: no K/V for these layers
  int64_t conv_elems = 0;       // per recurrent layer: (conv_kernel - 1) * conv_dim
  int64_t state_elems = 0;      // per recurrent layer: n_v_heads * head_k * head_v
};

class KvCache {
 public:
  KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type = KvType::F16);
  // A hybrid's cache: K/V for the layers that are not recurrent only.
  KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type, const RecurrentLayout& rec);

  int n_layer() const { return n_layer_; }
  int64_t ctx() const { return ctx_; }
  KvType type() const { return type_; }
  // Positions filled so far (the next token goes to position n_past()).
  int64_t n_past() const { return n_past_; }

  // One layer's keys and values, typed: each throws ms::Error when the cache
  // holds the other type (a mix-up would read garbage, not fail).
  uint16_t* k_f16(int layer) { return elems<uint16_t>(KvType::F16, layer, 0); }
  uint16_t* v_f16(int layer) { return elems<uint16_t>(KvType::F16, layer, per_layer_ / 2); }
  const uint16_t* k_f16(int layer) const { return const_cast<KvCache*>(this)->k_f16(layer); }
  const uint16_t* v_f16(int layer) const { return const_cast<KvCache*>(this)->v_f16(layer); }
  float* k_f32(int layer) { return elems<float>(KvType::F32, layer, 0); }
  float* v_f32(int layer) { return elems<float>(KvType::F32, layer, per_layer_ / 2); }
  const float* k_f32(int layer) const { return const_cast<KvCache*>(this)->k_f32(layer); }
  const float* v_f32(int layer) const { return const_cast<KvCache*>(this)->v_f32(layer); }

  // Recurrent layers (hybrids): their f32 conv window and delta-rule state.
  // Throws ms::Error for a layer that is not recurrent.
  bool is_recurrent(int layer) const { return rec_slot_.empty() ? false : rec_slot_[static_cast<size_t>(layer)] >= 0; }
  bool has_recurrent() const { return has_recurrent_; }
  float* conv_state(int layer) { return rec_elems(layer, 0); }
  float* delta_state(int layer) { return rec_elems(layer, conv_elems_); }
  int64_t conv_elems() const { return conv_elems_; }
  int64_t state_elems() const { return state_elems_; }

  // Throws ms::Error "context full (N tokens)" when n more tokens do not fit.
  void check_room(int64_t n) const;
  // Records that positions n_past .. n_past+n-1 were written (checks room).
  void advance(int64_t n);
  // Whether truncate(n) is possible: any n <= n_past for attention-only
  // caches; with recurrent layers only n_past (keep all) and 0 (start over).
  bool can_truncate_to(int64_t n) const;
  // Forgets positions >= n (keeps the first n, e.g. a shared prompt prefix).
  // Throws ms::Error when !can_truncate_to(n).
  void truncate(int64_t n);
  // Forgets every position; zeroes the recurrent state.
  void clear();

  uint64_t bytes() const { return data_.size() + rec_.size() * sizeof(float); }

 private:
  template <typename T>
  T* elems(KvType want, int layer, int64_t offset) {
    if (type_ != want) wrong_type(want);
    const int slot = kv_slot_.empty() ? layer : kv_slot_[static_cast<size_t>(layer)];
    if (slot < 0) not_attention(layer);
    return reinterpret_cast<T*>(data_.data()) + static_cast<int64_t>(slot) * per_layer_ + offset;
  }
  float* rec_elems(int layer, int64_t offset);
  [[noreturn]] void wrong_type(KvType want) const;
  [[noreturn]] void not_attention(int layer) const;
  void allocate_kv(int n_attn_layers);

  int n_layer_;
  int64_t ctx_;
  KvType type_;
  int64_t per_layer_;  // elements per layer, k and v together
  int64_t n_past_ = 0;
  // Raw bytes: a byte array may hold objects of any type, and operator new
  // aligns it for float.
  std::vector<std::byte> data_;
  // Hybrids: per layer, its index among the K/V layers or among the
  // recurrent ones (-1: the other kind). Empty for attention-only caches.
  std::vector<int> kv_slot_, rec_slot_;
  bool has_recurrent_ = false;
  int64_t conv_elems_ = 0, state_elems_ = 0;
  std::vector<float> rec_;
};

}  // namespace ms
