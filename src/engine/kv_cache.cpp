#include "engine/kv_cache.h"

#include <algorithm>
#include <string>

#include "util/bytes.h"
#include "util/error.h"

namespace ms {

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F16: return "f16";
    case KvType::F32: return "f32";
    case KvType::Q8_0: return "q8_0";
  }
  return "?";
}

KvType parse_kv_type(std::string_view name) {
  for (KvType t : {KvType::F16, KvType::F32, KvType::Q8_0})
    if (name == kv_type_name(t)) return t;
  throw Error("--kv-type: unknown KV cache type '" + std::string(name) + "' (expected f16, f32 or q8_0)");
}

int kv_bytes_per_32(KvType t) {
  switch (t) {
    case KvType::F16: return 64;
    case KvType::F32: return 128;
    case KvType::Q8_0: return static_cast<int>(sizeof(BlockQ8_0));
  }
  return 64;
}

void check_kv_head_dim(KvType t, int64_t head_dim) {
  if (t == KvType::Q8_0 && head_dim % QK != 0)
    throw Error("--kv-type q8_0 needs a head size that is a multiple of " + std::to_string(QK) +
                " (blocks of 32); this model's head size is " + std::to_string(head_dim) + ": use --kv-type f16");
}

SeqSlotPool::SeqSlotPool(int n) {
  if (n <= 0) throw Error("sequence states: the pool needs at least one (got " + std::to_string(n) + ")");
  used_.assign(static_cast<size_t>(n), false);
}

int SeqSlotPool::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(std::count(used_.begin(), used_.end(), true));
}

SeqSlot SeqSlotPool::acquire(const std::string& full_message) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < used_.size(); ++i)
    if (!used_[i]) {
      used_[i] = true;
      std::weak_ptr<SeqSlotPool> self = weak_from_this();
      return SeqSlot(static_cast<int>(i), [self](int index) {
        if (auto pool = self.lock()) pool->release(index);
      });
    }
  throw Error(full_message);
}

void SeqSlotPool::release(int index) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (index >= 0 && static_cast<size_t>(index) < used_.size()) used_[static_cast<size_t>(index)] = false;
}

KvCache::KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type)
    : n_layer_(n_layer), ctx_(ctx), type_(type) {
  if (n_layer <= 0 || n_kv <= 0 || head_dim <= 0 || ctx <= 0)
    throw Error("KV cache: layers, heads, head size and context must be positive");
  check_kv_head_dim(type, head_dim);
  half_layer_bytes_ = static_cast<int64_t>(n_kv) * ctx * kv_row_bytes(type, head_dim);
  allocate_kv(n_layer);
}

KvCache::KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type, const RecurrentLayout& rec)
    : n_layer_(n_layer), ctx_(ctx), type_(type) {
  if (n_layer <= 0 || n_kv <= 0 || head_dim <= 0 || ctx <= 0)
    throw Error("KV cache: layers, heads, head size and context must be positive");
  if (static_cast<int>(rec.recurrent.size()) != n_layer)
    throw Error("KV cache: the recurrent layout has " + std::to_string(rec.recurrent.size()) + " layers, not " +
                std::to_string(n_layer));
  if (rec.conv_elems < 0 || rec.state_elems < 0) throw Error("KV cache: negative recurrent state size");
  check_kv_head_dim(type, head_dim);
  half_layer_bytes_ = static_cast<int64_t>(n_kv) * ctx * kv_row_bytes(type, head_dim);
  conv_elems_ = rec.conv_elems;
  state_elems_ = rec.state_elems;
  int n_kv_layers = 0, n_rec = 0;
  for (bool r : rec.recurrent) {
    kv_slot_.push_back(r ? -1 : n_kv_layers);
    rec_slot_.push_back(r ? n_rec : -1);
    (r ? n_rec : n_kv_layers) += 1;
  }
  has_recurrent_ = n_rec > 0;
  allocate_kv(n_kv_layers);
  const uint64_t rec_total = static_cast<uint64_t>(n_rec) * static_cast<uint64_t>(conv_elems_ + state_elems_);
  try {
    rec_.assign(static_cast<size_t>(rec_total), 0.0f);
  } catch (const std::bad_alloc&) {
    throw Error("KV cache: cannot allocate " + format_bytes(rec_total * 4) + " of recurrent state");
  }
}

void KvCache::allocate_kv(int n_attn_layers) {
  const uint64_t total = 2 * static_cast<uint64_t>(half_layer_bytes_) * static_cast<uint64_t>(n_attn_layers);
  const KvType type = type_;
  const int64_t ctx = ctx_;
  try {
    data_.resize(static_cast<size_t>(total));  // zero pages, not touched here
  } catch (const std::bad_alloc&) {
    throw Error("KV cache: cannot allocate " + format_bytes(total) + " (" + kv_type_name(type) +
                ") for a context of " + std::to_string(ctx) + " tokens; use a smaller --ctx");
  }
}

void KvCache::wrong_type(KvType want) const {
  throw Error(std::string("KV cache: asked for ") + kv_type_name(want) + " keys/values but the cache holds " +
              kv_type_name(type_));
}

void KvCache::not_attention(int layer) const {
  throw Error("KV cache: layer " + std::to_string(layer) + " is recurrent (linear attention); it has no keys/values");
}

float* KvCache::rec_elems(int layer, int64_t offset) {
  const int slot = rec_slot_.empty() ? -1 : rec_slot_[static_cast<size_t>(layer)];
  if (slot < 0) throw Error("KV cache: layer " + std::to_string(layer) + " has no recurrent state");
  if (rec_.empty()) throw Error("KV cache: the recurrent state is kept by the backend, not here");
  return rec_.data() + static_cast<int64_t>(slot) * (conv_elems_ + state_elems_) + offset;
}

void KvCache::clear() {
  n_past_ = 0;
  std::fill(rec_.begin(), rec_.end(), 0.0f);
}

bool KvCache::can_truncate_to(int64_t n) const {
  if (n < 0 || n > n_past_) return false;
  return !has_recurrent_ || n == n_past_ || n == 0;
}

void KvCache::check_room(int64_t n) const {
  if (n_past_ + n > ctx_)
    throw Error("context full (" + std::to_string(ctx_) + " tokens): " + std::to_string(n_past_) +
                " used, " + std::to_string(n) + " more requested; start a new sequence or use a larger --ctx");
}

void KvCache::advance(int64_t n) {
  check_room(n);
  n_past_ += n;
}

void KvCache::truncate(int64_t n) {
  if (n < 0 || n > n_past_) throw Error("KV cache: cannot keep " + std::to_string(n) + " of " +
                                        std::to_string(n_past_) + " positions");
  if (!can_truncate_to(n))
    throw Error("KV cache: cannot keep " + std::to_string(n) + " of " + std::to_string(n_past_) +
                " positions: a recurrent (linear-attention) state cannot be rewound; keep all or none");
  if (n == 0) clear();
  n_past_ = n;
}

}  // namespace ms
