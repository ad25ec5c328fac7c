#include "experts/pools.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "util/bytes.h"
#include "util/error.h"

namespace ms {

std::string CapacitySpec::describe() const {
  char buf[64];
  switch (kind) {
    case Kind::Bytes: return format_bytes(uint64_t(value));
    case Kind::Slots: std::snprintf(buf, sizeof buf, "%.0f slots", value); return buf;
    case Kind::Fraction: std::snprintf(buf, sizeof buf, "%g%% of experts", value * 100); return buf;
  }
  return "?";
}

size_t PoolLayout::total_slots() const {
  size_t n = 0;
  for (const Pool& p : pools) n += p.slots;
  return n;
}

uint64_t PoolLayout::total_bytes() const {
  uint64_t n = 0;
  for (const Pool& p : pools) n += p.slots * p.slot_bytes;
  return n;
}

namespace {
// Splits `total` units among groups by `weight` (largest remainder), each
// capped at `cap`.
std::vector<size_t> apportion(size_t total, const std::vector<double>& weight, const std::vector<size_t>& cap) {
  const size_t n = weight.size();
  std::vector<size_t> out(n, 0);
  double wsum = 0;
  for (double w : weight) wsum += w;
  if (wsum <= 0) return out;
  std::vector<std::pair<double, size_t>> rem;
  size_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = double(total) * weight[i] / wsum;
    out[i] = std::min(cap[i], size_t(std::floor(exact)));
    given += out[i];
    rem.push_back({-(exact - std::floor(exact)), i});
  }
  std::sort(rem.begin(), rem.end());
  for (size_t r = 0; given < total && r < rem.size() * 2; ++r) {
    const size_t i = rem[r % rem.size()].second;
    if (out[i] < cap[i]) ++out[i], ++given;
  }
  return out;
}
}  // namespace

PoolLayout make_pool_layout(const TraceHeader& h, const CapacitySpec& c) {
  PoolLayout layout;
  layout.pool_of_layer.assign(h.n_layer, -1);
  std::map<uint64_t, size_t> class_of_size;
  for (uint32_t l = 0; l < h.n_layer; ++l) {
    if (!h.is_moe_layer(l)) continue;
    size_t pool;
    if (c.per_layer) {
      pool = layout.pools.size();
      layout.pools.push_back({h.expert_bytes[l], 0, {}});
    } else {
      auto [it, fresh] = class_of_size.try_emplace(h.expert_bytes[l], layout.pools.size());
      if (fresh) layout.pools.push_back({h.expert_bytes[l], 0, {}});
      pool = it->second;
    }
    layout.pools[pool].layers.push_back(l);
    layout.pool_of_layer[l] = int32_t(pool);
  }
  const size_t n = layout.pools.size();
  std::vector<size_t> cap(n);
  std::vector<double> experts(n), bytes(n);
  size_t all_experts = 0;
  for (size_t p = 0; p < n; ++p) {
    cap[p] = layout.pools[p].layers.size() * h.n_expert;
    experts[p] = double(cap[p]);
    bytes[p] = double(cap[p]) * double(layout.pools[p].slot_bytes);
    all_experts += cap[p];
  }
  std::vector<size_t> slots;
  switch (c.kind) {
    case CapacitySpec::Kind::Bytes: {
      if (!(c.value >= 0)) throw Error("expert VRAM budget must be >= 0");
      const double budget = c.value - double(c.dense_bytes);
      if (budget < 0)
        throw Error("the VRAM budget " + format_bytes(uint64_t(c.value)) + " is smaller than the dense bytes " +
                    format_bytes(c.dense_bytes) + " (give a larger --vram or smaller --dense-bytes)");
      double total_bytes = 0;
      for (double b : bytes) total_bytes += b;
      slots.resize(n);
      uint64_t used = 0;
      for (size_t p = 0; p < n; ++p) {
        slots[p] = std::min(cap[p], size_t(budget * bytes[p] / total_bytes / double(layout.pools[p].slot_bytes)));
        used += slots[p] * layout.pools[p].slot_bytes;
      }
      // Bytes left by rounding down: one more slot where it still fits.
      for (bool more = true; more;) {
        more = false;
        for (size_t p = 0; p < n; ++p)
          if (slots[p] < cap[p] && double(used + layout.pools[p].slot_bytes) <= budget) {
            ++slots[p];
            used += layout.pools[p].slot_bytes;
            more = true;
          }
      }
      break;
    }
    case CapacitySpec::Kind::Slots:
    case CapacitySpec::Kind::Fraction: {
      double total = c.value;
      if (c.kind == CapacitySpec::Kind::Fraction) {
        if (!(c.value >= 0 && c.value <= 1)) throw Error("--slots-fraction must be in 0..1");
        total = std::round(c.value * double(all_experts));
      }
      if (!(total >= 0)) throw Error("slot count must be >= 0");
      slots = apportion(std::min(size_t(total), all_experts), experts, cap);
      break;
    }
  }
  for (size_t p = 0; p < n; ++p) layout.pools[p].slots = slots[p];
  return layout;
}

PooledCache::PooledCache(const PoolLayout& layout, uint32_t n_expert, const std::string& policy,
                         const PolicyOptions& opts)
    : CachePolicy(layout.total_slots()), pool_of_layer_(layout.pool_of_layer), n_expert_(n_expert) {
  local_layer_.assign(pool_of_layer_.size(), 0);
  for (size_t p = 0; p < layout.pools.size(); ++p) {
    // Layers are listed in increasing order, so local keys sort like global ones.
    layers_of_pool_.push_back(layout.pools[p].layers);
    for (size_t i = 0; i < layout.pools[p].layers.size(); ++i) local_layer_[layout.pools[p].layers[i]] = uint32_t(i);
    PolicyOptions o = opts;
    o.n_keys = uint32_t(layout.pools[p].layers.size()) * n_expert;
    o.pinned.clear();
    for (ExpertKey k : opts.pinned) {
      const uint32_t layer = k / n_expert;
      if (layer >= pool_of_layer_.size() || pool_of_layer_[layer] != int32_t(p)) continue;
      const ExpertKey local = to_local(k);
      if (std::find(o.pinned.begin(), o.pinned.end(), local) == o.pinned.end()) o.pinned.push_back(local);
    }
    pools_.push_back(make_policy(policy, layout.pools[p].slots, o));
  }
  name_ = pools_.empty() ? policy : pools_.front()->name();
}

size_t PooledCache::pool_index(ExpertKey key) const {
  const uint32_t layer = key / n_expert_;
  if (layer >= pool_of_layer_.size() || pool_of_layer_[layer] < 0)
    throw Error("expert of layer " + std::to_string(layer) + " has no pool (a dense layer?)");
  return size_t(pool_of_layer_[layer]);
}

size_t PooledCache::to_local(std::span<const ExpertKey> keys, std::vector<ExpertKey>& local, const char* what) const {
  const size_t p = pool_index(keys.front());
  local.clear();
  for (ExpertKey k : keys) {
    if (pool_index(k) != p) throw Error(std::string("PooledCache::") + what + ": one call must hold experts of one pool");
    local.push_back(to_local(k));
  }
  return p;
}

void PooledCache::access(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses,
                         std::span<const ExpertKey> protect, AccessResult& out) {
  out.clear();
  if (protect.empty()) return;
  // keys may be empty (a speculative step whose experts only drafts chose);
  // protect holds them all.
  const size_t p = to_local(protect, local_protect_, "access");
  local_keys_.clear();
  for (ExpertKey k : keys) {
    if (pool_index(k) != p) throw Error("PooledCache::access: one access must hold experts of one pool");
    local_keys_.push_back(to_local(k));
  }
  pools_[p]->access(step, local_keys_, uses, local_protect_, out);
  to_global(p, out.hits);
  to_global(p, out.misses);
  to_global(p, out.admitted);
  to_global(p, out.evicted);
}

void PooledCache::credit(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses) {
  if (keys.empty()) return;
  const size_t p = to_local(keys, local_keys_, "credit");
  pools_[p]->credit(step, local_keys_, uses);
}

void PooledCache::settle() {
  for (auto& p : pools_) p->settle();
}

void PooledCache::set_admission(bool on) {
  admit_ = on;
  for (auto& p : pools_) p->set_admission(on);
}

bool PooledCache::prefetch(uint64_t step, ExpertKey key, float confidence, std::span<const ExpertKey> protect,
                           std::vector<ExpertKey>& evicted) {
  const size_t p = pool_index(key);
  // Only protected keys of the same pool matter; they stay sorted when made local.
  local_protect_.clear();
  for (ExpertKey k : protect)
    if (k / n_expert_ < pool_of_layer_.size() && pool_of_layer_[k / n_expert_] == int32_t(p))
      local_protect_.push_back(to_local(k));
  const size_t before = evicted.size();
  const bool in = pools_[p]->prefetch(step, to_local(key), confidence, local_protect_, evicted);
  for (size_t i = before; i < evicted.size(); ++i) evicted[i] = to_global(p, evicted[i]);
  return in;
}

bool PooledCache::contains(ExpertKey key) const { return pools_[pool_index(key)]->contains(to_local(key)); }

size_t PooledCache::size() const {
  size_t n = 0;
  for (const auto& p : pools_) n += p->size();
  return n;
}

std::vector<ExpertKey> PooledCache::resident() const {
  std::vector<ExpertKey> v;
  for (size_t p = 0; p < pools_.size(); ++p) {
    for (ExpertKey k : pools_[p]->resident()) v.push_back(to_global(p, k));
  }
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace ms
