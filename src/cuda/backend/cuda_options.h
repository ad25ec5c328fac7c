// The CUDA backend's options, one typed object per layer: CudaOptions for
// the backend (passes, kernels, the KV cache, the VRAM budget), holding
// TieredOptions for the tiered expert step (hybrid_moe.h), which holds the
// scheduler's StepTuning (experts/step_scheduler.h). The CLI fills them once
// (src/cli/backend_choice.h: its flags bind to these fields, the names it
// takes are parsed into these types there); each layer takes its part by
// const reference instead of a copy field by field.
// No CUDA here: the CLI builds and tests these on any build.
#pragma once
#include <cstdint>
#include <string>

#include "cpu/thread_pool.h"
#include "cuda/host_pin.h"
#include "cuda/launch_defaults.h"
#include "engine/kv_cache.h"
#include "experts/profile.h"
#include "experts/step_scheduler.h"

namespace ms {

// The tiered expert step (`--vram` below the model's size): VRAM slots, PCIe
// streaming and the CPU (hybrid_moe.h).
struct TieredOptions {
  // Expert cache policy: a name of experts/policy.h's policy_names(), or
  // "default" (engine_default_policy: by whether a profile is given).
  std::string policy = "default";
  cuda::HostPin host_pin = cuda::HostPin::Auto;
  const ExpertProfile* profile = nullptr;  // initial placement: hottest first
  // Per slot pool, for streamed-not-kept experts; 0: chosen
  // (StepScheduler::choose_transit_slots: a small ring when passes are
  // small, else the lead a prompt's copies may take over its compute,
  // prompt staging, hybrid_moe.h).
  uint32_t transit_slots = 0;
  StepTuning step;  // the scheduler's choices: prefetch, prompt staging, the CPU's share, cost figures
  // Decode as one graph that checks residency on the GPU and waits for the
  // host only on a miss (hybrid_moe.h); false: a round trip per tiered layer
  // (A/B runs, tests).
  bool gated = true;
  // Pinned layers take the all-resident expert kernels on prompt batches
  // too, in the hybrid step's idle buffers; false: only up to the decode
  // scratch, larger batches through HybridMoe::run (A/B runs).
  bool pinned_prompt_kernels = true;
  // At most this many tokens per launch of those kernels (0: as many as the
  // lent scratch holds; tests and A/B runs of the sub-batched pass).
  int pinned_batch_cap = 0;
  bool verbose_steps = false;  // one stderr line per forward pass, and the start-up's stages
  // Diagnostics (stderr): the gated serve's host time per part, at exit;
  // the link timeline of prompt passes (0 off, 1 a line per pass, 2 also a
  // line per planned layer).
  bool serve_profile = false;
  int link_timeline = 0;
  ThreadPool* pool = nullptr;  // CPU experts (null: the backend makes one of hardware threads)
};

struct CudaOptions {
  int device = 0;
  int64_t ctx = 0;  // device KV capacity in tokens per sequence (0: min(model context, 4096))
  // Sequence states on the device (serve's --parallel): caches that may be
  // live at once, each with its own K/V (ctx positions) and recurrent state.
  int n_seq = 1;
  // Prompt tokens per forward pass (longer inputs are split into passes of
  // equal size). 0: chosen from the budget (experts/pass_size.h): up to
  // 8192 when every expert is resident; tiered, the smallest pass whose
  // once-per-pass streaming of the cold experts stays a small share of its
  // compute, bounded by the VRAM its buffers may take and by the context.
  int max_batch = 0;
  // Batches of at least this many tokens take the tensor-core matmul:
  // dense projections, the head and the routed experts (all-resident and
  // pinned layers through ExpertWeights::gemm_min_tokens; the tiered step).
  int gemm_min_batch = cuda::kGemmMinTokens;
  bool use_graph = true;  // replay decode steps from a captured CUDA graph
  // decode: q/k norm + rope + cache append in one launch (decode_fused.h);
  // the experts' down projection + weighted sum in one (matvec.h)
  bool fused_decode = true;
  // Batches: q/k norms, RoPE and the cache append in one launch (prefill_fused.h).
  bool fused_prefill = true;
  // Decode: time each step (GPU, forward() call, the caller's gap between
  // steps) and print the means to stderr when the backend goes (debugging
  // and profiling; two events per step).
  bool step_timing = false;
  // The device KV cache in f32 (KvType::F32): keys and values exactly as
  // computed (parity with f32 references), twice the bytes of the default
  // f16. make_cache switches it to the type asked for.
  bool kv_f32 = false;
  // The device KV cache's type when kv_f32 is false (Q8_0: 34/64 of f16's
  // bytes): the cache is allocated, and the VRAM budget planned, for it.
  KvType kv_type = KvType::F16;

  // ---- VRAM budget (what `--vram` sets)
  // Bytes of device memory this backend may use (weights, KV cache,
  // activations, expert slots; the CUDA context comes out of the reserve
  // model/tensor_roles.h counts). 0: free memory minus
  // CudaBackend::kAutoMargin. When the whole model fits the budget, every
  // expert is resident (the fused, graph-replayed path); otherwise routed
  // experts are tiered (`tiered` below). A budget below the dense weights +
  // KV + reserve throws, naming the minimum.
  uint64_t vram_budget = 0;
  bool vram_full = false;  // every expert resident, whatever the budget (`--vram full`)
  TieredOptions tiered;
};

}  // namespace ms
