// Measures the host's memory read bandwidth with the thread pool: the number
// the decode speed floor is computed from (active bytes per token / bandwidth).
#pragma once
#include <cstdint>

#include "cpu/thread_pool.h"

namespace ms {

// Reads a buffer of `bytes` (default 1 GiB, well beyond the caches) with all
// the pool's threads, `passes` times after one warm-up pass; returns the best
// pass in bytes per second.
double measure_read_bandwidth(ThreadPool& pool, uint64_t bytes = uint64_t{1} << 30, int passes = 3);

}  // namespace ms
