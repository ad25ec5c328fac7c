#include "experts/prefetch.h"

#include <algorithm>
#include <cmath>

namespace ms {

uint32_t decode_stage_count(uint32_t cold, double gap_s, double backlog_s, double overhead_s, double copy_s,
                            double cpu_s) {
  if (cold == 0 || copy_s + cpu_s <= 0) return 0;
  const double s = std::round((gap_s + overhead_s + double(cold) * cpu_s - backlog_s) / (copy_s + cpu_s));
  return static_cast<uint32_t>(std::clamp(s, 0.0, double(cold)));
}

}  // namespace ms
