// make_policy: policy names to implementations.
#include "experts/policy.h"

#include <algorithm>

#include "experts/policy_impl.h"
#include "util/error.h"

namespace ms {

// Chosen by measurement on synthetic skewed and uniform traces
// (bench/results/policy_sim.md, tools/policy_sweep.sh).
const char* default_policy_name() { return "adaptive"; }

void CachePolicy::access_speculative(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses,
                                     std::span<const uint32_t> certain, AccessResult& out) {
  if (certain.empty()) return access(step, keys, uses, keys, out);
  if (certain.size() != keys.size() || (!uses.empty() && uses.size() != keys.size()))
    throw Error("CachePolicy::access_speculative: " + std::to_string(keys.size()) + " keys, " +
                std::to_string(uses.size()) + " use counts and " + std::to_string(certain.size()) + " certain counts");
  spec_keys_.clear();
  spec_uses_.clear();
  spec_drafts_only_.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t u = uses.empty() ? 1 : uses[i];
    if (certain[i] > u)
      throw Error("CachePolicy::access_speculative: expert " + std::to_string(keys[i]) + " has " +
                  std::to_string(certain[i]) + " certain uses of " + std::to_string(u));
    if (certain[i] > 0) spec_keys_.push_back(keys[i]), spec_uses_.push_back(certain[i]);
    else spec_drafts_only_.push_back(keys[i]);
  }
  access(step, spec_keys_, spec_uses_, keys, out);
  if (spec_drafts_only_.empty()) return;
  for (ExpertKey k : spec_drafts_only_) (contains(k) ? out.hits : out.misses).push_back(k);
  std::sort(out.hits.begin(), out.hits.end());
  std::sort(out.misses.begin(), out.misses.end());
}

const char* engine_default_policy(bool have_profile) { return have_profile ? "adaptive" : "layers"; }

std::vector<std::string> policy_names() {
  return {"lru", "slru", "lfu", "lfu-decay", "adaptive", "layers", "layers-first",
          "pinned+lru", "pinned+slru", "pinned+lfu-decay", "pinned+adaptive"};
}

namespace {
std::unique_ptr<CachePolicy> make_dynamic(const std::string& name, size_t capacity, const PolicyOptions& opts) {
  if (name == "lru") return make_lru(capacity, opts);
  if (name == "slru") return make_slru(capacity, opts);
  if (name == "lfu") return make_lfu_decay(capacity, opts, 0.0, opts.admit_margin);
  if (name == "lfu-decay") return make_lfu_decay(capacity, opts, opts.decay_halflife_steps, opts.admit_margin);
  if (name == "adaptive") return make_adaptive(capacity, opts);
  if (name == "layers" || name == "layers-first") return make_layers(capacity, opts, name);
  return nullptr;
}
}  // namespace

std::unique_ptr<CachePolicy> make_policy(const std::string& name_in, size_t capacity, const PolicyOptions& opts) {
  if (opts.n_keys == 0) throw Error("make_policy: PolicyOptions::n_keys (n_layer * n_expert) must be set");
  const std::string name = name_in == "default" ? default_policy_name() : name_in;
  if (name.rfind("pinned+", 0) == 0) {
    std::vector<ExpertKey> pinned;
    const size_t budget = std::min(capacity, size_t(std::max(0.0, opts.pin_fraction) * double(capacity)));
    for (ExpertKey k : opts.pinned)  // hottest first: keep the first ones
      if (pinned.size() < budget && std::find(pinned.begin(), pinned.end(), k) == pinned.end()) pinned.push_back(k);
    for (ExpertKey k : pinned)
      if (k >= opts.n_keys) throw Error("pinned expert key " + std::to_string(k) + " is outside the model");
    auto dynamic = make_dynamic(name.substr(7), capacity - pinned.size(), opts);
    if (!dynamic) throw Error("unknown policy '" + name_in + "' after 'pinned+' (use lru, slru, lfu, lfu-decay or adaptive)");
    return make_pinned(capacity, std::move(pinned), opts.n_keys, std::move(dynamic));
  }
  auto p = make_dynamic(name, capacity, opts);
  if (!p) {
    std::string list;
    for (const auto& n : policy_names()) list += n + ", ";
    throw Error("unknown policy '" + name_in + "' (choose one of: " + list + "default, all)");
  }
  return p;
}

}  // namespace ms
