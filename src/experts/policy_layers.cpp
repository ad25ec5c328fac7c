// "layers" and "layers-first": a fixed set of experts, the cache filled once
// and never changed. The engine fills it with whole layers
// (experts/residency.cpp), so a layer either has every expert in VRAM or
// none: the resident layers then decode like the all-resident model, with
// no host round trip (llama.cpp's --n-cpu-moe placement, with the other
// layers' experts streamed or computed on the CPU). "layers-first" keeps the
// first layers, as --n-cpu-moe does (with the ends swapped); "layers" spreads
// the resident layers evenly over the model, so that the copy link, idle
// while resident layers compute, can stage the next tiered layer's experts
// (prefetch) between any two of them. Without an initial placement (the
// simulator), the first misses are admitted while there is room.
#include "experts/policy_impl.h"

namespace ms {
namespace {

class LayersPolicy final : public CachePolicy {
 public:
  LayersPolicy(size_t capacity, uint32_t n_keys, std::string name)
      : CachePolicy(capacity), in_(n_keys, 0), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  using CachePolicy::access;

  // Evicts nothing, so `protect` changes nothing.
  void access(uint64_t, std::span<const ExpertKey> keys, std::span<const uint32_t>, std::span<const ExpertKey>,
              AccessResult& out) override {
    out.clear();
    for (ExpertKey k : keys) {
      if (in_.at(k)) {
        out.hits.push_back(k);
        continue;
      }
      out.misses.push_back(k);
      if (admit_ && size_ < capacity_) {
        in_[k] = 1;
        ++size_;
        out.admitted.push_back(k);
      }
    }
  }
  void credit(uint64_t, std::span<const ExpertKey>, std::span<const uint32_t>) override {}  // no statistics
  bool prefetch(uint64_t, ExpertKey key, float, std::span<const ExpertKey>, std::vector<ExpertKey>&) override {
    if (in_.at(key)) return true;
    if (size_ >= capacity_) return false;  // never evicts
    in_[key] = 1;
    ++size_;
    return true;
  }
  bool contains(ExpertKey key) const override { return key < in_.size() && in_[key]; }
  size_t size() const override { return size_; }
  std::vector<ExpertKey> resident() const override {
    std::vector<ExpertKey> v;
    for (ExpertKey k = 0; k < in_.size(); ++k)
      if (in_[k]) v.push_back(k);
    return v;
  }

 private:
  std::vector<uint8_t> in_;
  size_t size_ = 0;
  std::string name_;
};

}  // namespace

std::unique_ptr<CachePolicy> make_layers(size_t capacity, const PolicyOptions& opts, const std::string& name) {
  return std::make_unique<LayersPolicy>(capacity, opts.n_keys, name);
}

}  // namespace ms
