// What it costs to compute a routed expert in each tier, from a handful of
// machine figures. The engine fills them from a start-up probe; every figure
// can be overridden (CLI flags, or a JSON file). Times are in seconds.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ms {

struct CostOverrides;

struct CostModel {
  double pcie_gbps = 25;        // pinned host->device copies (PCIe 4 x16 desktop; the GPU machine's: bench/results/hybrid_bench.md, "Run 5", H2D column)
  double cpu_gbps = 40;         // host DRAM read by the CPU expert FFN, all threads
  double gpu_hbm_gbps = 900;    // VRAM read by the GPU expert kernels
  double cpu_gflops = 400;      // CPU arithmetic on batched tokens (weights reused from cache)
  double gpu_tflops = 80;       // GPU arithmetic on batched tokens
  double flops_per_byte = 3.56; // 2 flops per weight x weights per byte of the quant type (q4_K: 2*256/144)
  double copy_overhead_us = 5;  // per host->device copy
  double cpu_overhead_us = 5;   // per expert computed on the CPU (dispatch, sync)
  double gpu_overhead_us = 2;   // per expert on the GPU (grouped launch share)
  // Host time before the first CPU expert of a layer step can start (the
  // engine measures it on prompt passes: planning, enqueueing the GPU's
  // share); added once to a step's CPU time. Not a tunable figure: 0 unless
  // the engine sets it.
  double cpu_start_us = 0;

  // Defaults with flops_per_byte set for a quant type name ("q4_K", "q8_0",
  // "bf16"; unknown names keep the default).
  static CostModel for_quant(const std::string& quant_name);

  // Copying one expert of `bytes` into VRAM.
  double copy_s(uint64_t bytes) const { return copy_overhead_us * 1e-6 + double(bytes) / (pcie_gbps * 1e9); }
  // Computing one expert for `tokens` tokens on the CPU: reading its weights
  // once, or the arithmetic, whichever is longer.
  double cpu_s(uint64_t bytes, uint32_t tokens) const;
  // Same on the GPU from VRAM.
  double gpu_s(uint64_t bytes, uint32_t tokens) const;

  // "pcie_gbps=55,cpu_gbps=92": overrides by name; throws ms::Error on an
  // unknown name or a non-positive value.
  void apply_overrides(const std::string& list);
  void apply(const CostOverrides& overrides);  // the same, parsed
  void apply_json(const nlohmann::json& j);  // same names as keys
  nlohmann::json to_json() const;
  void validate() const;

 private:
  void apply_overrides_unchecked(const std::string& list);
};

// Cost-model figures given by name (`--cost pcie_gbps=20,cpu_gflops=7`),
// parsed once where they enter (the CLI): each replaces the measured or
// default figure of its name wherever a CostModel is made.
struct CostOverrides {
  std::vector<std::pair<double CostModel::*, double>> figures;  // in the order given

  // "name=value,...": throws ms::Error naming the bad item and, for an
  // unknown name, the known ones; a value the model refuses (zero rate,
  // negative overhead, NaN) is an error here too. "" gives none.
  static CostOverrides parse(const std::string& list);
  bool empty() const { return figures.empty(); }
  // Whether the figure is among them.
  bool sets(double CostModel::*figure) const;
  // "pcie_gbps=20,cpu_gflops=7" (round-trips through parse).
  std::string text() const;
};

}  // namespace ms
