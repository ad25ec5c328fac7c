// Prefetch planning: given experts predicted for the coming layers (with a
// confidence each), the copies to issue now, most urgent first, under a byte
// cap (what PCIe can carry before they are needed), never evicting an expert
// of the current working set.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "experts/access.h"
#include "experts/policy.h"

namespace ms {

struct PrefetchCandidate {
  ExpertKey key = 0;
  float confidence = 1;   // 0..1: share of tokens predicted to need it
  uint32_t distance = 1;  // layers ahead (1 = the next MoE layer)
};

struct PrefetchPlan {
  std::vector<ExpertKey> copies;   // in issue order
  std::vector<ExpertKey> evicted;  // made room for them (never in the working set)
  uint64_t bytes = 0;
};

// Orders candidates by (distance, -confidence, key), skips resident ones and
// those below `min_confidence`, and offers each to `cache` (which may refuse,
// e.g. by hysteresis) while the byte cap allows. Keys copied earlier in the
// same plan are protected too. `working_set` sorted ascending.
PrefetchPlan plan_prefetch(uint64_t step, std::span<const PrefetchCandidate> candidates, CachePolicy& cache,
                           std::span<const ExpertKey> working_set, uint64_t byte_cap,
                           const std::function<uint64_t(ExpertKey)>& bytes_of, float min_confidence = 0.0f);

// Decode (`--prefetch auto`): how many of a coming layer's `cold` predicted
// experts to stage now. From now on the link carries what is already queued
// (`backlog_s`), then the staged copies; the layer's routes arrive `gap_s`
// from now, and its cold experts not staged run on the CPU from `overhead_s`
// after that. Link and CPU finish together when s experts are staged:
//   backlog + s * copy = gap + overhead + (cold - s) * cpu.
// (With gap and backlog 0 this is the split within one layer step.)
// Rounded, and within [0, cold].
uint32_t decode_stage_count(uint32_t cold, double gap_s, double backlog_s, double overhead_s, double copy_s,
                            double cpu_s);

}  // namespace ms
