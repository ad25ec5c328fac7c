#include "cli/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "experts/floor.h"
#include "format/gguf.h"
#include "util/bytes.h"
#include "util/error.h"

#ifndef MOESTREAM_VERSION
#define MOESTREAM_VERSION "0.1.0"
#endif
#if __has_include("ms_git_hash.h")
#include "ms_git_hash.h"  // written at build time (cmake/write_git_hash.cmake)
#endif
#ifndef MOESTREAM_GIT_HASH
#define MOESTREAM_GIT_HASH "unknown"
#endif

namespace ms::cli {
namespace {

// "q4_K 15.2 GiB, q6_K 0.6 GiB, f32 0.1 GiB": tensor bytes by type, largest first.
std::string quant_mix(const GgufFile& f) {
  std::map<std::string, uint64_t> by;
  for (const GgufTensorInfo& t : f.tensors()) by[type_name(t.type)] += t.nbytes;
  std::vector<std::pair<uint64_t, std::string>> v;
  for (auto& [k, b] : by) v.emplace_back(b, k);
  std::sort(v.rbegin(), v.rend());
  std::string s;
  for (auto& [b, k] : v) s += (s.empty() ? "" : ", ") + k + " " + format_bytes(b);
  return s;
}

double stat_tps(const std::vector<Stat>& stats, char kind) {
  for (const Stat& s : stats)
    if (s.test[0] == kind) return s.mean();
  return 0;
}

// The JSON of one run: everything that depends on the backend and budget.
// Speculation's counts for a `tgN spec ...` row: acceptance by draft
// position, tokens per verify, step time by drafts verified (0: plain steps).
nlohmann::json spec_json(const SpecStats& st) {
  nlohmann::json by_pos = nlohmann::json::array(), widths = nlohmann::json::object();
  for (size_t i = 0; i < st.tried_at.size(); ++i)
    by_pos.push_back({{"tried", st.tried_at[i]},
                      {"accepted", st.accepted_at[i]},
                      {"rate", st.tried_at[i] ? double(st.accepted_at[i]) / double(st.tried_at[i]) : 0.0}});
  for (size_t w = 0; w < st.steps_by_width.size(); ++w)
    if (st.steps_by_width[w] > 0)
      widths[std::to_string(w)] = {{"steps", st.steps_by_width[w]}, {"mean_ms", 1e3 * st.mean_step_seconds(w)}};
  return {{"verifies", st.verifies},
          {"plain_steps", st.plain_steps},
          {"drafted", st.drafted},
          {"accepted", st.accepted},
          {"acceptance", st.acceptance()},
          {"tokens_per_verify", st.tokens_per_verify()},
          {"replayed", st.replayed},
          {"tree_verifies", st.tree_verifies},
          {"tree_nodes", st.tree_nodes},
          {"acceptance_by_position", by_pos},
          {"step_time_by_drafts", widths}};
}

nlohmann::json run_json(const BenchArgs& a, const BudgetRun& r) {
  nlohmann::json j;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["bandwidth"] = {{"bytes_per_s", r.bw}, {"how", r.bw_how}};
  j["floor_tps"] = r.floor_tps;
  nlohmann::json rs = nlohmann::json::array();
  for (const Stat& s : r.stats) {
    nlohmann::json row = {{"test", s.test}, {"n_tokens", s.n_tokens}, {"n_depth", s.depth}, {"reps", a.reps},
                          {"tps_mean", s.mean()}, {"tps_sd", s.sd()}, {"tps", s.tps}};
    if (s.has_spec) row["spec"] = spec_json(s.spec);
    rs.push_back(row);
  }
  j["results"] = rs;
  j["experts"] = r.tel.to_json();
  if (r.tel.hybrid) j["vram_budget_bytes"] = r.tel.budget_bytes;
  j["memory"] = {{"device_used_bytes", r.vram_used},
                 {"host_rss_bytes", r.host.rss},
                 {"host_rss_anon_bytes", r.host.rss_anon},
                 {"host_rss_file_bytes", r.host.rss_file},
                 {"host_peak_rss_bytes", r.host.peak}};
  return j;
}

// The floor line, the VRAM line (within a budget) and the llama-bench table of one run.
std::string run_text(const BudgetRun& r, const ModelInfo& mi, const std::string& arch) {
  std::string out;
  char buf[1024];
  std::snprintf(buf, sizeof buf, "floor: %s active bytes/token at %.1f GB/s (%s) = %.1f tok/s\n\n",
                format_bytes(static_cast<uint64_t>(mi.active)).c_str(), r.bw / 1e9, r.bw_how.c_str(), r.floor_tps);
  out += buf;
  const ExpertTelemetry& tel = r.tel;
  if (tel.hybrid) {
    const TierCounts pairs = tel.all();
    std::snprintf(buf, sizeof buf,
                  "vram: budget %s, %llu expert slots (%.1f%% of experts); hit rate %.1f%%, CPU share %.1f%%, H2D "
                  "%.1f GB/s; policy %s; host %s\n\n",
                  format_bytes(tel.budget_bytes).c_str(), static_cast<unsigned long long>(tel.cache_slots),
                  tel.experts_total ? 100.0 * tel.cache_slots / tel.experts_total : 0.0, 100.0 * pairs.hit_rate(),
                  pairs.total() ? 100.0 * pairs.host / pairs.total() : 0.0, tel.h2d_gbps(), tel.policy.c_str(),
                  tel.host_pin.c_str());
    out += buf;
  }
  if (r.host.rss > 0 || r.vram_used > 0) {
    // The file's pages count in RSS once read (the mapped model), and stay
    // until the kernel needs them back: anon is what the process allocated.
    std::snprintf(buf, sizeof buf, "memory: device in use %s; host RSS %s (anon %s, file %s), peak %s\n\n",
                  r.vram_used ? format_bytes(r.vram_used).c_str() : "-", format_bytes(r.host.rss).c_str(),
                  format_bytes(r.host.rss_anon).c_str(), format_bytes(r.host.rss_file).c_str(),
                  format_bytes(r.host.peak).c_str());
    out += buf;
  }
  out += "| model | size | backend | test | t/s | of floor |\n|---|---|---|---|---:|---:|\n";
  for (const Stat& s : r.stats) {
    const bool tg = s.test[0] == 't';
    std::snprintf(buf, sizeof buf, "| %s | %s | %s | %s | %.2f ± %.2f | %s |\n", arch.c_str(), mi.size.c_str(),
                  r.backend.c_str(), s.test.c_str(), s.mean(), s.sd(),
                  tg ? (std::to_string(static_cast<int>(std::lround(100.0 * s.mean() / r.floor_tps))) + "%").c_str()
                     : "");
    out += buf;
  }
  return out;
}

}  // namespace

std::string bench_test_name(char kind, int n_tokens, int depth) {
  std::string name = std::string(kind == 'p' ? "pp" : "tg") + std::to_string(n_tokens);
  if (depth > 0) name += " @ d" + std::to_string(depth);
  return name;
}

int largest(const std::vector<int>& list) {
  int m = 0;
  for (int v : list) m = std::max(m, v);
  return m;
}

int first_nonzero(const std::vector<int>& list) {
  for (int v : list)
    if (v > 0) return v;
  return 0;
}

int64_t bench_ctx(const BenchArgs& a, int tg_prompt) {
  const int64_t gen = largest(a.n_gen) > 0 ? int64_t{tg_prompt} + largest(a.n_gen) : 0;
  return int64_t{largest(a.n_depth)} + std::max<int64_t>(largest(a.n_prompt), gen) + 1;
}

void check_bench_lists(const BenchArgs& a) {
  struct Flag {
    const char* name;
    const std::vector<int>* list;
    const char* what;
  };
  for (const Flag& f : {Flag{"-p", &a.n_prompt, "prompt tokens"}, Flag{"-n", &a.n_gen, "generated tokens"},
                        Flag{"-d", &a.n_depth, "depth tokens"}}) {
    if (f.list->empty()) throw Error(std::string(f.name) + ": give at least one value");
    for (int v : *f.list)
      if (v < 0 || v > kMaxCtx)
        throw Error(std::string(f.name) + " " + std::to_string(v) + ": " + f.what + " must be in 0.." +
                    std::to_string(kMaxCtx));
  }
  if (largest(a.n_prompt) == 0 && largest(a.n_gen) == 0) throw Error("bench: nothing to measure (-p 0 -n 0)");
  const int64_t ctx = bench_ctx(a, 8);
  if (ctx > kMaxCtx)
    throw Error("-d " + std::to_string(largest(a.n_depth)) + " with -p " + std::to_string(largest(a.n_prompt)) +
                " / -n " + std::to_string(largest(a.n_gen)) + ": a context of " + std::to_string(ctx) +
                " tokens, more than " + std::to_string(kMaxCtx));
}

ModelInfo model_info(const std::string& path, const LoadedModel& m) {
  const ModelWeights& w = m.weights;
  ModelInfo i;
  i.path = path;
  i.name = m.file->get_string("general.name", "");
  i.size = format_bytes(m.file->file_size());
  i.mix = quant_mix(*m.file);
  i.active = static_cast<double>(w.active_bytes_per_token());
  i.file_gib = static_cast<double>(m.file->file_size()) / double(1ull << 30);
  double routed = 0;  // routed expert bytes per token: k experts of every MoE layer
  int moe_layers = 0;
  for (const LayerWeights& l : w.layers)
    if (l.experts.n_expert > 0) {
      routed += static_cast<double>(w.cfg.n_expert_used) * static_cast<double>(l.experts.expert_bytes());
      i.expert += static_cast<double>(l.experts.expert_bytes());
      ++moe_layers;
    }
  if (moe_layers > 0) i.expert /= moe_layers;
  i.dense = i.active - routed;
  return i;
}

BudgetRow budget_row(const BudgetRun& r, const ModelInfo& mi, double bandwidth_gbs) {
  BudgetRow row;
  row.vram = r.vram;
  row.hybrid = r.tel.hybrid;
  row.pp_tps = stat_tps(r.stats, 'p');
  row.tg_tps = stat_tps(r.stats, 't');
  bool full = false;
  const uint64_t given = parse_vram(r.vram, &full);
  row.budget_gib = (given > 0 ? double(given) : r.tel.hybrid ? double(r.tel.budget_bytes) : 0) / double(1ull << 30);
  if (row.budget_gib == 0) row.budget_gib = mi.file_gib;  // full, or a default budget the model fit in
  if (r.tel.hybrid) {
    const TierCounts pairs = r.tel.all();
    row.hit_rate = pairs.hit_rate();
    row.cpu_share = pairs.total() ? double(pairs.host) / double(pairs.total()) : 0;
    row.h2d_gbps = r.tel.h2d_gbps();
  }
  row.floor_tps = r.floor_tps;
  if (const auto f = telemetry_floor(r.tel, mi.dense, mi.expert, bandwidth_gbs)) {
    row.floor_tps = f->tokens_per_s();
    row.floor_bound = f->bound();
  }
  return row;
}

std::string bench_json(const BenchArgs& a, const LoadedModel& model, const ModelInfo& mi, int threads,
                       const std::vector<BudgetRun>& runs) {
  const ModelConfig& c = model.weights.cfg;
  nlohmann::json j;
  j["build"] = {{"version", MOESTREAM_VERSION}, {"git", MOESTREAM_GIT_HASH}, {"cuda", cuda_built()}};
  j["threads"] = threads;
  j["kv_type"] = kv_type_name(a.kv_type);
  j["model"] = {{"path", mi.path},         {"name", mi.name},        {"arch", c.arch_name},
                {"describe", c.describe()}, {"file_bytes", model.file->file_size()}, {"quant", mi.mix},
                {"active_bytes_per_token", model.weights.active_bytes_per_token()}};
  if (runs.size() == 1) {
    j.update(run_json(a, runs[0]));  // one budget: the shape bench has always printed
  } else {
    nlohmann::json sweep = nlohmann::json::array();
    for (const BudgetRun& r : runs) {
      nlohmann::json o = run_json(a, r);
      o["summary"] = budget_row_json(r.row);
      sweep.push_back(o);
    }
    j["sweep"] = sweep;
  }
  return j.dump(2) + "\n";
}

std::string bench_text(const BenchArgs& a, const LoadedModel& model, const ModelInfo& mi,
                       const std::vector<BudgetRun>& runs) {
  const ModelConfig& c = model.weights.cfg;
  // The KV type only when not the default, so default headers stay as they were.
  std::string out = "moestream bench | build " MOESTREAM_VERSION " (git " MOESTREAM_GIT_HASH ") | backend " +
                    runs[0].backend +
                    (a.kv_type == KvType::F16 ? "" : std::string(" | kv ") + kv_type_name(a.kv_type)) +
                    " | device: " + runs[0].device + "\n";
  out += "model: " + (mi.name.empty() ? mi.path : mi.name) + " | " + c.describe() + " | " + mi.size + " | " + mi.mix +
         "\n";
  if (runs.size() == 1) return out + run_text(runs[0], mi, c.arch_name);
  out += "\n";
  std::vector<BudgetRow> rows;
  for (const BudgetRun& r : runs) {
    out += "### --vram " + r.row.vram + "\n\n" + run_text(r, mi, c.arch_name) + "\n";
    rows.push_back(r.row);
  }
  return out + "floor tok/s: per decode token, max(GPU bytes / HBM, streamed bytes / H2D, CPU bytes / CPU rate) at "
               "the measured rates; where every expert is resident, the floor above\n\n" +
         budget_table(rows, first_nonzero(a.n_prompt), first_nonzero(a.n_gen));
}

}  // namespace ms::cli
