// This process's host memory as the kernel counts it (/proc/self/status):
// what `bench` states beside each row, so a budget's speed comes with what it
// cost in RAM. Zeros where the file cannot be read (not Linux).
#pragma once
#include <cstdint>

namespace ms {

struct HostMemory {
  uint64_t rss = 0;       // resident now (VmRSS)
  uint64_t rss_anon = 0;  // of which anonymous: heap, pinned buffers, KV (RssAnon)
  uint64_t rss_file = 0;  // of which file pages: the mapped model (RssFile)
  uint64_t peak = 0;      // the process's largest resident set so far (VmHWM)
};

HostMemory host_memory();

// Starts a new peak (VmHWM) from the current resident set (Linux: "5" to
// /proc/self/clear_refs), so that `peak` covers what happened since; false
// where the kernel does not allow it (the peak then is the process's).
bool reset_peak_rss();

}  // namespace ms
