// `moestream sim`: replay a routing trace against expert cache policies with
// no GPU, and compare each with Belady's MIN at the same capacity.
//   moestream sim --trace FILE (--vram BYTES[,..] | --slots N[,..] | --slots-fraction F[,..])
//                 [--policy P[,..]|all] [--pools global|per-layer|both] [--prefetch none|oracle|predicted]
//                 [--prefetch-count auto|next] [--warm-start] [--prompt-cpu] [--gated] [--transit-slots N]
// The replay runs the engine's MoE step (engine/moe_step.h) and its scheduler.
//                 [--profile FILE] [--pin-layers first,last] [--json] [--csv FILE] [--plot FILE.svg]
//   moestream sim --trace FILE --devices N --vram 12G|0:12G,1:20G [--dense-bytes B] [--policy plan|P]
//                 [--peer-gbps G] [--hidden-bytes B]: the multi-device placement (engine/sim_devices.h)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/device_flags.h"
#include "engine/sim_devices.h"
#include "experts/profile.h"
#include "engine/sim_spec.h"
#include "engine/speculative.h"
#include "engine/sweep.h"
#include "experts/trace.h"
#include "util/bytes.h"
#include "util/error.h"

namespace ms::cli {
namespace {

struct SimArgs {
  std::string trace, vram, slots, fraction, dense = "0", policy = "default", pools = "global", prefetch = "none";
  std::string profile, pin_layers, cost, cost_file, csv, plot;
  double pin_fraction = 0.5, halflife = -1, margin = -1, pcie_gbps = 0, cpu_gbps = 0;
  uint32_t transit_slots = 16;
  bool json = false, layers = false, warm_start = false, gated = false;
  StepTuning step;  // --prefetch-count, --prompt-cpu: the scheduler's choices, as the engine's
  std::string spec;  // --spec oracle:ALPHA
  int draft_max = 4;
  uint64_t spec_seed = 1;
  // --devices N: the multi-device placement and its replay (issue #45).
  int devices = -1;  // -1: not given
  std::string reserve = "0", hidden = "8K";
  double peer_gbps = 25, peer_latency_us = 10;
};

// --devices N: plan the trace's model over N simulated devices (0..N-1) and
// replay the trace over the plan.
int run_device_sim(const Trace& trace, const AccessSequence& seq, const CostModel& cost, const SimArgs& a,
                   const PolicyOptions& policy_options) {
  if (a.devices < 1 || size_t(a.devices) > kMaxPlacementDevices)
    throw Error("--devices " + std::to_string(a.devices) + ": sim plans 1 to " + std::to_string(kMaxPlacementDevices) +
                " simulated devices (a count: --devices 2 is devices 0 and 1)");
  if (a.vram.empty()) throw Error("sim --devices needs --vram: each device's budget (12G) or 0:12G,1:20G");
  if (!a.slots.empty() || !a.fraction.empty())
    throw Error("sim --devices sizes each device by --vram (12G or 0:12G,1:20G), not --slots or --slots-fraction");
  if (!a.spec.empty() || !a.csv.empty() || !a.plot.empty() || a.prefetch != "none" || a.gated || a.layers)
    throw Error("sim --devices takes none of --spec, --csv, --plot, --prefetch, --gated, --layers (one plan, one replay)");
  if (a.policy.find(',') != std::string::npos || a.policy == "all")
    throw Error("sim --devices takes one --policy (plan, the default, or a cache policy run on each device)");
  if (!(a.peer_gbps > 0 && std::isfinite(a.peer_gbps)))
    throw Error("--peer-gbps must be a positive number of GB/s, got " + std::to_string(a.peer_gbps));
  if (!(a.peer_latency_us >= 0 && std::isfinite(a.peer_latency_us)))
    throw Error("--peer-latency-us must be >= 0, got " + std::to_string(a.peer_latency_us));
  std::vector<int> ids;
  for (int d = 0; d < a.devices; ++d) ids.push_back(d);
  const std::vector<uint64_t> budgets = parse_device_vram(a.vram, ids);
  DeviceSimOptions o;
  for (size_t d = 0; d < ids.size(); ++d)
    o.devices.push_back({.id = ids[d], .budget = budgets[d], .link_gbps = cost.pcie_gbps, .hbm_gbps = cost.gpu_hbm_gbps});
  o.rates.cost = cost;
  o.rates.peer_gbps = a.peer_gbps;
  o.rates.peer_latency_us = a.peer_latency_us;
  o.dense_bytes = parse_bytes(a.dense);
  o.reserve_bytes = parse_bytes(a.reserve);
  o.hidden_bytes = parse_bytes(a.hidden);
  o.policy = a.policy == "default" ? "plan" : a.policy;
  if (o.policy != "plan") {
    const std::vector<std::string> names = policy_names();
    if (std::find(names.begin(), names.end(), o.policy) == names.end())
      throw Error("--policy " + o.policy + ": unknown (plan, or a cache policy: lru, slru, lfu, lfu-decay, adaptive, ...)");
  }
  o.policy_options = policy_options;
  const DeviceSimResult r = simulate_devices(trace, seq, o);
  const TraceHeader& h = trace.header;
  if (a.json) {
    nlohmann::json j;
    j["trace"] = {{"file", a.trace}, {"model", h.model}, {"n_layer", h.n_layer}, {"n_expert", h.n_expert}, {"k", h.k}};
    j["policy"] = r.policy;
    j["predicted_s_per_token"] = r.predicted_per_token_s();
    j["replayed_s_per_token"] = r.cost_per_token_s();
    j["link_bytes_per_token"] = r.measured.link_bytes;
    j["peer_bytes_per_token"] = r.measured.peer_bytes;
    j["decode_tokens"] = r.decode_tokens;
    j["devices"] = nlohmann::json::array();
    for (size_t d = 0; d < r.devices.size(); ++d) {
      const DeviceSimStats& s = r.devices[d];
      const DevicePlan& p = r.plan.devices[d];
      j["devices"].push_back({{"id", s.id}, {"first_layer", s.first_layer}, {"end_layer", s.end_layer},
                              {"budget", p.budget}, {"used_bytes", p.used_bytes()}, {"slots", s.slots},
                              {"accesses", s.accesses}, {"hits", s.hits}, {"hit_rate", s.hit_rate()},
                              {"peer_served", s.peer_served}, {"streamed", s.streamed}, {"cpu", s.cpu},
                              {"hosted", s.hosted}, {"link_bytes", s.link_bytes}, {"peer_bytes", s.peer_bytes}});
    }
    j["cost_model"] = cost.to_json();
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("trace %s: %s, %u layers x %u experts, k=%u; %d simulated devices, links %.0f GB/s, peers %.0f GB/s, "
              "CPU %.0f GB/s; policy %s\n\nplan:\n%s\nreplay:\n%s",
              a.trace.c_str(), h.model.c_str(), h.n_layer, h.n_expert, h.k, a.devices, cost.pcie_gbps, a.peer_gbps,
              cost.cpu_gbps, r.policy.c_str(), describe_placement(r.plan).c_str(), device_sim_table(r).c_str());
  return 0;
}

// --spec: per capacity, layout and policy, plain decoding, then verifies
// whose every route counts, then verifies whose rejected drafts' routes
// never count (issue #42).
int run_spec_sim(const Trace& trace, const SweepOptions& so, const SimArgs& a) {
  const DraftChoice dc = parse_draft_choice(a.spec);
  if (dc.kind != DraftChoice::Kind::Oracle) throw Error("sim --spec takes oracle:ALPHA only (the trace has no tokens to draft from)");
  if (a.json || !a.csv.empty() || !a.plot.empty()) throw Error("sim --spec prints a table only (no --json, --csv, --plot)");
  check_spec_sim(so.base, {.alpha = dc.alpha, .draft_max = a.draft_max});
  const TraceHeader& h = trace.header;
  std::printf("trace %s: %s, %u layers x %u experts, k=%u; verifies of %d drafts, each right with p=%.2f (seed %llu)\n\n",
              a.trace.c_str(), h.model.c_str(), h.n_layer, h.n_expert, h.k, a.draft_max, dc.alpha,
              static_cast<unsigned long long>(a.spec_seed));
  std::fputs(spec_table_header().c_str(), stdout);
  for (const CapacitySpec& cap : so.capacities)
    for (bool per_layer : so.layouts)
      for (const std::string& policy : so.policies) {
        SimOptions o = so.base;
        o.capacity = cap;
        o.capacity.per_layer = per_layer;
        o.policy = policy;
        SpecSimOptions s{.alpha = dc.alpha, .draft_max = 0, .seed = a.spec_seed, .exclude_rejected = true};
        std::fputs(spec_table_row("plain", simulate_speculative(trace, o, s)).c_str(), stdout);
        s.draft_max = a.draft_max;
        s.exclude_rejected = false;
        std::fputs(spec_table_row("spec, all routes", simulate_speculative(trace, o, s)).c_str(), stdout);
        s.exclude_rejected = true;
        std::fputs(spec_table_row("spec, rejected out", simulate_speculative(trace, o, s)).c_str(), stdout);
      }
  return 0;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw Error("cannot create '" + path + "'");
  out << text;
  if (!out) throw Error("cannot write '" + path + "'");
}

// The numeric flags' ranges (negative values used to be taken as "unset" or
// used as they were). Throws ms::Error naming the flag.
void check_sim_flags(const SimArgs& a) {
  if (!(a.pin_fraction >= 0 && a.pin_fraction <= 1))
    throw Error("--pin-fraction must be in [0, 1], got " + std::to_string(a.pin_fraction));
  if (a.halflife != -1 && !(a.halflife > 0 && std::isfinite(a.halflife)))
    throw Error("--halflife must be a positive number of forward passes, got " + std::to_string(a.halflife));
  if (a.margin != -1 && !(a.margin >= 0 && std::isfinite(a.margin)))
    throw Error("--admit-margin must be a ratio >= 0, got " + std::to_string(a.margin));
  if (!(a.pcie_gbps >= 0 && std::isfinite(a.pcie_gbps)))
    throw Error("--pcie-gbps must be a positive number of GB/s, got " + std::to_string(a.pcie_gbps));
  if (!(a.cpu_gbps >= 0 && std::isfinite(a.cpu_gbps)))
    throw Error("--cpu-gbps must be a positive number of GB/s, got " + std::to_string(a.cpu_gbps));
}

std::vector<uint32_t> parse_layers(const std::string& list, const TraceHeader& h) {
  std::vector<uint32_t> layers;
  std::stringstream ss(list);
  std::string item;
  uint32_t first = 0, last = 0;
  bool any = false;
  for (uint32_t l = 0; l < h.n_layer; ++l)
    if (h.is_moe_layer(l)) last = l, first = any ? first : l, any = true;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    uint32_t l;
    if (item == "first") l = first;
    else if (item == "last") l = last;
    else {
      char* end = nullptr;
      const unsigned long v = std::strtoul(item.c_str(), &end, 10);
      if (*end != '\0' || v >= h.n_layer) throw Error("--pin-layers: '" + item + "' is not a layer of this trace (0.." +
                                                    std::to_string(h.n_layer - 1) + ", first, last)");
      l = uint32_t(v);
    }
    if (!h.is_moe_layer(l)) throw Error("--pin-layers: layer " + std::to_string(l) + " has no routed experts");
    layers.push_back(l);
  }
  return layers;
}

RegisterCommand reg("sim", [](CLI::App& app) {
  auto a = std::make_shared<SimArgs>();
  auto* sim = app.add_subcommand("sim", "Replay a routing trace against expert cache policies (no GPU), beside Belady's optimum");
  sim->add_option("--trace", a->trace, "Trace file (--record-routes, or `moestream trace synth`)")->required();
  auto* vram = sim->add_option("--vram", a->vram, "Bytes of the expert pool, or a list: 2G,4G,8G");
  auto* slots = sim->add_option("--slots", a->slots, "Expert slots, or a list: 512,1024");
  auto* frac = sim->add_option("--slots-fraction", a->fraction, "Share of all routed experts resident, or a list: 0.25,0.5,0.75");
  vram->excludes(slots)->excludes(frac);
  slots->excludes(frac);
  sim->add_option("--dense-bytes", a->dense, "Subtracted from --vram first (dense weights, KV cache): --vram is then the whole budget")
      ->capture_default_str();
  sim->add_option("--policy", a->policy, "Policies: lru, slru, lfu, lfu-decay, pinned+<one of those>, default, all (comma list)")
      ->capture_default_str();
  sim->add_option("--pools", a->pools, "global (one pool per slot class), per-layer (a quota per layer), or both")
      ->capture_default_str();
  sim->add_option("--prefetch", a->prefetch, "none, oracle (perfect next layer), predicted (the trace's next-layer predictions)")
      ->capture_default_str();
  sim->add_option_function<std::string>(
         "--prefetch-count", [a](const std::string& v) { a->step.prefetch = parse_decode_prefetch(v); },
         "Predicted experts staged per layer step: auto (the link against the CPU, as the engine; default) or next "
         "(every cold one)")
      ->check(CLI::IsMember({"auto", "next"}))
      ->option_text("auto|next");
  sim->add_flag("--warm-start", a->warm_start, "Fill the cache before the first step as the engine does (Belady starts empty)");
  sim->add_flag("--prompt-cpu", a->step.prompt_cpu, "Staged prompt passes give the CPU a share too (the engine's --prompt-cpu)");
  sim->add_flag("--gated", a->gated,
                "Decode tokens take the gated plan, as the engine's gated decode: a layer found resident or staged plans "
                "without admitting, and stages after its CPU experts");
  sim->add_option("--transit-slots", a->transit_slots, "Slots per pool for experts streamed without being kept")
      ->capture_default_str();
  sim->add_option("--profile", a->profile, "Access profile (JSON, `moestream trace profile`) whose hottest experts pinned+ policies pin");
  sim->add_option("--pin-layers", a->pin_layers, "Layers whose experts pinned+ policies pin: e.g. first,last or 0,47");
  sim->add_option("--pin-fraction", a->pin_fraction, "At most this share of each pool is pinned")->capture_default_str();
  sim->add_option("--halflife", a->halflife, "lfu-decay: forward passes for a score to halve");
  sim->add_option("--admit-margin", a->margin, "lfu-decay: a newcomer must beat the victim's score by this ratio");
  sim->add_option("--pcie-gbps", a->pcie_gbps, "Pinned host-to-device GB/s (default 25)");
  sim->add_option("--cpu-gbps", a->cpu_gbps, "Host DRAM GB/s of the CPU expert FFN (default 40)");
  sim->add_option("--cost", a->cost, "Cost model overrides: name=value,... (see docs/traces.md)");
  sim->add_option("--cost-file", a->cost_file, "Cost model as JSON (e.g. from the engine's start-up probe)");
  sim->add_flag("--json", a->json, "Print JSON (keys hit_rate and belady_hit_rate as fractions)");
  sim->add_flag("--layers", a->layers, "Also print the hit rate of each layer");
  sim->add_option("--csv", a->csv, "Write the results as CSV");
  sim->add_option("--plot", a->plot, "Write hit rate vs capacity as an SVG chart");
  sim->add_option("--spec", a->spec,
                  "oracle:ALPHA: replay decode as speculative verifies (drafts right with p=ALPHA), plain vs every route "
                  "counted vs rejected drafts' routes left out of the policy");
  sim->add_option("--draft-max", a->draft_max, "--spec: drafts per verify")->capture_default_str();
  sim->add_option("--spec-seed", a->spec_seed, "--spec: seed of the drafts' acceptance")->capture_default_str();
  sim->add_option("--devices", a->devices,
                  "N simulated GPUs of one host (devices 0..N-1): plan where every layer and expert lives (--vram: "
                  "each device's budget, 12G or 0:12G,1:20G; --dense-bytes: the model's dense weights) and replay the "
                  "trace over the plan; --policy plan (default: the plan's residents) or a cache policy per device")
      ->option_text("N");
  sim->add_option("--reserve-bytes", a->reserve, "--devices: bytes kept on every device (CUDA context, workspaces)")
      ->capture_default_str();
  sim->add_option("--hidden-bytes", a->hidden, "--devices: one token's hidden state, as sent between devices")
      ->capture_default_str();
  sim->add_option("--peer-gbps", a->peer_gbps, "--devices: device-to-device GB/s")->capture_default_str();
  sim->add_option("--peer-latency-us", a->peer_latency_us, "--devices: microseconds per device-to-device transfer")
      ->capture_default_str();

  return [a]() -> int {
    check_sim_flags(*a);
    const Trace trace = read_trace(a->trace);
    const TraceHeader& h = trace.header;
    SweepOptions so;
    const uint64_t dense = parse_bytes(a->dense);
    if (a->devices != -1) {
      // --devices: --vram is per device (parsed by run_device_sim), not a capacity list.
    } else if (!a->vram.empty()) so.capacities = parse_capacity_list(CapacitySpec::Kind::Bytes, a->vram, dense);
    else if (!a->slots.empty()) so.capacities = parse_capacity_list(CapacitySpec::Kind::Slots, a->slots, dense);
    else if (!a->fraction.empty()) so.capacities = parse_capacity_list(CapacitySpec::Kind::Fraction, a->fraction, dense);
    else throw Error("give the cache size: --vram BYTES, --slots N or --slots-fraction F (lists sweep)");

    if (a->pools == "global") so.layouts = {false};
    else if (a->pools == "per-layer") so.layouts = {true};
    else if (a->pools == "both") so.layouts = {false, true};
    else throw Error("--pools must be global, per-layer or both");

    SimOptions& base = so.base;
    base.cost = CostModel::for_quant(h.quant);
    if (!a->cost_file.empty()) {
      std::ifstream in(a->cost_file);
      if (!in) throw Error("cannot open cost file '" + a->cost_file + "'");
      std::stringstream ss;
      ss << in.rdbuf();
      try {
        base.cost.apply_json(nlohmann::json::parse(ss.str()));
      } catch (const nlohmann::json::exception& e) {
        throw Error(a->cost_file + ": not valid JSON (" + e.what() + ")");
      }
    }
    if (a->pcie_gbps > 0) base.cost.pcie_gbps = a->pcie_gbps;
    if (a->cpu_gbps > 0) base.cost.cpu_gbps = a->cpu_gbps;
    if (!a->cost.empty()) base.cost.apply_overrides(a->cost);
    base.prefetch = parse_prefetch_mode(a->prefetch);
    base.warm_start = a->warm_start;
    base.step = a->step;
    base.gated = a->gated;
    base.transit_slots = a->transit_slots;
    if (a->halflife >= 0) base.policy_options.decay_halflife_steps = a->halflife;
    if (a->margin >= 0) base.policy_options.admit_margin = a->margin;
    base.policy_options.pin_fraction = a->pin_fraction;
    if (!a->pin_layers.empty()) base.policy_options.pinned = layer_keys(parse_layers(a->pin_layers, h), h.n_expert);
    if (!a->profile.empty()) {
      const ExpertProfile p = ExpertProfile::load(a->profile);
      if (p.n_layer != h.n_layer || p.n_expert != h.n_expert)
        throw Error(a->profile + ": profile is for " + std::to_string(p.n_layer) + " layers x " +
                    std::to_string(p.n_expert) + " experts, the trace has " + std::to_string(h.n_layer) + " x " +
                    std::to_string(h.n_expert));
      for (ExpertKey k : p.hottest(p.counts.size())) base.policy_options.pinned.push_back(k);
    }
    if (a->devices != -1) {
      base.policy_options.n_keys = h.n_layer * h.n_expert;
      return run_device_sim(trace, build_access_sequence(trace), base.cost, *a, base.policy_options);
    }
    so.policies = parse_policy_list(a->policy, !base.policy_options.pinned.empty());
    if (!a->spec.empty()) return run_spec_sim(trace, so, *a);

    const std::vector<SweepRow> rows = run_sweep(trace, so);
    const bool single = rows.size() == 1;
    if (a->json) {
      nlohmann::json j;
      if (single) {
        j = sim_result_json(rows[0].result, rows[0].layout, true);
      } else {
        j["results"] = nlohmann::json::array();
        for (const auto& r : rows) j["results"].push_back(sim_result_json(r.result, r.layout, a->layers));
      }
      j["trace"] = {{"file", a->trace}, {"model", h.model}, {"n_layer", h.n_layer}, {"n_expert", h.n_expert}, {"k", h.k}};
      j["cost_model"] = base.cost.to_json();
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("trace %s: %s, %u layers x %u experts, k=%u; expert time predicted with PCIe %.0f GB/s, CPU %.0f GB/s\n\n",
                  a->trace.c_str(), h.model.c_str(), h.n_layer, h.n_expert, h.k, base.cost.pcie_gbps, base.cost.cpu_gbps);
      std::fputs(sweep_table(rows).c_str(), stdout);
      if (a->layers || single) {
        for (const auto& r : rows) {
          std::printf("\n%s, %s, %s pools:\n", r.result.policy.c_str(), r.result.capacity.c_str(), r.layout.c_str());
          std::fputs(layer_table(r.result).c_str(), stdout);
        }
      }
    }
    if (!a->csv.empty()) write_file(a->csv, sweep_csv(rows));
    if (!a->plot.empty()) write_file(a->plot, sweep_svg(rows, "Expert cache hit rate: " + h.model));
    return 0;
  };
});

}  // namespace
}  // namespace ms::cli
