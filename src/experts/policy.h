// Expert cache policies: which experts stay in the VRAM slots of one pool.
// All policies share this interface and the same rules, so they can be
// compared fairly against each other and against Belady's MIN:
//   - A layer step needs a working set of distinct experts at once. Experts
//     of the working set are never evicted during that step (they are in use).
//   - A miss may be bypassed: the expert is computed without being kept (on
//     the CPU, or streamed into a scratch slot). Policies decide admission.
//   - Capacity is counted in slots of one size (a pool holds one slot class).
//   - Deterministic: no randomness, ties broken by key.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "experts/access.h"

namespace ms {

struct AccessResult {
  std::vector<ExpertKey> hits;      // needed and resident
  std::vector<ExpertKey> misses;    // needed and not resident
  std::vector<ExpertKey> admitted;  // misses now resident (must be copied in)
  std::vector<ExpertKey> evicted;   // resident before, dropped to make room
  void clear() { hits.clear(); misses.clear(); admitted.clear(); evicted.clear(); }
};

class CachePolicy {
 public:
  explicit CachePolicy(size_t capacity) : capacity_(capacity) {}
  virtual ~CachePolicy() = default;
  virtual std::string name() const = 0;

  // One layer step at forward pass `step`: `keys` are the distinct experts it
  // needs, sorted ascending; `uses[i]` how many tokens chose keys[i]. Fills
  // `out` (cleared first).
  void access(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses, AccessResult& out) {
    access(step, keys, uses, keys, out);
  }
  // The same, where the statistics (recency, scores) count `keys` and `uses`
  // only, while `protect` (sorted, holding every key of `keys`) is the step's
  // whole working set: none of it is evicted. `out` covers `keys` only.
  virtual void access(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses,
                      std::span<const ExpertKey> protect, AccessResult& out) = 0;
  // A speculative verify's layer step (issue #42): of uses[i], certain[i]
  // tokens are certain (the token fed), the rest drafts that may be rejected.
  // The statistics count the certain uses only, and an expert only drafts
  // chose is served as it is (a hit when resident, else a miss the caller
  // bypasses): never admitted on their account, never evicting for it, but
  // protected in this step like the rest. Empty `certain`: every use is
  // certain (access()). Throws ms::Error when certain[i] > uses[i] or the
  // sizes differ.
  void access_speculative(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses,
                          std::span<const uint32_t> certain, AccessResult& out);
  // Adds uses that access_speculative() left out -- drafts accepted once the
  // verify is sampled -- to the statistics as uses at `step` (the verify's),
  // as if they had been certain then. Admits and evicts nothing (the step
  // is over). Rejected drafts are never credited, so their routes teach the
  // policy nothing. `keys` sorted ascending, `uses` per key (empty: 1 each).
  virtual void credit(uint64_t step, std::span<const ExpertKey> keys, std::span<const uint32_t> uses) = 0;
  // Offers an expert predicted to be needed soon (with confidence 0..1). The
  // policy may refuse. Never evicts a key of `protect` (sorted ascending).
  // Returns whether it is now resident; a victim is appended to `evicted`.
  virtual bool prefetch(uint64_t step, ExpertKey key, float confidence, std::span<const ExpertKey> protect,
                        std::vector<ExpertKey>& evicted) = 0;
  // Finishes bookkeeping that access() deferred because no decision of that
  // step depends on it (the adaptive policy's other shadow caches), so a
  // caller can run it after acting on the decisions. Optional: access() and
  // prefetch() settle first themselves; a policy's decisions are the same
  // whether or when settle() is called.
  virtual void settle() {}
  // While off, access() still counts its hits and misses (recency, scores)
  // but admits nothing: every miss is bypassed. The hybrid step turns it off
  // for a layer step the GPU already ran from staging slots, when the cache
  // slots may be in use and must not change.
  virtual void set_admission(bool on) { admit_ = on; }
  virtual bool contains(ExpertKey key) const = 0;
  virtual size_t size() const = 0;
  virtual std::vector<ExpertKey> resident() const = 0;  // sorted ascending
  size_t capacity() const { return capacity_; }

 protected:
  size_t capacity_;
  bool admit_ = true;

 private:
  std::vector<ExpertKey> spec_keys_, spec_drafts_only_;  // access_speculative's split (kept: no allocation per step)
  std::vector<uint32_t> spec_uses_;
};

inline bool in_sorted(std::span<const ExpertKey> keys, ExpertKey k) {
  // Working sets are small (k experts, a prompt batch at most n_expert): a
  // binary search keeps it O(log n) either way.
  size_t lo = 0, hi = keys.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (keys[mid] < k) lo = mid + 1;
    else hi = mid;
  }
  return lo < keys.size() && keys[lo] == k;
}

// Tuning of the policies (defaults chosen by measurement: bench/results/policy_sim.md).
struct PolicyOptions {
  double slru_protected_fraction = 0.8;  // SLRU: share of slots for the protected segment
  double decay_halflife_steps = 2048;    // lfu-decay: score halves every this many forward passes (0 = never)
  double admit_margin = 0.0;             // lfu-decay: newcomer's score must exceed victim's by this ratio
  // Pinning (policy "pinned+<dynamic>"): keys pinned in this pool, hottest
  // first; they take slots from the pool and are never evicted.
  std::vector<ExpertKey> pinned;
  double pin_fraction = 0.5;  // at most this share of a pool's slots is pinned
  uint32_t n_keys = 0;  // size of the key space (n_layer * n_expert)
};

// Policy names: lru, slru, lfu, lfu-decay, adaptive, layers (fixed whole
// layers), pinned+lru, pinned+slru, pinned+lfu-decay, pinned+adaptive,
// default (see default_policy_name()).
std::unique_ptr<CachePolicy> make_policy(const std::string& name, size_t capacity, const PolicyOptions& opts);
std::vector<std::string> policy_names();        // every name make_policy accepts (without "default")
const char* default_policy_name();
// The engine's policy for "default" (tiered experts on a GPU), chosen by
// measured tokens/s, not hit rate: "layers" without a profile (whole layers
// in VRAM run with no host round trip: faster on a uniform router), "adaptive"
// with one (the profile says which experts are hot: a skewed router's hot
// experts in VRAM, wherever their layer: faster at skew 1.0). Figures:
// bench/results/hybrid_bench.md, "Run 5" and "Figures moved from code comments".
const char* engine_default_policy(bool have_profile);

}  // namespace ms
