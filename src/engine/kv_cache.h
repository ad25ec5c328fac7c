// The state of one sequence, per layer kind (DESIGN.md: sequence state):
//  - attention layers: keys and values as [n_kv][ctx] rows of head_dim
//    elements (the layout of src/cpu/attention.h and the CUDA backend). IEEE
//    halves by default; F32 keeps them unrounded, for numerical parity checks
//    against F32 references (at twice the memory); Q8_0 stores each row as
//    head_dim/32 blocks of ggml's block_q8_0 (an f16 scale d, then 32 int8;
//    d = amax/127, q = round(x/d), as llama.cpp's `-ctk/-ctv q8_0`): 34 bytes
//    per 32 elements, 53% of f16, for long contexts. Q8_0 needs head_dim a
//    multiple of 32. Sized once to the context; running past it is an error,
//    never a silent wrap.
//  - recurrent (linear-attention) layers of hybrids: a fixed-size f32 state,
//    whatever the sequence length: the conv window (the last conv_kernel - 1
//    inputs of the causal conv) and the delta-rule state matrix. All zeros
//    at position 0; clear() zeroes them.
// A recurrent state cannot be rewound: truncate() may keep all positions or
// none (can_truncate_to() says which are possible).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "quant/blocks.h"

namespace ms {

enum class KvType { F16, F32, Q8_0 };

// "f16", "f32", "q8_0" (the --kv-type spelling).
const char* kv_type_name(KvType t);
// The inverse; throws ms::Error naming --kv-type and the accepted names.
KvType parse_kv_type(std::string_view name);

// Bytes per 32 elements of a K or V row: 64 (f16), 128 (f32), 34 (q8_0).
// The budget planner (ModelHParams::kv_cache_bytes) takes this number.
int kv_bytes_per_32(KvType t);
// Bytes of one K (or V) row of head_dim elements (one position of one KV
// head). For Q8_0 head_dim must be a multiple of 32 (check_kv_head_dim).
inline int64_t kv_row_bytes(KvType t, int64_t head_dim) { return head_dim * kv_bytes_per_32(t) / 32; }
// Throws ms::Error naming --kv-type and the head size when the type cannot
// hold rows of head_dim elements (q8_0: not a multiple of 32).
void check_kv_head_dim(KvType t, int64_t head_dim);

// Which layers are recurrent and how big their state is (f32 elements).
// conv_elems = state_elems = 0 with recurrent layers: a backend that keeps
// the state elsewhere (the CUDA backend, on the device) still marks the cache
// as not rewindable.
struct RecurrentLayout {
  std::vector<bool> recurrent;  // [n_layer]: no K/V for these layers
  int64_t conv_elems = 0;       // per recurrent layer: (conv_kernel - 1) * conv_dim
  int64_t state_elems = 0;      // per recurrent layer: n_v_heads * head_k * head_v
};

// Memory for the K/V bytes that the kernel hands out as zero pages on first
// touch (calloc of a large block maps fresh pages): a cache sized for the
// model's whole context costs resident memory only for the positions
// written so far. Default construction leaves calloc's zeros untouched.
template <class T>
struct ZeroPagesAllocator {
  using value_type = T;
  ZeroPagesAllocator() = default;
  template <class U>
  ZeroPagesAllocator(const ZeroPagesAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    void* p = std::calloc(n, sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <class U>
  void construct(U*) noexcept {}
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  template <class U>
  bool operator==(const ZeroPagesAllocator<U>&) const noexcept { return true; }
};

// A backend's claim on one of its device sequence states (CudaBackend with
// Options::n_seq > 1): the state's index and the way back to the pool that
// handed it out, which gets it back when the claim goes. Move-only in effect:
// a copy holds NO state (index -1), so two caches can never share one by
// accident (the backend refuses a cache without a state).
class SeqSlot {
 public:
  SeqSlot() = default;
  SeqSlot(int index, std::function<void(int)> release) : index_(index), release_(std::move(release)) {}
  ~SeqSlot() { reset(); }
  SeqSlot(SeqSlot&& o) noexcept : index_(o.index_), release_(std::move(o.release_)) { o.forget(); }
  SeqSlot& operator=(SeqSlot&& o) noexcept {
    if (this != &o) {
      reset();
      index_ = o.index_;
      release_ = std::move(o.release_);
      o.forget();
    }
    return *this;
  }
  SeqSlot(const SeqSlot&) {}  // a copy holds no state (see above)
  SeqSlot& operator=(const SeqSlot& o) {
    if (this != &o) reset();
    return *this;
  }
  int index() const { return index_; }  // -1: none
  // Gives the state back (to its pool, if it has one) and holds none.
  void reset() noexcept {
    if (release_) release_(index_);
    forget();
  }

 private:
  void forget() noexcept {
    index_ = -1;
    release_ = nullptr;
  }
  int index_ = -1;
  std::function<void(int)> release_;
};

// The n sequence states of a backend, handed out one per cache. Shared (by
// shared_ptr) between the backend and the claims it made, so a cache that
// outlives its backend still gives its claim back safely. Thread-safe.
class SeqSlotPool : public std::enable_shared_from_this<SeqSlotPool> {
 public:
  explicit SeqSlotPool(int n);
  int size() const { return static_cast<int>(used_.size()); }
  int in_use() const;
  // A free state, the lowest index first; throws ms::Error `full_message`
  // when every state is taken.
  SeqSlot acquire(const std::string& full_message);

 private:
  void release(int index) noexcept;
  mutable std::mutex mu_;
  std::vector<bool> used_;
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
  // holds another type (a mix-up would read garbage, not fail).
  uint16_t* k_f16(int layer) { return elems<uint16_t>(KvType::F16, layer, false); }
  uint16_t* v_f16(int layer) { return elems<uint16_t>(KvType::F16, layer, true); }
  const uint16_t* k_f16(int layer) const { return const_cast<KvCache*>(this)->k_f16(layer); }
  const uint16_t* v_f16(int layer) const { return const_cast<KvCache*>(this)->v_f16(layer); }
  float* k_f32(int layer) { return elems<float>(KvType::F32, layer, false); }
  float* v_f32(int layer) { return elems<float>(KvType::F32, layer, true); }
  const float* k_f32(int layer) const { return const_cast<KvCache*>(this)->k_f32(layer); }
  const float* v_f32(int layer) const { return const_cast<KvCache*>(this)->v_f32(layer); }
  // Q8_0: [n_kv][ctx][head_dim / 32] blocks per layer for K, the same for V.
  BlockQ8_0* k_q8(int layer) { return elems<BlockQ8_0>(KvType::Q8_0, layer, false); }
  BlockQ8_0* v_q8(int layer) { return elems<BlockQ8_0>(KvType::Q8_0, layer, true); }
  const BlockQ8_0* k_q8(int layer) const { return const_cast<KvCache*>(this)->k_q8(layer); }
  const BlockQ8_0* v_q8(int layer) const { return const_cast<KvCache*>(this)->v_q8(layer); }

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

  // Which of the backend's device sequence states this cache runs on (set by
  // a backend's make_cache; a copied cache holds none: SeqSlot).
  int device_slot() const { return slot_.index(); }
  void set_device_slot(SeqSlot slot) { slot_ = std::move(slot); }

 private:
  template <typename T>
  T* elems(KvType want, int layer, bool values) {
    if (type_ != want) wrong_type(want);
    const int slot = kv_slot_.empty() ? layer : kv_slot_[static_cast<size_t>(layer)];
    if (slot < 0) not_attention(layer);
    // Every offset is a multiple of the row size, so of T's (halves, floats,
    // 34-byte blocks of one byte alignment).
    return reinterpret_cast<T*>(data_.data() + static_cast<int64_t>(slot) * 2 * half_layer_bytes_ +
                                (values ? half_layer_bytes_ : 0));
  }
  float* rec_elems(int layer, int64_t offset);
  [[noreturn]] void wrong_type(KvType want) const;
  [[noreturn]] void not_attention(int layer) const;
  void allocate_kv(int n_attn_layers);

  int n_layer_;
  int64_t ctx_;
  KvType type_;
  int64_t half_layer_bytes_;  // bytes of one layer's keys (its values take as many)
  int64_t n_past_ = 0;
  // Raw bytes: a byte array may hold objects of any type, and calloc aligns
  // it for float. Zero until written (see ZeroPagesAllocator).
  std::vector<std::byte, ZeroPagesAllocator<std::byte>> data_;
  // Hybrids: per layer, its index among the K/V layers or among the
  // recurrent ones (-1: the other kind). Empty for attention-only caches.
  std::vector<int> kv_slot_, rec_slot_;
  bool has_recurrent_ = false;
  int64_t conv_elems_ = 0, state_elems_ = 0;
  std::vector<float> rec_;
  SeqSlot slot_;
};

}  // namespace ms
