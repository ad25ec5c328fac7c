// The physical floor of decode at a VRAM budget: how fast a token could be if
// every byte it reads moved at the full rate of the memory or link it comes
// through, with the three tiers of experts working in parallel. `bench`
// reports tokens/s beside it, so a budget's gap to its own limit is seen
// apart from the gap the budget itself costs.
//
//   seconds per token = max( GPU bytes      / HBM bandwidth (gpu_gbps),
//                            streamed bytes / measured H2D bandwidth (pcie_gbps),
//                            CPU bytes      / measured CPU expert bandwidth (cpu_gbps),
//                            (streamed + CPU bytes) / host memory bandwidth (host_gbps) )
//   floor tok/s       = 1 / seconds per token
//
// The fourth term: every cold expert is read from host memory once per
// token, by the copy engine's DMA or by the CPU, and the two share that
// memory's bandwidth. On the GPU machine pinned H2D copies and the CPU's
// reads together reached well below the sum of their rates alone
// (bench/cuda/host_contention_bench.cu; bench/results/hybrid_bench.md, "Run
// 13", "Host memory is one limit for the copy engine and the CPU"), so the
// PCIe and CPU terms cannot both be met at once. host_gbps 0 (not measured)
// leaves the term out.
//
// GPU bytes are the dense active bytes (attention, norms, router, shared
// experts, output head) plus the resident experts a token routes to; streamed
// and CPU bytes are the experts it routes to in those tiers. The HBM read of
// a streamed expert after its copy is left out: it overlaps the copy and HBM
// is over an order of magnitude faster than PCIe, so it never decides the max.
#pragma once
#include <optional>
#include <string>

#include "experts/telemetry.h"

namespace ms {

// Bytes one decode token reads, per tier.
struct DecodeBytes {
  double gpu = 0, streamed = 0, cpu = 0;
};

// GB/s (1e9 bytes per second) of each path, as the telemetry carries them.
struct TierRates {
  double gpu_gbps = 0, pcie_gbps = 0, cpu_gbps = 0;
  double host_gbps = 0;  // host memory read, DMA and CPU together (0: unknown, the term is left out)
};

struct DecodeFloor {
  double gpu_s = 0, pcie_s = 0, cpu_s = 0, host_s = 0;  // each term of the max
  double seconds() const;
  // 0 when a tier with bytes has no measured rate (the floor is unknown).
  double tokens_per_s() const;
  // Which term sets the floor: "hbm", "pcie", "cpu" or "host memory".
  std::string bound() const;
};

DecodeFloor decode_floor(const DecodeBytes& bytes, const TierRates& rates);

// The floor of the decode tokens the telemetry counted: experts per token in
// each tier x `expert_bytes` (one routed expert, averaged over MoE layers),
// plus `dense_bytes` on the GPU; rates from the telemetry, with `gpu_gbps`
// instead of its own when > 0 (bench --bandwidth). nullopt when the run was
// not hybrid (every expert resident: the all-resident floor applies) or
// counted no decode token.
std::optional<DecodeFloor> telemetry_floor(const ExpertTelemetry& t, double dense_bytes, double expert_bytes,
                                           double gpu_gbps = 0);

}  // namespace ms
