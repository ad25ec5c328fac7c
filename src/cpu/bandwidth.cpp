#include "cpu/bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace ms {

double measure_read_bandwidth(ThreadPool& pool, uint64_t bytes, int passes) {
  const size_t n = static_cast<size_t>(bytes / sizeof(uint64_t));
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  // Touch every page in parallel, so the pages spread over the NUMA nodes
  // the way the threads that read them sit.
  pool.parallel_for(static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  });
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int p = 0; p <= passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e) {
      // Eight independent sums: lets the compiler use vector loads.
      uint64_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = b;
      for (; i + 8 <= e; i += 8)
        for (int j = 0; j < 8; ++j) s[j] += buf[static_cast<size_t>(i + j)];
      for (; i < e; ++i) s[0] += buf[static_cast<size_t>(i)];
      sink.fetch_add(s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7], std::memory_order_relaxed);
    });
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (p > 0) best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / sec);
  }
  if (sink.load() == 42) std::memset(buf.get(), 0, 8);  // keeps the reads observable
  return best;
}

}  // namespace ms
