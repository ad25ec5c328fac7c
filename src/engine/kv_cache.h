// The key/value cache of one sequence: per attention layer, k and v as
// [n_kv][ctx][head_dim] elements (the layout of src/cpu/attention.h and the
// CUDA backend). Elements are IEEE halves by default; F32 keeps keys and
// values unrounded, for numerical parity checks against F32 references (at
// twice the memory). Sized once to the context; running past it is an error,
// never a silent wrap.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ms {

enum class KvType { F16, F32 };

// "f16", "f32" (the --kv-type spelling).
const char* kv_type_name(KvType t);
inline int kv_type_size(KvType t) { return t == KvType::F32 ? 4 : 2; }

class KvCache {
 public:
  KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type = KvType::F16);

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

  // Throws ms::Error "context full (N tokens)" when n more tokens do not fit.
  void check_room(int64_t n) const;
  // Records that positions n_past .. n_past+n-1 were written (checks room).
  void advance(int64_t n);
  // Forgets positions >= n (keeps the first n, e.g. a shared prompt prefix).
  void truncate(int64_t n);
  void clear() { n_past_ = 0; }

  uint64_t bytes() const { return data_.size(); }

 private:
  template <typename T>
  T* elems(KvType want, int layer, int64_t offset) {
    if (type_ != want) wrong_type(want);
    return reinterpret_cast<T*>(data_.data()) + static_cast<int64_t>(layer) * per_layer_ + offset;
  }
  [[noreturn]] void wrong_type(KvType want) const;

  int n_layer_;
  int64_t ctx_;
  KvType type_;
  int64_t per_layer_;  // elements per layer, k and v together
  int64_t n_past_ = 0;
  // Raw bytes: a byte array may hold objects of any type, and operator new
  // aligns it for float.
  std::vector<std::byte> data_;
};

}  // namespace ms
