// `--backend cpu|cuda` for the commands that run a model: picks the forward
// pass and builds it. The default (empty name) is cuda when this build has
// the CUDA backend and a device is found, else cpu (with a one-line notice
// on stderr saying why). `--backend cuda` asked for explicitly and not
// usable (no CUDA in this build, no usable device, the model does not fit)
// is an error naming why: a user who asked for the GPU must not get a
// silent CPU run. `--kv-type f16|f32|q8_0` picks the KV cache's element type
// (both backends; the CUDA backend sizes its device cache for it).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "cuda/backend/cuda_options.h"
#include "engine/backend.h"
#include "model/context_plan.h"
#include "model/weights.h"

namespace CLI {
class App;
}

namespace ms::cli {

// The heading of the tuning flags in --help: switches of measured choices,
// for A/B runs and debugging. The defaults are the measured best
// (bench/results/cuda_bench.md, hybrid_bench.md, cpu_bench.md).
inline const char* tuning_group() { return "Tuning (defaults are measured best)"; }
// The most transit slots --transit-slots takes (per slot pool).
constexpr uint32_t kMaxTransitSlots = 4096;

// `--vram`, the options of tiered experts (CUDA backend) and the tuning
// flags of the commands that run a model. The flags bind straight to the
// typed options (cuda/backend/cuda_options.h); names (--host-pin, --prefetch,
// --cost) are parsed into their types when the command line is.
struct VramSetup {
  std::string budget;   // "" (free memory less a margin), "full", or bytes ("8G", "8000M"), or "ID:BYTES"
  // --devices: the GPUs asked for (cli/device_flags.h). One runs (the
  // CUDA backend's device); several are refused until multi-GPU execution
  // is built (issue #45). Empty: device 0.
  std::vector<int> devices;
  std::string profile;  // --profile FILE: initial placement, hottest first (loaded by make_backend)
  // The CUDA backend's options as the flags set them; cuda_options() adds
  // the budget and the sizes of BackendSetup.
  CudaOptions cuda;
  int spin_us = -1;     // --spin-us N: the CPU pool's (-1: ThreadPool::kDefaultSpinUs)
};

struct BackendSetup {
  std::string requested;  // "", "cpu", "cuda"
  int64_t ctx = 0;        // the longest sequence this run needs (sizes the device KV cache)
  // Prompt tokens per forward pass. 0: the backend's choice (CUDA: from the
  // budget, the link and the compute rate, experts/pass_size.h; CPU:
  // cpu_max_batch if set, else its default).
  int max_batch = 0;
  int cpu_max_batch = 0;
  bool quiet = false;     // no notice on fallback
  KvType kv_type = KvType::F16;  // the cache make_cache will be asked for (CUDA: sizes the device cache)
  // Sequences whose caches may be live at once (serve's --parallel): the CUDA
  // backend allocates this many device states (CudaBackend::Options::n_seq)
  // and plans the VRAM budget for them; the CPU backend has no such limit.
  int n_seq = 1;
  VramSetup vram;
};

// The CLI11 check for --backend values.
inline const char* backend_help() { return "cpu or cuda (default: cuda when built with CUDA and a GPU is found)"; }

// Adds `--kv-type f16|f32|q8_0` to a command, stored in *type (default F16).
void add_kv_type_option(CLI::App& sub, KvType* type);

// Adds --vram, --policy, --profile, --host-pin, --prefetch, --cost (and
// --verbose-steps when `steps`) to a command, and the tuning flags (under
// tuning_group()), all bound to *v.
void add_vram_options(CLI::App& sub, VramSetup* v, bool steps);
// "8G" / "8000M" / "full" / "" checked; throws ms::Error with the accepted forms.
// "1:8G" (a budget for device 1, with --devices 1) gives the size; which
// device it names is check_vram_options' to check.
uint64_t parse_vram(const std::string& text, bool* full);
// "1.5G,8G,full": every item checked as parse_vram does, up front (the error
// names the bad item); one item (or "") gives a list of one.
std::vector<std::string> parse_vram_list(const std::string& text);

// --devices and --vram checked together (more than one device is refused:
// multi-GPU execution is not built yet; a budget of the form ID:BYTES must
// name the device of --devices); returns the device to run on.
int check_vram_devices(const VramSetup& v);

// --vram and --policy checked before a model is opened, on either backend
// (a typo used to be taken silently by the CPU backend, which ignores them;
// --host-pin, --prefetch and --cost are checked as they are parsed). Throws
// ms::Error naming the flag and what it accepts.
void check_vram_options(const VramSetup& v);

// The CUDA backend's options for a setup: the flags' (setup.vram.cuda) with
// the budget parsed (throws as parse_vram) and the context, pass size,
// sequences and KV type of the setup. The profile and the CPU pool are
// make_backend's to add (they need the model and the pool). Pure: the seam
// tests/cli/tuning_flags_test.cpp checks every flag through.
CudaOptions cuda_options(const BackendSetup& setup);

// Upper bounds of the size flags: more threads than this many per core only
// cost (and 100000 used to exhaust the machine's processes); a batch or a
// context this large is a typo that would allocate without bound.
constexpr int kMaxThreadsPerCore = 4;
constexpr int kMaxBatch = 16384;
constexpr int64_t kMaxCtx = int64_t{1} << 20;
// The most -t accepts on this machine: kMaxThreadsPerCore x the hardware threads.
int max_threads();

// The size flags `run` and `serve` share, checked the same way (a negative
// value used to be taken silently): 0 <= --ctx <= kMaxCtx (0: the model's),
// 0 <= -t <= max_threads() (0: all cores), 0 <= -b <= kMaxBatch (0: chosen). Throws
// ms::Error naming the flag and the bound.
void check_size_flags(int64_t ctx, int threads, int batch);
// -t alone (commands without --ctx/-b).
void check_threads_flag(int threads);
// The help of -b for run, serve and bench (0: the backend chooses).
std::string batch_help();
// Prompt tokens per forward pass of a backend made by make_backend with -b 0.
int backend_max_batch(const Backend& be);

// Tells on stderr (unless quiet) when the pool got fewer threads than -t
// asked for (the OS refused some).
void report_thread_shortfall(const ThreadPool& pool, bool quiet);

std::unique_ptr<Backend> make_backend(const BackendSetup& setup, const ModelWeights& w, ThreadPool& pool);

// The context of run, serve and logits (model/context_plan.h): `requested`
// (--ctx; 0: the model's trained context where memory allows, else the
// largest that fits, said in one line on stderr unless quiet), for `slots`
// sequences, at least `needed` tokens (the prompt and -n; 0: none known),
// against the memory of the backend make_backend(setup) will build: the
// machine's free RAM (CPU), or the VRAM budget less dense weights and the
// reserve (CUDA). Throws naming --ctx and the largest context that fits when
// an explicit one does not. Sets setup.ctx to the choice and returns it.
ContextChoice plan_context(BackendSetup& setup, const ModelWeights& w, int64_t requested, int64_t needed, int slots,
                           bool needed_is_all = false);
// "context 40960 tokens: KV cache 3.75 GiB (f16, 96.0 MiB per 1k tokens: ...)": what a context costs.
std::string context_cost_line(const ModelWeights& w, KvType type, int64_t ctx, int slots);
// Whether make_backend(setup) will build the CUDA backend (asked for, or the
// default choice with a device found).
bool will_use_cuda(const BackendSetup& setup);
// Free RAM (MemAvailable), in bytes; 0 when unknown.
uint64_t available_ram();

// One line describing where the backend runs: the GPU's name, or
// "CPU <model>, N threads".
std::string backend_device(const Backend& be, const ThreadPool& pool);

// Whether this build has the CUDA backend.
bool cuda_built();

}  // namespace ms::cli
