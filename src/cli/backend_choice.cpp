#include "cli/backend_choice.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "cli/device_flags.h"
#include "engine/cpu_backend.h"
#include "experts/cost_model.h"
#include "experts/policy.h"
#include "experts/profile.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "util/bytes.h"
#include "util/error.h"
#include "util/split.h"

#ifdef MOESTREAM_HAVE_CUDA
#include "cuda/backend/cuda_backend.h"
#include "cuda/device.h"
#endif

namespace ms::cli {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string s = line.substr(colon + 1);
        const size_t b = s.find_first_not_of(" \t");
        return b == std::string::npos ? std::string("unknown CPU") : s.substr(b);
      }
    }
  return "unknown CPU";
}

std::unique_ptr<Backend> make_cpu(const BackendSetup& s, const ModelWeights& w, ThreadPool& pool) {
  CpuBackend::Options o;
  if (s.max_batch > 0) o.max_batch = s.max_batch;
  else if (s.cpu_max_batch > 0) o.max_batch = s.cpu_max_batch;
  return std::make_unique<CpuBackend>(w, pool, o);
}

}  // namespace

bool cuda_built() {
#ifdef MOESTREAM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

void add_kv_type_option(CLI::App& sub, KvType* type) {
  sub.add_option_function<std::string>(
         "--kv-type", [type](const std::string& name) { *type = parse_kv_type(name); },
         "KV cache type: f16 (default), q8_0 (blocks of 32 int8 with an f16 scale, as llama.cpp's -ctk/-ctv q8_0: "
         "53% of f16's memory, for long contexts; head size a multiple of 32), or f32 (unrounded K/V, for numerical "
         "parity checks; twice the memory)")
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}))
      ->option_text("f16|f32|q8_0");
}

namespace {

void add_tuning_options(CLI::App& sub, VramSetup* v) {
  const std::string g = tuning_group();
  CudaOptions& o = v->cuda;
  TieredOptions& t = o.tiered;
  auto off = [&](const char* name, bool* field, const std::string& help) {
    sub.add_flag_callback(name, [field] { *field = false; }, help)->group(g);
  };
  off("--no-graph", &o.use_graph, "CUDA: decode without replaying a captured CUDA graph per token");
  off("--no-fuse-decode", &o.fused_decode,
      "CUDA: decode without the fused kernels (q/k norm + RoPE + KV append, one-row RMSNorm + Q8, router + top-k, "
      "expert down + weighted sum)");
  off("--no-fuse-prefill", &o.fused_prefill, "CUDA: prompt passes without the fused q/k norm + RoPE + KV append");
  sub.add_flag("--step-timing", o.step_timing,
               "CUDA: time every decode step (GPU, the call, the caller's gap) and print the means at exit")
      ->group(g);
  off("--no-gated", &t.gated,
      "tiered decode: a host round trip per tiered layer instead of one graph that checks residency on the GPU");
  off("--no-prompt-stage", &t.step.prompt_stage,
      "tiered prompts: copy a layer's cold experts when its routes are known, not ahead while earlier layers compute");
  sub.add_flag("--prompt-cpu", t.step.prompt_cpu,
               "tiered prompts: give the CPU a share of the cold experts also where the link would carry them all")
      ->group(g);
  off("--no-stage-gap", &t.step.stage_gap,
      "tiered decode with --prefetch auto: ignore the queued copies and the GPU-only stretch when sizing staging");
  off("--no-staged-hits", &t.step.staged_hits,
      "tiered decode: a layer whose experts are all resident or staged still waits for the host");
  off("--no-draft-credit", &t.step.draft_credit,
      "tiered speculative decoding: a verify's draft tokens' experts count in the cache policy when routed, not only "
      "once the draft is accepted");
  off("--no-pinned-prompt", &t.pinned_prompt_kernels,
      "tiered prompts: layers whose experts stay in VRAM go through the tiered step, not the all-resident kernels");
  sub.add_option("--transit-slots", t.transit_slots,
                 "tiered: slots per pool for experts streamed without being kept (0: chosen from the pass size; "
                 "else at most " + std::to_string(kMaxTransitSlots) + ", taken as an even count of at least 2)")
      ->check(CLI::Range(uint32_t{0}, kMaxTransitSlots))
      ->option_text("N")
      ->group(g);
  sub.add_flag("--hybrid-profile", t.serve_profile,
               "tiered decode: profile the host's serving of the gated step, printed at exit")
      ->group(g);
  sub.add_option("--link-timeline", t.link_timeline,
                 "tiered prompts: how long the PCIe link idled, printed per pass (1) and also per planned layer (2)")
      ->check(CLI::Range(0, 2))
      ->option_text("0|1|2")
      ->group(g);
  sub.add_option_function<int>(
         "--gemm-min-batch", [&o](int n) { o.gemm_min_batch = n > 0 ? n : cuda::kGemmMinTokens; },
         "CUDA: rows from which dense projections, the output head and the routed experts take the tensor-core "
         "matmul instead of the several-vector matvec (0: the default, " +
             std::to_string(cuda::kGemmMinTokens) + "; at least 2)")
      ->check(CLI::Range(0, 4096))
      ->option_text("N")
      ->group(g);
  sub.add_option("--spin-us", v->spin_us,
                 "microseconds idle CPU worker threads spin before they sleep (default " +
                     std::to_string(ThreadPool::kDefaultSpinUs) + "; at most " +
                     std::to_string(ThreadPool::kMaxSpinUs) + ")")
      ->check(CLI::Range(0, ThreadPool::kMaxSpinUs))
      ->option_text("N")
      ->group(g);
}

}  // namespace

void add_vram_options(CLI::App& sub, VramSetup* v, bool steps) {
  TieredOptions& t = v->cuda.tiered;
  sub.add_option("--vram", v->budget,
                 "VRAM budget for the CUDA backend: 8G, 8000M, full (every expert resident); default: free device "
                 "memory less 512 MiB. Routed experts that do not fit stay in host RAM and are streamed or run on the CPU")
      ->option_text("BYTES|full");
  sub.add_option_function<std::string>(
         "--devices", [v](const std::string& list) { v->devices = parse_devices(list); },
         "GPUs to use, e.g. 1 (default 0). Several (0,1) are planned by `moestream inspect --devices` and "
         "`moestream sim --devices` but not run yet: multi-GPU execution is not built (docs/multi_gpu.md)")
      ->option_text("LIST");
  std::string names;
  for (const std::string& n : policy_names()) names += (names.empty() ? "" : ", ") + n;
  sub.add_option("--policy", t.policy,
                 "expert cache policy: " + names + "; default: " + engine_default_policy(false) +
                     " (whole layers in VRAM), or " + engine_default_policy(true) + " with --profile")
      ->option_text("NAME");
  sub.add_option("--profile", v->profile, "expert access profile (moestream trace profile): hottest experts start resident")
      ->option_text("FILE");
  sub.add_option_function<std::string>(
         "--host-pin", [&t](const std::string& name) { t.host_pin = cuda::parse_host_pin(name); },
         "how streamed experts reach the GPU: copy (a page-locked copy of the experts in RAM, made at "
         "start-up: full link rate, no CPU work), staging (a ring of pinned buffers the CPU fills: no second "
         "copy in RAM) or register (page-lock the mapped file in place: minutes of start-up for a large "
         "file); auto = copy when the experts take at most half the available RAM, else staging")
      ->check(CLI::IsMember({"auto", "copy", "register", "staging"}))
      ->option_text("auto|copy|register|staging");
  sub.add_option_function<std::string>(
         "--prefetch", [&t](const std::string& name) { t.step.prefetch = parse_decode_prefetch(name); },
         "copy the experts predicted for the next tiered layer (its router applied to the current hidden "
         "state) while this one computes: next (every predicted cold expert), auto (as many as the link "
         "carries in a layer's time), off")
      ->check(CLI::IsMember({"off", "next", "auto"}))
      ->option_text("off|next|auto");
  sub.add_option_function<std::string>(
         "--cost",
         [&t](const std::string& list) {
           try {
             t.step.cost = CostOverrides::parse(list);
           } catch (const Error& e) {
             throw Error("--cost " + list + ": " + e.what());
           }
         },
         "override measured cost-model figures, e.g. pcie_gbps=20,cpu_gbps=30")
      ->option_text("NAME=VALUE,...");
  if (steps)
    sub.add_flag("--verbose-steps", t.verbose_steps, "one line per forward pass: where experts ran, times");
  add_tuning_options(sub, v);
}

uint64_t parse_vram(const std::string& text_in, bool* full) {
  *full = false;
  std::string text = text_in;
  if (is_per_device_vram(text)) {  // "1:8G": the size for one device (which one: check_vram_devices)
    const size_t colon = text.find(':');
    const std::string id = text.substr(0, colon);
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos || text.find(',') != std::string::npos)
      throw Error("--vram " + text + ": a budget for one device is DEVICE:SIZE, e.g. 1:8G (with --devices 1)");
    text = text.substr(colon + 1);
    if (text.empty() || text == "auto" || text == "full")
      throw Error("--vram " + text_in + ": give DEVICE:SIZE with a size, e.g. 1:8G");
  }
  if (text.empty() || text == "auto") return 0;
  if (text == "full") {
    *full = true;
    return 0;
  }
  uint64_t b = 0;
  try {
    b = parse_bytes(text);
  } catch (const Error& e) {
    throw Error("--vram " + text + ": not a size (" + e.what() + "); use e.g. 8G, 8000M, 10.5G or full");
  }
  if (b == 0) throw Error("--vram " + text + ": the budget must be positive");
  return b;
}

std::vector<std::string> parse_vram_list(const std::string& text) {
  const std::vector<std::string> items = split_list(text);
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].empty() && items.size() > 1)
      throw Error("--vram " + text + ": item " + std::to_string(i + 1) + " is empty; use e.g. 1.5G,8G,full");
    bool full = false;
    parse_vram(items[i], &full);
  }
  return items;
}

int check_vram_devices(const VramSetup& v) {
  const int device = check_device_count(v.devices);
  if (is_per_device_vram(v.budget)) {
    if (v.devices.empty())
      throw Error("--vram " + v.budget + ": a budget for a named device needs --devices (e.g. --devices " +
                  v.budget.substr(0, v.budget.find(':')) + ")");
    (void)parse_device_vram(v.budget, v.devices);
  }
  return device;
}

void check_vram_options(const VramSetup& v) {
  check_vram_devices(v);
  bool full = false;
  parse_vram(v.budget, &full);
  const std::string& policy = v.cuda.tiered.policy;
  const std::vector<std::string> names = policy_names();
  if (policy != "default" && std::find(names.begin(), names.end(), policy) == names.end()) {
    std::string list = "default";
    for (const std::string& n : names) list += ", " + n;
    throw Error("--policy " + policy + ": unknown expert cache policy (one of: " + list + ")");
  }
}

CudaOptions cuda_options(const BackendSetup& s) {
  CudaOptions o = s.vram.cuda;
  o.device = check_vram_devices(s.vram);
  o.vram_budget = parse_vram(s.vram.budget, &o.vram_full);
  // The device cache is allocated, and the VRAM budget planned, for this type
  // now (q8_0: 34/64 of f16's bytes); make_cache could switch it later.
  o.kv_f32 = s.kv_type == KvType::F32;
  o.kv_type = s.kv_type;
  if (s.ctx > 0) o.ctx = s.ctx;
  if (s.max_batch > 0) o.max_batch = s.max_batch;
  o.n_seq = std::max(1, s.n_seq);
  return o;
}

int max_threads() {
  return kMaxThreadsPerCore * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void check_threads_flag(int threads) {
  if (threads < 0) throw Error("--threads must be >= 0 (0: all cores), got " + std::to_string(threads));
  if (threads > max_threads())
    throw Error("--threads " + std::to_string(threads) + ": at most " + std::to_string(max_threads()) + " (" +
                std::to_string(kMaxThreadsPerCore) + " per hardware thread; 0: all cores)");
}

void check_size_flags(int64_t ctx, int threads, int batch) {
  if (ctx < 0) throw Error("--ctx must be >= 0 (0: the model's context where memory allows), got " + std::to_string(ctx));
  if (ctx > kMaxCtx)
    throw Error("--ctx " + std::to_string(ctx) + ": at most " + std::to_string(kMaxCtx) + " tokens");
  check_threads_flag(threads);
  if (batch < 0)
    throw Error("--batch must be >= 0 prompt tokens per forward pass (0: chosen), got " + std::to_string(batch));
  if (batch > kMaxBatch)
    throw Error("--batch " + std::to_string(batch) + ": at most " + std::to_string(kMaxBatch) +
                " prompt tokens per forward pass (longer prompts run in several)");
}

void report_thread_shortfall(const ThreadPool& pool, bool quiet) {
  if (quiet || pool.size() == pool.requested()) return;
  std::fprintf(stderr, "moestream: started %d of %d threads (%s); running on %d\n", pool.size(), pool.requested(),
               pool.start_error().c_str(), pool.size());
}

std::unique_ptr<Backend> make_backend(const BackendSetup& s, const ModelWeights& w, ThreadPool& pool) {
  bool full = false;
  check_vram_devices(s.vram);        // several devices: refused on every backend (not built yet)
  parse_vram(s.vram.budget, &full);  // a typo in --vram is an error on every build, whichever backend runs
  if (s.requested == "cpu") {
    if (!s.vram.budget.empty() && !s.quiet)
      std::fprintf(stderr, "moestream: --vram applies to the CUDA backend; the CPU backend ignores it\n");
    return make_cpu(s, w, pool);
  }
  if (!s.requested.empty() && s.requested != "cuda")
    throw Error("--backend " + s.requested + ": unknown backend (cpu or cuda)");
#ifdef MOESTREAM_HAVE_CUDA
  std::string why;
  if (cuda::device_count(&why) == 0) {
    if (s.requested == "cuda") throw Error("--backend cuda: no usable CUDA device (" + why + "); use --backend cpu");
    if (!s.quiet) std::fprintf(stderr, "moestream: no usable CUDA device (%s); running on the CPU\n", why.c_str());
    return make_cpu(s, w, pool);
  }
  CudaOptions o = cuda_options(s);
  o.tiered.pool = &pool;
  ExpertProfile profile;
  if (!s.vram.profile.empty()) {
    profile = ExpertProfile::load(s.vram.profile);
    if (profile.n_layer != static_cast<uint32_t>(w.cfg.n_layer) || profile.n_expert != static_cast<uint32_t>(w.cfg.n_expert))
      throw Error("--profile " + s.vram.profile + ": made for " + std::to_string(profile.n_layer) + " layers x " +
                  std::to_string(profile.n_expert) + " experts, this model has " + std::to_string(w.cfg.n_layer) +
                  " x " + std::to_string(w.cfg.n_expert));
    o.tiered.profile = &profile;
  }
  try {
    auto be = std::make_unique<CudaBackend>(w, o);
    if (!s.quiet) std::fprintf(stderr, "moestream: %s\n", be->batch_reason().c_str());
    return be;
  } catch (const Error& e) {
    // Asked for explicitly, or a budget was given: say why it cannot run.
    if (s.requested == "cuda" || !s.vram.budget.empty()) throw;
    if (!s.quiet) std::fprintf(stderr, "moestream: the CUDA backend cannot run this model (%s); running on the CPU\n", e.what());
    return make_cpu(s, w, pool);
  }
#else
  if (s.requested == "cuda")
    throw Error("--backend cuda: this build has no CUDA backend (built without nvcc or with -DMOESTREAM_CUDA=OFF); "
                "use --backend cpu");
  if (!s.vram.budget.empty() && !s.quiet)
    std::fprintf(stderr,
                 "moestream: --vram applies to the CUDA backend, which this build does not have (built without nvcc "
                 "or with -DMOESTREAM_CUDA=OFF); running on the CPU\n");
  return make_cpu(s, w, pool);
#endif
}

uint64_t available_ram() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

namespace {

// Whether make_backend(s) will build the CUDA backend (its default choice
// included); *budget gets the VRAM it may use, *full whether every expert
// must be resident.
bool cuda_chosen(const BackendSetup& s, uint64_t* budget, bool* full) {
  if (s.requested == "cpu") return false;
#ifdef MOESTREAM_HAVE_CUDA
  std::string why;
  if (cuda::device_count(&why) == 0) return false;
  *budget = parse_vram(s.vram.budget, full);
  // Automatic, or full: the device's free memory less the margin; a budget
  // beyond it is not there to hold a context either.
  const uint64_t free_now = cuda::free_device_bytes();
  const uint64_t usable = free_now > CudaBackend::kAutoMargin ? free_now - CudaBackend::kAutoMargin : 0;
  if (*budget == 0 || *budget > usable) *budget = usable;
  return true;
#else
  (void)budget;
  (void)full;
  return false;
#endif
}

// The memory a context may take on the backend make_backend(s) builds.
ContextMemory context_memory(const BackendSetup& s, const ModelWeights& w) {
  ContextMemory m;
  uint64_t budget = 0;
  bool full = false;
  if (cuda_chosen(s, &budget, &full) && w.file != nullptr) {
    const WeightSplit split = split_weights(*w.file);
    const uint64_t fixed = split.dense_bytes + vram_reserve_bytes(w.cfg.n_vocab);
    const uint64_t avail = budget > fixed ? budget - fixed : 0;
    const uint64_t resident = avail > split.expert_bytes ? avail - split.expert_bytes : 0;
    const bool tiers = w.cfg.is_moe() && !full;  // routed experts may leave VRAM for the KV cache
    m.limit = tiers ? avail : resident;
    m.resident = resident;
    m.automatic = tiers ? avail / 2 : resident;
    bool ignored = false;
    const bool given = !full && !s.vram.budget.empty() && parse_vram(s.vram.budget, &ignored) == budget;
    m.where = std::string(full ? "--vram full" : given ? "--vram " + s.vram.budget : "the GPU's free memory") +
              " (" + format_bytes(budget) + ") less dense weights" + (tiers ? "" : " and experts") + " and reserve: " +
              format_bytes(tiers ? avail : resident);
    if (m.limit == 0) m.limit = 1;  // nothing fits: every context is refused, with the largest (0)
    return m;
  }
  const uint64_t ram = available_ram();
  m.limit = ram / 10 * 9;  // as serve's slot check
  m.automatic = ram / 2;
  m.where = "this machine's free RAM (" + format_bytes(ram) + ")";
  return m;
}

}  // namespace

bool will_use_cuda(const BackendSetup& s) {
  uint64_t budget = 0;
  bool full = false;
  return cuda_chosen(s, &budget, &full);
}

ContextChoice plan_context(BackendSetup& s, const ModelWeights& w, int64_t requested, int64_t needed, int slots,
                           bool needed_is_all) {
  check_kv_head_dim(s.kv_type, w.cfg.head_dim);
  ContextChoice c;
  if (w.file == nullptr) {  // weights not from a file (tests): the model's context, no memory check
    c.ctx = requested > 0 ? requested : std::max<int64_t>(w.cfg.n_ctx_train, needed);
  } else {
    const ModelHParams hp = inspect_hparams(*w.file);
    const KvCost cost = kv_cost(hp, kv_bytes_per_32(s.kv_type));
    c = choose_context(requested, needed, w.cfg.n_ctx_train, cost, context_memory(s, w), slots, needed_is_all);
  }
  if (c.capped && !s.quiet) std::fprintf(stderr, "moestream: %s\n", c.note.c_str());
  s.ctx = c.ctx;
  return c;
}

std::string context_cost_line(const ModelWeights& w, KvType type, int64_t ctx, int slots) {
  if (w.file == nullptr) return "context " + std::to_string(ctx) + " tokens";
  const ModelHParams hp = inspect_hparams(*w.file);
  const KvCost cost = kv_cost(hp, kv_bytes_per_32(type));
  return "context " + std::to_string(ctx) + " tokens" + (slots > 1 ? " x " + std::to_string(slots) + " slots" : "") +
         ": KV cache " + format_bytes(cost.bytes(ctx, slots)) + " (" + describe_kv_cost(hp, cost, kv_type_name(type)) +
         ")";
}

std::string batch_help() {
  return "prompt tokens per forward pass (0: chosen; CUDA: from the VRAM budget, so a tiered prompt's cold experts "
         "stream once per pass at a small share of its compute, bounded by the memory the budget leaves; at most " +
         std::to_string(kMaxBatch) + ")";
}

int backend_max_batch(const Backend& be) {
#ifdef MOESTREAM_HAVE_CUDA
  if (const auto* cb = dynamic_cast<const CudaBackend*>(&be)) return cb->max_batch();
#endif
  (void)be;
  return CpuBackend::Options{}.max_batch;  // what make_cpu gives it when -b is 0
}

std::string backend_device(const Backend& be, const ThreadPool& pool) {
#ifdef MOESTREAM_HAVE_CUDA
  if (const auto* cb = dynamic_cast<const CudaBackend*>(&be)) return cb->device_description();
#else
  (void)be;
#endif
  return cpu_model_name() + ", " + std::to_string(pool.size()) + " threads";
}

}  // namespace ms::cli
