// What `moestream bench` measures, and how it prints it: the llama-bench-like
// text (one run, or one block per --vram budget and a summary table) and the
// JSON. Kept apart from cmd_bench.cpp, which runs the backend.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "cli/backend_choice.h"
#include "engine/loaded_model.h"
#include "engine/speculative.h"
#include "experts/budget_sweep.h"
#include "experts/telemetry.h"
#include "util/process_memory.h"

namespace ms::cli {

struct BenchArgs {
  std::string model, backend, output;
  bool model_given = false;   // -m appeared (so `-m ""` is an error, not the tiny model)
  std::string svg;            // --svg FILE: tokens/s against the budget(s)
  std::string record_routes;  // after the timed runs: one prompt + decode run recorded as a routing trace
  // -p, -n, -d: comma lists; every (depth, prompt) and (depth, gen) pair is a test.
  std::vector<int> n_prompt = {512}, n_gen = {128}, n_depth = {0};
  int reps = 3, threads = 0, batch = 0;
  bool json = false;
  double bandwidth_gbs = 0;  // > 0: use this instead of measuring
  KvType kv_type = KvType::F16;
  VramSetup vram;
};

struct Stat {
  std::string test;  // bench_test_name()
  int n_tokens = 0;
  std::vector<double> tps;
  int depth = 0;     // tokens already in the cache when the test ran (-d)
  bool has_spec = false;
  SpecStats spec;    // `tgN spec ...` rows: speculation's counts over the repetitions
  double mean() const {
    double s = 0;
    for (double v : tps) s += v;
    return tps.empty() ? 0 : s / tps.size();
  }
  double sd() const {
    if (tps.size() < 2) return 0;
    const double m = mean();
    double s = 0;
    for (double v : tps) s += (v - m) * (v - m);
    return std::sqrt(s / (tps.size() - 1));
  }
};

// llama-bench's test names: "pp512", "tg128", and at depth "pp512 @ d8192".
std::string bench_test_name(char kind, int n_tokens, int depth);
// The largest item of a -p/-n/-d list, and the first positive one (0: none).
int largest(const std::vector<int>& list);
int first_nonzero(const std::vector<int>& list);
// The KV capacity every test of the lists fits in: the deepest context plus
// the longest prompt, or tg_prompt + the most generated tokens, plus one.
int64_t bench_ctx(const BenchArgs& a, int tg_prompt);
// -p, -n and -d items in 0..kMaxCtx, something to measure, and the context
// they need within kMaxCtx; throws ms::Error naming the flag.
void check_bench_lists(const BenchArgs& a);

// What the output says about the model, the same for every budget.
struct ModelInfo {
  std::string path, name, size, mix;
  double active = 0;        // bytes one decode token reads, all experts resident
  double dense = 0;         // of which not routed experts (read from VRAM at any budget)
  double expert = 0;        // one routed expert's bytes, averaged over the MoE layers
  double file_gib = 0;      // where `full` sits on the sweep chart's x axis
};

ModelInfo model_info(const std::string& path, const LoadedModel& m);

// One backend's measurements: one budget of a sweep, or the whole of a plain bench.
struct BudgetRun {
  std::string vram, backend, device, bw_how;
  double bw = 0, floor_tps = 0;  // the all-resident floor: active bytes / bw
  std::vector<Stat> stats;
  ExpertTelemetry tel;
  BudgetRow row;
  // Memory at the end of the budget's tests, its backend still loaded: the
  // device's memory in use (the whole device, as nvidia-smi counts it; 0 on
  // the CPU backend) and this process's host memory, its peak since the
  // budget's backend was being built.
  uint64_t vram_used = 0;
  HostMemory host;
};

// The summary row of a run: tokens/s, where experts ran, and the decode floor
// at its budget (the all-resident floor where every expert was resident).
// `bandwidth_gbs` > 0: bench --bandwidth, which replaces the HBM rate.
BudgetRow budget_row(const BudgetRun& r, const ModelInfo& mi, double bandwidth_gbs);

// The whole output: one run as bench has always printed it; several (a
// --vram list) with a block per budget and the summary table / `sweep` array.
std::string bench_text(const BenchArgs& a, const LoadedModel& model, const ModelInfo& mi,
                       const std::vector<BudgetRun>& runs);
std::string bench_json(const BenchArgs& a, const LoadedModel& model, const ModelInfo& mi, int threads,
                       const std::vector<BudgetRun>& runs);

}  // namespace ms::cli
