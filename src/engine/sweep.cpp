#include "engine/sweep.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "experts/svg_plot.h"
#include "util/bytes.h"
#include "util/error.h"
#include "util/split.h"

namespace ms {
namespace {

// The items of a comma list, empty ones skipped ("2G,,4G" as "2G,4G").
std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  for (std::string& item : split_list(list))
    if (!item.empty()) out.push_back(std::move(item));
  return out;
}

double parse_number(const std::string& s, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v >= 0)) throw Error(std::string("invalid ") + what + " '" + s + "'");
  return v;
}

}  // namespace

std::vector<CapacitySpec> parse_capacity_list(CapacitySpec::Kind kind, const std::string& list, uint64_t dense_bytes) {
  std::vector<CapacitySpec> out;
  for (const std::string& item : split(list)) {
    CapacitySpec c;
    c.kind = kind;
    c.dense_bytes = dense_bytes;
    switch (kind) {
      case CapacitySpec::Kind::Bytes: c.value = double(parse_bytes(item)); break;
      case CapacitySpec::Kind::Slots: c.value = parse_number(item, "slot count"); break;
      case CapacitySpec::Kind::Fraction:
        c.value = parse_number(item, "slot fraction");
        if (c.value > 1) throw Error("--slots-fraction '" + item + "' must be in 0..1");
        break;
    }
    out.push_back(c);
  }
  if (out.empty()) throw Error("empty capacity list");
  return out;
}

std::vector<std::string> parse_policy_list(const std::string& list, bool have_pins) {
  std::vector<std::string> out;
  for (const std::string& item : split(list)) {
    if (item == "all") {
      for (const std::string& n : policy_names())
        if (have_pins || n.rfind("pinned+", 0) != 0) out.push_back(n);
    } else {
      if (item.rfind("pinned+", 0) == 0 && !have_pins)
        throw Error("policy '" + item + "' pins experts: give --profile FILE and/or --pin-layers LIST");
      out.push_back(item);
    }
  }
  if (out.empty()) throw Error("empty policy list");
  return out;
}

std::vector<SweepRow> run_sweep(const Trace& trace, const SweepOptions& opts) {
  const AccessSequence seq = build_access_sequence(trace);
  std::vector<SweepRow> rows;
  for (const CapacitySpec& cap0 : opts.capacities) {
    for (bool per_layer : opts.layouts) {
      CapacitySpec cap = cap0;
      cap.per_layer = per_layer;
      // Belady depends on capacity and layout only: once for all policies.
      const std::vector<uint64_t> belady = belady_hits_per_layer(seq, make_pool_layout(trace.header, cap));
      for (const std::string& policy : opts.policies) {
        SimOptions o = opts.base;
        o.capacity = cap;
        o.policy = policy;
        o.belady = false;
        SweepRow row{simulate(trace, seq, o), per_layer ? "per-layer" : "global"};
        set_belady(row.result, belady);
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

nlohmann::json sim_result_json(const SimResult& r, const std::string& layout, bool per_layer_detail) {
  nlohmann::json j;
  j["policy"] = r.policy;
  j["pools"] = layout;
  j["capacity"] = r.capacity;
  j["slots"] = r.slots;
  j["slot_bytes"] = r.slot_bytes;
  j["fraction"] = r.fraction;
  j["accesses"] = r.accesses;
  j["hits"] = r.hits;
  j["hit_rate"] = r.hit_rate;
  j["belady_hits"] = r.belady_hits;
  j["belady_hit_rate"] = r.belady_hit_rate;
  j["pcie_bytes"] = r.pcie_bytes;
  j["prefetch_bytes"] = r.prefetch_bytes;
  j["prefetched"] = r.prefetched;
  j["prefetch_used"] = r.prefetch_used;
  j["prompt_staged"] = r.prompt_staged;
  j["experts_staged"] = r.staged;
  j["experts_resident"] = r.resident;
  j["experts_streamed"] = r.streamed;
  j["experts_host"] = r.host_computed;
  j["time_s"] = r.time_s;
  j["prompt_time_s"] = r.prompt_time_s;
  j["decode_time_s"] = r.decode_time_s;
  j["prompt_tokens"] = r.prompt_tokens;
  j["decode_tokens"] = r.decode_tokens;
  j["decode_tokens_per_s"] = r.decode_tokens_per_s();
  if (per_layer_detail) {
    j["layers"] = nlohmann::json::array();
    for (const LayerSimStats& l : r.layers) {
      j["layers"].push_back({{"layer", l.layer},
                             {"accesses", l.accesses},
                             {"hit_rate", l.accesses ? double(l.hits) / double(l.accesses) : 0.0},
                             {"belady_hit_rate", l.accesses ? double(l.belady_hits) / double(l.accesses) : 0.0}});
    }
  }
  return j;
}

std::string sweep_table(const std::vector<SweepRow>& rows) {
  std::string out;
  char buf[320];
  std::snprintf(buf, sizeof buf, "%-18s %-9s %7s %6s  %-28s %8s %8s %6s %10s %9s %9s %9s %10s\n", "capacity", "pools",
                "slots", "frac", "policy", "hit", "belady", "gap", "PCIe", "streamed", "host", "time s", "decode t/s");
  out += buf;
  for (const SweepRow& row : rows) {
    const SimResult& r = row.result;
    std::snprintf(buf, sizeof buf, "%-18s %-9s %7zu %5.1f%%  %-28s %7.2f%% %7.2f%% %6.2f %10s %9llu %9llu %9.3f %10.1f\n",
                  r.capacity.c_str(), row.layout.c_str(), r.slots, 100 * r.fraction, r.policy.c_str(),
                  100 * r.hit_rate, 100 * r.belady_hit_rate, 100 * (r.belady_hit_rate - r.hit_rate),
                  format_bytes(r.pcie_bytes).c_str(), (unsigned long long)r.streamed,
                  (unsigned long long)r.host_computed, r.time_s, r.decode_tokens_per_s());
    out += buf;
  }
  return out;
}

std::string sweep_csv(const std::vector<SweepRow>& rows) {
  std::string out =
      "capacity,pools,slots,slot_bytes,fraction,policy,accesses,hits,hit_rate,belady_hit_rate,pcie_bytes,"
      "prefetch_bytes,experts_streamed,experts_host,time_s,decode_tokens_per_s\n";
  char buf[512];
  for (const SweepRow& row : rows) {
    const SimResult& r = row.result;
    std::snprintf(buf, sizeof buf, "%s,%s,%zu,%llu,%.6f,%s,%llu,%llu,%.6f,%.6f,%llu,%llu,%llu,%llu,%.6f,%.3f\n",
                  r.capacity.c_str(), row.layout.c_str(), r.slots, (unsigned long long)r.slot_bytes, r.fraction,
                  r.policy.c_str(), (unsigned long long)r.accesses, (unsigned long long)r.hits, r.hit_rate,
                  r.belady_hit_rate, (unsigned long long)r.pcie_bytes, (unsigned long long)r.prefetch_bytes,
                  (unsigned long long)r.streamed, (unsigned long long)r.host_computed, r.time_s,
                  r.decode_tokens_per_s());
    out += buf;
  }
  return out;
}

std::string layer_table(const SimResult& r) {
  std::string out = "layer   hit   belady\n";
  char buf[96];
  for (const LayerSimStats& l : r.layers) {
    const double a = double(std::max<uint64_t>(1, l.accesses));
    std::snprintf(buf, sizeof buf, "%5u %6.2f%% %6.2f%%\n", l.layer, 100 * double(l.hits) / a,
                  100 * double(l.belady_hits) / a);
    out += buf;
  }
  return out;
}

std::string sweep_svg(const std::vector<SweepRow>& rows, const std::string& title) {
  std::map<std::string, PlotSeries> lines;
  std::map<std::string, PlotSeries> belady;
  std::vector<std::string> order;
  for (const SweepRow& row : rows) {
    const std::string name = row.result.policy + (row.layout == "global" ? "" : " (" + row.layout + ")");
    if (!lines.count(name)) order.push_back(name);
    lines[name].name = name;
    lines[name].points.push_back({row.result.fraction, row.result.hit_rate});
    const std::string bname = "Belady MIN" + (row.layout == "global" ? std::string() : " (" + row.layout + ")");
    belady[bname].name = bname;
    belady[bname].dashed = true;
    auto& pts = belady[bname].points;
    if (pts.empty() || pts.back().first != row.result.fraction) pts.push_back({row.result.fraction, row.result.belady_hit_rate});
  }
  std::vector<PlotSeries> series;
  for (const auto& n : order) series.push_back(lines[n]);
  for (auto& [n, s] : belady) series.push_back(s);
  return svg_line_chart(title, "share of all routed experts resident", "hit rate", series);
}

}  // namespace ms
