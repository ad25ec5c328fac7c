// An access profile: how often each (layer, expert) was used. Written from a
// trace (`moestream trace profile`) or by the engine after any run, and read
// back to pin the hottest experts (`--profile FILE`). JSON:
//   {"format": "moestream-profile", "version": 1, "model": "...",
//    "n_layer": 48, "n_expert": 128, "counts": [[...n_expert counts...], ... n_layer rows]}
// Rows of dense layers are all zero.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experts/access.h"
#include "experts/trace.h"

namespace ms {

struct ExpertProfile {
  std::string model;
  uint32_t n_layer = 0, n_expert = 0;
  std::vector<uint64_t> counts;  // [layer * n_expert + expert]: tokens routed to it

  static ExpertProfile from_trace(const Trace& trace);
  std::string to_json() const;
  static ExpertProfile from_json(const std::string& text, const std::string& name);  // throws ms::Error
  void save(const std::string& path) const;
  static ExpertProfile load(const std::string& path);

  // Keys by count, hottest first (ties: lower key), at most `n`, zero counts left out.
  std::vector<ExpertKey> hottest(size_t n) const;
};

// Keys of all experts of the given layers (e.g. first and last).
std::vector<ExpertKey> layer_keys(const std::vector<uint32_t>& layers, uint32_t n_expert);

}  // namespace ms
