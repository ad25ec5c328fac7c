// Runs the simulator over capacities x policies x pool layouts and formats the
// results (table, CSV, JSON, SVG chart) for `moestream sim` and scripts.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/simulator.h"

namespace ms {

struct SweepOptions {
  std::vector<CapacitySpec> capacities;  // per_layer of each is overridden by `layouts`
  std::vector<std::string> policies;
  std::vector<bool> layouts{false};      // false: global pools (per slot class), true: per-layer quotas
  SimOptions base;                       // everything else
};

struct SweepRow {
  SimResult result;
  std::string layout;  // "global" | "per-layer"
};

std::vector<SweepRow> run_sweep(const Trace& trace, const SweepOptions& opts);

// "2G,4G" (kind Bytes), "512,1024" (Slots), "0.25,0.5" (Fraction).
std::vector<CapacitySpec> parse_capacity_list(CapacitySpec::Kind kind, const std::string& list, uint64_t dense_bytes);
// "lru,slru", "all" (every policy; pinned ones only when `have_pins`), "default".
std::vector<std::string> parse_policy_list(const std::string& list, bool have_pins);

nlohmann::json sim_result_json(const SimResult& r, const std::string& layout, bool per_layer_detail);
std::string sweep_table(const std::vector<SweepRow>& rows);
std::string sweep_csv(const std::vector<SweepRow>& rows);
std::string layer_table(const SimResult& r);  // per-layer hit rate beside Belady
// Hit rate vs capacity (fraction of experts resident), one line per policy and
// layout, Belady dashed.
std::string sweep_svg(const std::vector<SweepRow>& rows, const std::string& title);

}  // namespace ms
