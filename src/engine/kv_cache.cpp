#include "engine/kv_cache.h"

#include <string>

#include "util/bytes.h"
#include "util/error.h"

namespace ms {

const char* kv_type_name(KvType t) { return t == KvType::F32 ? "f32" : "f16"; }

KvCache::KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type)
    : n_layer_(n_layer), ctx_(ctx), type_(type) {
  if (n_layer <= 0 || n_kv <= 0 || head_dim <= 0 || ctx <= 0)
    throw Error("KV cache: layers, heads, head size and context must be positive");
  per_layer_ = 2 * static_cast<int64_t>(n_kv) * head_dim * ctx;
  const uint64_t total = static_cast<uint64_t>(per_layer_) * n_layer * kv_type_size(type);
  try {
    data_.assign(static_cast<size_t>(total), std::byte{0});
  } catch (const std::bad_alloc&) {
    throw Error("KV cache: cannot allocate " + format_bytes(total) + " (" + kv_type_name(type) +
                ") for a context of " + std::to_string(ctx) + " tokens; use a smaller --ctx");
  }
}

void KvCache::wrong_type(KvType want) const {
  throw Error(std::string("KV cache: asked for ") + kv_type_name(want) + " keys/values of an " +
              kv_type_name(type_) + " cache");
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
  n_past_ = n;
}

}  // namespace ms
