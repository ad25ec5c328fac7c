// The F16 key/value cache of one sequence: per attention layer, k and v as
// [n_kv][ctx][head_dim] halves (the layout of src/cpu/attention.h and the CUDA
// backend). Sized once to the context; running past it is an error, never a
// silent wrap.
#pragma once
#include <cstdint>
#include <vector>

namespace ms {

class KvCache {
 public:
  KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx);

  int n_layer() const { return n_layer_; }
  int64_t ctx() const { return ctx_; }
  // Positions filled so far (the next token goes to position n_past()).
  int64_t n_past() const { return n_past_; }

  uint16_t* k(int layer) { return data_.data() + layer_offset(layer); }
  uint16_t* v(int layer) { return data_.data() + layer_offset(layer) + per_layer_ / 2; }
  const uint16_t* k(int layer) const { return data_.data() + layer_offset(layer); }
  const uint16_t* v(int layer) const { return data_.data() + layer_offset(layer) + per_layer_ / 2; }

  // Throws ms::Error "context full (N tokens)" when n more tokens do not fit.
  void check_room(int64_t n) const;
  // Records that positions n_past .. n_past+n-1 were written (checks room).
  void advance(int64_t n);
  // Forgets positions >= n (keeps the first n, e.g. a shared prompt prefix).
  void truncate(int64_t n);
  void clear() { n_past_ = 0; }

  uint64_t bytes() const { return data_.size() * sizeof(uint16_t); }

 private:
  int64_t layer_offset(int layer) const { return static_cast<int64_t>(layer) * per_layer_; }
  int n_layer_;
  int64_t ctx_;
  int64_t per_layer_;  // halves per layer, k and v together
  int64_t n_past_ = 0;
  std::vector<uint16_t> data_;
};

}  // namespace ms
