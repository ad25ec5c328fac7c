// Prefetch arithmetic of the step scheduler (experts/step_scheduler.h).
#pragma once
#include <cstdint>

namespace ms {

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
