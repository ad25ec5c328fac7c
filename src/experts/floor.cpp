#include "experts/floor.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ms {
namespace {

// Seconds to move `bytes` at `gbps`; infinite when there are bytes but no rate.
double term(double bytes, double gbps) {
  if (bytes <= 0) return 0;
  if (gbps <= 0) return std::numeric_limits<double>::infinity();
  return bytes / (gbps * 1e9);
}

}  // namespace

double DecodeFloor::seconds() const { return std::max({gpu_s, pcie_s, cpu_s, host_s}); }

double DecodeFloor::tokens_per_s() const {
  const double s = seconds();
  return s > 0 && std::isfinite(s) ? 1.0 / s : 0.0;
}

std::string DecodeFloor::bound() const {
  if (host_s > 0 && host_s >= std::max({gpu_s, pcie_s, cpu_s})) return "host memory";
  if (pcie_s >= gpu_s && pcie_s >= cpu_s && pcie_s > 0) return "pcie";
  if (cpu_s >= gpu_s && cpu_s > 0) return "cpu";
  return "hbm";
}

DecodeFloor decode_floor(const DecodeBytes& b, const TierRates& r) {
  DecodeFloor f{term(b.gpu, r.gpu_gbps), term(b.streamed, r.pcie_gbps), term(b.cpu, r.cpu_gbps), 0};
  if (r.host_gbps > 0) f.host_s = term(b.streamed + b.cpu, r.host_gbps);
  return f;
}

std::optional<DecodeFloor> telemetry_floor(const ExpertTelemetry& t, double dense_bytes, double expert_bytes,
                                           double gpu_gbps) {
  if (!t.hybrid || t.decode_tokens == 0) return std::nullopt;
  const double n = double(t.decode_tokens);
  DecodeBytes b;
  b.gpu = dense_bytes + double(t.decode.resident) / n * expert_bytes;
  b.streamed = double(t.decode.streamed) / n * expert_bytes;
  b.cpu = double(t.decode.host) / n * expert_bytes;
  return decode_floor(b, {gpu_gbps > 0 ? gpu_gbps : t.gpu_gbps, t.pcie_gbps, t.cpu_gbps, t.host_gbps});
}

}  // namespace ms
