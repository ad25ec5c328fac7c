#include "util/process_memory.h"

#include <cstdio>
#include <cstring>

namespace ms {

HostMemory host_memory() {
  HostMemory m;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long kib = 0;
    auto field = [&](const char* key, uint64_t& out) {
      const size_t n = std::strlen(key);
      if (std::strncmp(line, key, n) == 0 && std::sscanf(line + n, " %llu", &kib) == 1) out = kib * 1024ull;
    };
    field("VmRSS:", m.rss);
    field("RssAnon:", m.rss_anon);
    field("RssFile:", m.rss_file);
    field("VmHWM:", m.peak);
  }
  std::fclose(f);
  return m;
}

bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace ms
