#include "experts/telemetry.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "util/bytes.h"

namespace ms {

TierCounts ExpertTelemetry::all() const {
  TierCounts t;
  for (const TierCounts& l : layers) {
    t.resident += l.resident;
    t.streamed += l.streamed;
    t.host += l.host;
  }
  return t;
}

std::string ExpertTelemetry::summary() const {
  if (!hybrid) return "";
  std::string s;
  char buf[512];
  const TierCounts a = all();
  std::snprintf(buf, sizeof buf,
                "experts: budget %s, pool %s = %llu cache slots (%.1f%% of %llu experts) + %llu transit; policy %s; "
                "host %s\n",
                format_bytes(budget_bytes).c_str(), format_bytes(pool_bytes).c_str(), (unsigned long long)cache_slots,
                experts_total ? 100.0 * double(cache_slots) / double(experts_total) : 0.0,
                (unsigned long long)experts_total, (unsigned long long)transit_slots, policy.c_str(),
                host_pin.c_str());
  s += buf;
  std::snprintf(buf, sizeof buf, "experts: measured PCIe %.1f GB/s, CPU experts %.1f GB/s, GPU %.0f GB/s", pcie_gbps,
                cpu_gbps, gpu_gbps);
  s += buf;
  if (host_gbps > 0) {
    std::snprintf(buf, sizeof buf, ", host memory %.1f GB/s", host_gbps);
    s += buf;
  }
  s += "\n";
  std::snprintf(buf, sizeof buf,
                "experts: pairs resident %.1f%% / streamed %.1f%% / CPU %.1f%% (hit rate %.1f%%); admitted %llu, "
                "evicted %llu\n",
                a.total() ? 100.0 * a.resident / a.total() : 0.0, a.total() ? 100.0 * a.streamed / a.total() : 0.0,
                a.total() ? 100.0 * a.host / a.total() : 0.0, 100.0 * a.hit_rate(), (unsigned long long)admitted,
                (unsigned long long)evicted);
  s += buf;
  if (decode_tokens > 0) {
    const double n = double(decode_tokens);
    std::snprintf(buf, sizeof buf, "experts: per decode token %.1f resident, %.1f streamed, %.1f on the CPU\n",
                  decode.resident / n, decode.streamed / n, decode.host / n);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "experts: H2D %s (%llu experts), %.1f GB/s while the copy stream was busy\n",
                format_bytes(h2d_bytes).c_str(), (unsigned long long)h2d_copies, h2d_gbps());
  s += buf;
  const double per = tokens ? 1e3 / double(tokens) : 0.0;
  std::snprintf(buf, sizeof buf,
                "experts: ms per token: forward %.3f = waiting for routes %.3f (attention, router, read-back) + "
                "planning %.3f + CPU experts %.3f + rest; GPU expert phase %.3f\n",
                total_s * per, route_wait_s * per, plan_s * per, cpu_experts_s * per, gpu_experts_s * per);
  s += buf;
  if (prefetch.layer_steps > 0) {
    std::snprintf(buf, sizeof buf,
                  "experts: prefetch %s: prediction precision %.1f%%, recall %.1f%%; %llu staged (%s), %.1f%% of them "
                  "used (%llu admitted to the cache from there), covering %.1f%% of cold experts\n",
                  prefetch_mode.c_str(), 100.0 * prefetch.precision(), 100.0 * prefetch.recall(),
                  (unsigned long long)prefetch.staged, format_bytes(stage_bytes).c_str(),
                  100.0 * prefetch.staged_precision(), (unsigned long long)prefetch.staged_admitted,
                  100.0 * prefetch.cold_covered());
    s += buf;
  } else if (prefetch_mode == "off") {
    s += "experts: prefetch off\n";
  } else if (!prefetch_mode.empty()) {
    s += "experts: prefetch " + prefetch_mode + ": no predictions made (decode steps with two tiered layers make them)\n";
  }
  if (gated_hits + gated_misses > 0) {
    std::snprintf(buf, sizeof buf,
                  "experts: gated decode: %.1f%% of %llu tiered layer steps had every expert resident (%.1f%% with "
                  "some in staging slots) and ran with no host round trip\n",
                  100.0 * double(gated_hits) / double(gated_hits + gated_misses),
                  (unsigned long long)(gated_hits + gated_misses),
                  100.0 * double(gated_staged_hits) / double(gated_hits + gated_misses));
    s += buf;
  }
  std::string hit = "experts: hit rate per layer:";
  for (size_t l = 0; l < layers.size(); ++l) {
    if (!layers[l].total()) continue;
    std::snprintf(buf, sizeof buf, " %zu:%.0f%%", l, 100.0 * layers[l].hit_rate());
    hit += buf;
  }
  return s + hit + "\n";
}

nlohmann::json ExpertTelemetry::to_json() const {
  nlohmann::json j;
  j["hybrid"] = hybrid;
  if (!hybrid) return j;
  const TierCounts a = all();
  auto counts = [](const TierCounts& t) {
    return nlohmann::json{{"resident", t.resident}, {"streamed", t.streamed}, {"host", t.host},
                          {"hit_rate", t.hit_rate()}};
  };
  nlohmann::json per_layer = nlohmann::json::array();
  for (const TierCounts& l : layers) per_layer.push_back(counts(l));
  j["policy"] = policy;
  j["host_pin"] = host_pin;
  j["budget_bytes"] = budget_bytes;
  j["pool_bytes"] = pool_bytes;
  j["cache_slots"] = cache_slots;
  j["transit_slots"] = transit_slots;
  j["experts_total"] = experts_total;
  j["measured"] = {{"pcie_gbps", pcie_gbps}, {"cpu_gbps", cpu_gbps}, {"host_gbps", host_gbps}, {"gpu_gbps", gpu_gbps}};
  j["passes"] = passes;
  j["tokens"] = tokens;
  j["decode_tokens"] = decode_tokens;
  j["pairs"] = counts(a);
  j["decode_pairs"] = counts(decode);
  j["layers"] = per_layer;
  j["h2d_bytes"] = h2d_bytes;
  j["h2d_copies"] = h2d_copies;
  j["h2d_gbps"] = h2d_gbps();
  j["admitted"] = admitted;
  j["evicted"] = evicted;
  auto pf = [](const PrefetchCounts& p) {
    return nlohmann::json{{"layer_steps", p.layer_steps}, {"predicted", p.predicted},   {"correct", p.correct},
                          {"routed", p.routed},           {"staged", p.staged},         {"staged_used", p.staged_used},
                          {"cold", p.cold},               {"precision", p.precision()}, {"recall", p.recall()},
                          {"staged_precision", p.staged_precision()}, {"cold_covered", p.cold_covered()},
                          {"staged_admitted", p.staged_admitted}};
  };
  nlohmann::json pf_layers = nlohmann::json::array();
  for (const PrefetchCounts& p : prefetch_layers) pf_layers.push_back(pf(p));
  j["prefetch"] = pf(prefetch);
  j["prefetch"]["mode"] = prefetch_mode;
  j["prefetch"]["stage_bytes"] = stage_bytes;
  j["prefetch"]["layers"] = pf_layers;
  j["gated"] = {{"hits", gated_hits}, {"misses", gated_misses}, {"staged_hits", gated_staged_hits}};
  j["seconds"] = {{"forward", total_s},        {"route_wait", route_wait_s}, {"plan", plan_s},
                  {"cpu_experts", cpu_experts_s}, {"gpu_experts", gpu_experts_s}, {"copy_busy", copy_busy_s}};
  return j;
}

}  // namespace ms
