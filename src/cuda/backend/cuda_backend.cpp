// CudaBackend: setup (device, VRAM budget, weights, KV cache, activations,
// the hybrid step when experts are tiered) and the public API. The forward
// pass itself is in layer_recipe.cpp; the device storage in its own objects
// (cuda_backend_impl.h lists them).
// Host code only: every kernel is reached through the launchers of src/cuda.
#include "cuda/backend/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cuda/attention.h"
#include "cuda/attention_multi.h"
#include "cuda/backend/cuda_backend_impl.h"
#include "cuda/backend/device_state_store.h"
#include "cuda/backend/mtp_on_host.h"
#include "cuda/device.h"
#include "cuda/expert_ffn.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "cuda/quant_tables.h"
#include "experts/policy.h"
#include "experts/step_scheduler.h"
#include "format/gguf.h"
#include "model/context_plan.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "util/bytes.h"
#include "util/error.h"

namespace ms {

CudaBackend::Impl::~Impl() {
  if (timing.on && timing.steps > 1)
    std::fprintf(stderr,
                 "moestream cuda timing: %d decode steps: GPU (step launch to end) %.3f ms/step, forward() %.3f "
                 "ms/step (incl. logits copy), caller between steps %.3f ms/step\n",
                 timing.steps, timing.gpu_ms / timing.steps, timing.call_ms / timing.steps,
                 timing.between_ms / (timing.steps - 1));
}

// ---------------------------------------------------------------- setup
namespace {

// The recurrent (Gated DeltaNet) layers of a hybrid and their state's size
// (empty for models without them).
// The device KV cache's type from the options (kv_f32 wins).
KvType device_kv_type(const CudaBackend::Options& o) { return o.kv_f32 ? KvType::F32 : o.kv_type; }

cuda::RecurrentShape recurrent_shape(const ModelConfig& c) {
  cuda::RecurrentShape r;
  if (c.linear_layer.empty()) return r;
  r.recurrent = c.linear_layer;
  r.conv_elems = static_cast<int64_t>(c.lin.conv_kernel - 1) * c.lin.conv_dim();
  r.state_elems = static_cast<int64_t>(c.lin.n_v_heads) * c.lin.head_v * c.lin.head_k;
  return r;
}

}  // namespace

// The VRAM budget against what the model needs (the same sums as
// `moestream inspect --vram`): throws below the minimum; sets `tiered` when
// the routed experts do not all fit.
VramPlan CudaBackend::Impl::plan_budget(int64_t kv_ctx) {
  VramPlan plan;
  if (opt.vram_full || !c.is_moe()) return plan;
  if (w.file == nullptr) return plan;  // weights not from a file: nothing to stream from
  budget = opt.vram_budget;
  const bool automatic = budget == 0;
  if (automatic) {
    const uint64_t free_now = cuda::free_device_bytes();
    budget = free_now > CudaBackend::kAutoMargin ? free_now - CudaBackend::kAutoMargin : 0;
  }
  const WeightSplit split = split_weights(*w.file);
  const ModelHParams hp = inspect_hparams(*w.file);
  const int kv_b32 = kv_bytes_per_32(device_kv_type(opt));
  // n_seq sequence states: K/V for n_seq x kv_ctx positions, and n_seq
  // recurrent states where plan_vram counts one (the extra ones come out of
  // the budget it plans with, and go back into the plan's figures).
  const int ns = opt.n_seq;
  const uint64_t extra_rec = hp.recurrent_state_bytes() * static_cast<uint64_t>(ns - 1);
  plan = plan_vram(split, hp, budget > extra_rec ? budget - extra_rec : 0, kv_ctx * ns, kv_b32);
  plan.budget = budget;
  plan.kv_bytes += extra_rec;
  plan.minimum_bytes += extra_rec;
  plan.everything_bytes += extra_rec;
  if (!plan.fits_minimum) {
    // The largest context this budget holds (per sequence, for n_seq of
    // them): the KV bytes per token from the plan itself (whatever the cache
    // type), the fixed recurrent state at 0.
    const VramPlan at0 = vram_needs(split, hp, 0, kv_b32);
    const uint64_t rec_all = at0.kv_bytes * static_cast<uint64_t>(ns);
    const KvCost cost{kv_ctx > 0 ? (plan.kv_bytes - rec_all) / static_cast<uint64_t>(kv_ctx * ns) : 0, at0.kv_bytes};
    const uint64_t fixed = plan.dense_bytes + plan.reserve_bytes;
    const int64_t fit = budget > fixed ? largest_context(cost, budget - fixed, ns) : 0;
    throw Error(std::string(automatic ? "the GPU's free memory less a " + format_bytes(CudaBackend::kAutoMargin) +
                                            " margin (" + format_bytes(budget) + ")"
                                      : "--vram " + format_bytes(budget)) +
                " is too small: this model needs at least " + format_bytes(plan.minimum_bytes) +
                " for dense weights + KV at ctx " + std::to_string(kv_ctx) +
                (ns > 1 ? " x " + std::to_string(ns) + " sequences" : std::string()) + " (dense " +
                format_bytes(plan.dense_bytes) + ", KV " + format_bytes(plan.kv_bytes) + ", reserve " +
                format_bytes(plan.reserve_bytes) + "); " +
                (fit > 0 ? "the largest context that fits is " + std::to_string(fit) + " tokens" +
                               (ns > 1 ? " per sequence" : "") + ": lower --ctx"
                         : "no context fits") +
                " or raise --vram");
  }
  tiered = !plan.fits_everything;
  return plan;
}

// The slot pool is what the budget leaves after the dense weights, the KV
// cache, the activations and the hybrid step's buffers; up to half the
// reserve (the other half is for the CUDA context) absorbs those buffers.
void CudaBackend::Impl::make_hybrid(const VramPlan& plan) {
  uint64_t largest = 0;
  std::map<uint64_t, int> sizes;
  for (const LayerWeights& L : w.layers)
    if (L.experts.n_expert > 0) {
      const uint64_t b = HybridMoe::slot_bytes(L.experts);
      largest = std::max(largest, b);
      sizes[b] = 1;
    }
  const uint64_t fixed = plan.dense_bytes + plan.kv_bytes + plan.reserve_bytes / 2;
  // Bytes beyond `fixed` that the step's buffers with `transit` slots take.
  auto over_with = [&](uint32_t transit) {
    const uint32_t extra = transit + 2 * HybridMoe::stage_bank(c, opt.tiered.step.prefetch);
    const uint64_t used = weight_bytes() + kv.bytes() + act_arena.capacity() +
                          HybridMoe::buffer_bytes(c, B, extra, largest, sizes.size(), pass_chunk_rows);
    return used > fixed ? used - fixed : 0;
  };
  // Prompt-sized passes take the larger transit ring where the budget has
  // room for it (it comes out of the cache slots).
  const uint32_t transit = StepScheduler::choose_transit_slots(
      opt.tiered.transit_slots, B, c.n_expert, [&](uint32_t t) { return over_with(t) <= plan.room; });
  const uint64_t over = over_with(transit);
  HybridMoeOptions ho(opt.tiered);
  if (ho.policy == "default") ho.policy = engine_default_policy(ho.profile != nullptr);
  ho.transit_slots = transit;
  ho.pool_bytes = plan.room - std::min(plan.room, over);
  ho.max_tokens = B;
  ho.chunk_rows = pass_chunk_rows;
  ho.gemm_min_batch = opt.gemm_min_batch;
  // gpt-oss: the slot tables point at the experts' biases, resident with the
  // dense weights (in weight_bytes() above; the plan counts them as dense).
  for (int il = 0; il < c.n_layer; ++il)
    ho.expert_bias.push_back(cuda::expert_bias(weights.layer(il), moe_blocks[static_cast<size_t>(il)]));
  hybrid = std::make_unique<HybridMoe>(w, ho, stream);
  // Pinned layers run the all-resident expert kernels, in the step's scratch.
  exp_scratch = hybrid->scratch(exp_scratch_bytes, opt.tiered.pinned_prompt_kernels);
}

void CudaBackend::Impl::check_types() const {
  auto need = [&](const TensorView& t) {
    if (t && !cuda::matvec_supported(t.type))
      throw Error("CUDA backend: tensor " + t.name + " is " + type_name(t.type) +
                  ", which the CUDA kernels do not support; use --backend cpu");
  };
  if (!cuda::embed_supported(w.token_embd.type))
    throw Error(std::string("CUDA backend: token_embd is ") + type_name(w.token_embd.type) +
                ", which the CUDA embedding lookup does not support; use --backend cpu");
  need(w.output);
  for (const LayerWeights& L : w.layers) {
    for (const TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.router,
                                &L.ssm_qkv, &L.ssm_z, &L.ssm_alpha, &L.ssm_beta, &L.ssm_out, &L.shexp_gate,
                                &L.shexp_up, &L.shexp_down, &L.shexp_router})
      need(*t);
    if (c.is_moe())
      for (DType t : {L.experts.gate_type, L.experts.up_type, L.experts.down_type})
        if (!cuda::matvec_supported(t))
          throw Error(std::string("CUDA backend: expert weights of type ") + type_name(t) +
                      " are not supported by the CUDA kernels; use --backend cpu");
  }
  if (c.n_embd % 32 != 0 || (static_cast<int64_t>(c.n_head) * c.head_dim) % 32 != 0)
    throw Error("CUDA backend: n_embd and n_head*head_dim must be multiples of 32");
  if (c.is_moe() && c.n_ff_exp % 32 != 0) throw Error("CUDA backend: the expert FFN width must be a multiple of 32");
  if (!c.is_moe() && c.n_ff % 32 != 0) throw Error("CUDA backend: the FFN width must be a multiple of 32");
  check_hybrid_arch();
}

void CudaBackend::Impl::layout_activations(cuda::Layout& L) {
  const size_t b = static_cast<size_t>(B), D = static_cast<size_t>(c.n_embd);
  const size_t qd = static_cast<size_t>(c.n_head) * c.head_dim, kvd = static_cast<size_t>(c.n_head_kv) * c.head_dim;
  h = L.take_n<float>(b * D);
  x = L.take_n<float>(b * D);
  qkv = L.take_n<float>(qd + 2 * kvd);
  tok = L.take_n<int32_t>(b);
  pos = L.take_n<int32_t>(b);
  step_in = L.take_n<int32_t>(4);
  run_kv_len = L.take_n<int32_t>(b);
  row_slot = L.take_n<int32_t>(b);
  if (opt.n_seq > 1 && cuda::attention_decode_multi_supported(attn_shape())) {
    // A pass of one token per sequence has at most n_seq rows.
    multi_rows = std::min(B, opt.n_seq);
    multi_attn_scratch =
        L.take(cuda::attention_decode_multi_scratch_bytes(attn_shape(), multi_rows, static_cast<int>(kv.ctx())));
  }
  router_counter = L.take_n<uint32_t>(1);
  logits = L.take_n<float>(static_cast<size_t>(kLogitRows) * c.n_vocab);
  xq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(c.n_embd, B)), c.n_embd, B);
  attn_scratch = L.take(cuda::attention_decode_scratch_bytes(attn_shape(), static_cast<int>(kv.ctx())));
  // An attention block's per-token buffers and a Gated DeltaNet block's are
  // never live together: a layer is one kind, and a block's buffers are dead
  // once it has added its output to h (one stream). In a model of both kinds
  // (qwen35moe) they share one region, which a long pass's per-token bytes
  // (and so the prompt pass a VRAM budget allows) feel.
  const size_t block_region = L.used;
  q = L.take_n<float>(b * qd);
  k = L.take_n<float>(b * kvd);
  v = L.take_n<float>(b * kvd);
  att = L.take_n<float>(b * qd);
  attq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(static_cast<int64_t>(qd), B)), static_cast<int64_t>(qd), B);
  if (output_gate) {
    // Batches: [n][2 * q_dim]; decode: one stacked Wq|Wk|Wv row.
    q_gate = L.take_n<float>(std::max(b * 2 * qd, 2 * qd + 2 * kvd));
    gate = L.take_n<float>(b * qd);
  }
  if (!c.linear_layer.empty()) {
    const size_t attention_end = L.used;
    L.used = block_region;
    const size_t CD = static_cast<size_t>(c.lin.conv_dim()), VD = static_cast<size_t>(c.lin.value_dim());
    const size_t nv = static_cast<size_t>(c.lin.n_v_heads);
    lin_qkv = L.take_n<float>(b * CD);
    lin_conv = L.take_n<float>(b * CD);
    lin_z = L.take_n<float>(b * VD);
    lin_out = L.take_n<float>(b * VD);
    lin_a = L.take_n<float>(b * nv);
    lin_b = L.take_n<float>(b * nv);
    lin_g = L.take_n<float>(b * nv);
    lin_beta = L.take_n<float>(b * nv);
    linq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(c.lin.value_dim(), B)), c.lin.value_dim(), B);
    L.used = std::max(L.used, attention_end);
  }
  if (c.n_ff_shexp > 0) {
    const size_t F = static_cast<size_t>(c.n_ff_shexp);
    sh_g = L.take_n<float>(b * F);
    sh_u = L.take_n<float>(b * F);
    sh_score = L.take_n<float>(b);
    shq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(c.n_ff_shexp, B)), c.n_ff_shexp, B);
  }
  if (c.is_moe()) {
    const size_t E = static_cast<size_t>(c.n_expert), K = static_cast<size_t>(c.n_expert_used);
    router_logits = L.take_n<float>(b * E);
    // Two tokens' worth at least: decode puts the next tiered layer's
    // predicted experts (prefetch) right after the routes, read back together.
    route_w = L.take_n<float>(std::max<size_t>(b, 2) * K);
    route_ids = L.take_n<int32_t>(std::max<size_t>(b, 2) * K);
    // expert_ffn runs every batch (it groups by expert itself). Tiered
    // experts use the hybrid step's own buffers instead.
    if (!tiered) {
      // Sized as the recipe runs the experts: gpt-oss's biases / clamped
      // SwiGLU are set per call (layer_recipe.cpp) and keep gate and up apart.
      cuda::ExpertWeights sized = experts.weights(0);
      if (c.arch->expert_bias || c.arch->clamped_swiglu) sized.clamped_swiglu = true;
      exp_scratch_bytes = cuda::expert_ffn_scratch_bytes(sized, B, c.n_expert_used);
      exp_scratch = L.take(exp_scratch_bytes);
    }
  } else {
    const size_t F = static_cast<size_t>(c.n_ff);
    ffg = L.take_n<float>(b * F);
    ffu = L.take_n<float>(b * F);
    ffq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(c.n_ff, B)), c.n_ff, B);
  }
}

void CudaBackend::Impl::allocate_activations() {
  cuda::Layout measure;
  layout_activations(measure);
  act_arena = cuda::DeviceArena("activations", measure.used);
  cuda::Layout bind;
  bind.base = reinterpret_cast<uintptr_t>(act_arena.alloc(measure.used, cuda::kArenaAlign));
  layout_activations(bind);
  // router_counter and the attention scratch's counters start at 0 (the constructor syncs after this)
  MS_CUDA_CHECK(cudaMemset(act_arena.base(), 0, act_arena.capacity()));
  host_in = cuda::PinnedBuffer(sizeof(int32_t) * 4 * static_cast<size_t>(B) + 64);
  host_logits = cuda::PinnedBuffer(sizeof(float) * kLogitRows * static_cast<size_t>(c.n_vocab));
  copy_done.clear();
  for (int i = 0; i < kCopyChunks; ++i) copy_done.emplace_back(false);
  if (opt.step_timing) {
    timing.on = true;
    timing.t0 = std::make_unique<cuda::Event>(true);
    timing.t1 = std::make_unique<cuda::Event>(true);
  }
}


cuda::AttentionShape CudaBackend::Impl::attn_shape() const {
  return {c.n_head, c.n_head_kv, c.head_dim, kv.ctx(), 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
}

// Switches the device cache to another element type (reallocating it,
// contents lost); the decode graph holds the old cache's addresses, so it
// goes too.
void CudaBackend::Impl::set_kv_type(KvType type) {
  if (type == kv.type()) return;
  MS_CUDA_CHECK(cudaStreamSynchronize(stream));
  graph.reset();
  for (auto& g : hybrid_graphs) g->reset();
  seq_graph.reset();
  seq_graph_key.clear();
  kv.reallocate(type);
}

// ---------------------------------------------------------------- the API
CudaBackend::CudaBackend(const ModelWeights& w, Options opt) : impl_(std::make_unique<Impl>(w, opt)) {
  Impl& m = *impl_;
  std::string why;
  const int n_dev = cuda::device_count(&why);
  if (n_dev == 0) throw Error("CUDA backend: no usable CUDA device (" + why + "); use --backend cpu");
  if (opt.device < 0 || opt.device >= n_dev)
    throw Error("CUDA backend: device " + std::to_string(opt.device) + " does not exist (" + std::to_string(n_dev) +
                " found)");
  MS_CUDA_CHECK(cudaSetDevice(opt.device));
  m.info = cuda::device_info(opt.device);
  const ModelConfig& c = w.cfg;
  const int64_t kv_ctx = opt.ctx > 0 ? opt.ctx : std::min<int64_t>(c.n_ctx_train > 0 ? c.n_ctx_train : 4096, 4096);
  if (kv_ctx > (int64_t{1} << 30)) throw Error("CUDA backend: context too large");
  if (opt.max_batch < 0) throw Error("CUDA backend: max_batch must be >= 0 (0: chosen from the budget)");
  if (opt.n_seq < 1 || opt.n_seq > 4096)
    throw Error("CUDA backend: " + std::to_string(opt.n_seq) + " sequences (--parallel) asked for; 1 to 4096");
  if (opt.n_seq > 1) m.slots = std::make_shared<SeqSlotPool>(opt.n_seq);
  m.B = std::max(1, opt.max_batch);
  m.opt.gemm_min_batch = std::max(2, opt.gemm_min_batch);
  m.check_types();
  cuda::prepare_quant_tables();  // IQ lookup tables on the device before any graph capture
  m.stream_owner = std::make_unique<cuda::Stream>();
  m.stream = m.stream_owner->get();
  const VramPlan plan = m.plan_budget(kv_ctx);
  try {
    m.weights = cuda::DeviceWeights::upload(w);
    if (c.is_moe() && !m.tiered) m.experts = cuda::ResidentExperts(w);
    m.kv = cuda::DeviceKvCache(c.n_layer, c.n_head_kv, c.head_dim, kv_ctx, device_kv_type(opt), recurrent_shape(c),
                               opt.n_seq);
    if (opt.max_batch == 0) {
      m.B = m.choose_batch(plan, kv_ctx);
      m.pass_chosen = true;
    } else {
      m.pass.tokens = m.B;
      m.pass.why = "prompt passes of " + std::to_string(m.B) + " tokens (given: -b / max_batch)";
    }
    m.opt.max_batch = m.B;
    m.allocate_activations();
    if (m.tiered) m.make_hybrid(plan);
  } catch (const Error& e) {
    if (m.tiered) throw;
    throw Error(std::string(e.what()) + "; the whole model does not fit the GPU: give a VRAM budget (--vram) to "
                "keep routed experts in host memory, or use --backend cpu or a smaller --ctx");
  }
  MS_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaBackend::~CudaBackend() = default;

const ModelConfig& CudaBackend::config() const { return impl_->c; }
void CudaBackend::set_route_hook(RouteHook hook, bool want_hidden) {
  impl_->route_hook = std::move(hook);
  impl_->route_hook_hidden = want_hidden;
}

int64_t CudaBackend::ctx_capacity() const { return impl_->kv.ctx(); }
int CudaBackend::max_batch() const { return impl_->B; }
std::string CudaBackend::batch_reason() const { return impl_->pass.why; }
int CudaBackend::graph_captures() const { return impl_->graph.captures() + impl_->seq_graph.captures(); }
uint64_t CudaBackend::pinned_split_passes() const { return impl_->pinned_splits; }
std::string CudaBackend::device_description() const { return cuda::describe(impl_->info); }
std::string CudaBackend::device_name() const { return impl_->info.name; }

CudaBackend::MemoryUse CudaBackend::memory_use() const {
  return {impl_->weight_bytes(), impl_->kv.bytes(), impl_->act_arena.capacity(),
          impl_->hybrid ? impl_->hybrid->device_bytes() : 0};
}

ExpertTelemetry CudaBackend::expert_telemetry() const {
  if (!impl_->hybrid) return {};
  ExpertTelemetry t = impl_->hybrid->telemetry();
  t.budget_bytes = impl_->budget;
  return t;
}

KvCache CudaBackend::make_cache(int64_t ctx, KvType type) const {
  if (ctx <= 0) throw Error("KV cache: the context must be positive");
  check_kv_head_dim(type, impl_->c.head_dim);
  if (ctx > impl_->kv.ctx())
    throw Error("CUDA backend: a context of " + std::to_string(ctx) + " tokens does not fit the device KV cache of " +
                std::to_string(impl_->kv.ctx()) + " tokens (set CudaBackend::Options::ctx / --ctx)");
  // The device cache has one element type: asking for another reallocates
  // it (Options::kv_f32 sizes the right one up front), which no live
  // sequence of a multi-sequence backend may lose.
  if (type != impl_->kv.type() && impl_->slots && impl_->slots->in_use() > 0)
    throw Error(std::string("CUDA backend: a ") + kv_type_name(type) + " cache asked for while " +
                std::to_string(impl_->slots->in_use()) + " sequences hold " + kv_type_name(impl_->kv.type()) +
                " ones (the device's caches share one type: set --kv-type)");
  impl_->set_kv_type(type);
  // Keys and values live in the device arena; this cache only counts positions
  // (and says which type it was made for). Hybrids: it also marks the
  // recurrent layers (with no state of their own here: it is on the device),
  // so it refuses to rewind as the CPU's does (truncate keeps all or none).
  // Its rows are the smallest the type allows (q8_0: one block of 32).
  const ModelConfig& c = impl_->c;
  const int row = type == KvType::Q8_0 ? QK : 1;
  // One sequence state: every cache maps to it. Several: a free one, held by
  // the cache until it goes (SeqSlot).
  const int n = impl_->opt.n_seq;
  SeqSlot slot = impl_->slots ? impl_->slots->acquire("the CUDA backend holds " + std::to_string(n) +
                                                      " sequences (--parallel " + std::to_string(n) +
                                                      "); all are in use")
                              : SeqSlot(0, nullptr);
  const int slot_index = slot.index();
  KvCache kv = c.linear_layer.empty() ? KvCache(1, 1, row, ctx, type) : [&] {
    RecurrentLayout rec;
    rec.recurrent = c.linear_layer;
    return KvCache(c.n_layer, 1, row, ctx, type, rec);
  }();
  kv.set_device_slot(std::move(slot));
  // The recurrent state's checkpoints (rollback) are the device's to copy.
  if (!c.linear_layer.empty())
    kv.set_state_store(std::make_shared<cuda::DeviceStateStore>(impl_->kv, slot_index, impl_->stream));
  return kv;
}


int CudaBackend::max_sequences() const { return impl_->opt.n_seq; }

// The device slot a cache runs on (checked: a copied cache holds none).
namespace {
int slot_of(const KvCache& kv, int n_seq) {
  if (n_seq == 1) return 0;
  const int s = kv.device_slot();
  if (s < 0 || s >= n_seq)
    throw Error("CUDA backend: this KV cache holds none of the device's " + std::to_string(n_seq) +
                " sequence states (a copy of a cache, or one made by another backend); make it with make_cache");
  return s;
}
}  // namespace

// The device-side checks of one cache (forward, forward_seqs): made by this
// backend for the device cache's size and type.
static void check_device_cache(const KvCache& kv, const cuda::DeviceKvCache& dev) {
  if (kv.ctx() > dev.ctx())
    throw Error("CUDA backend: this KV cache holds " + std::to_string(kv.ctx()) + " positions, the device cache " +
                std::to_string(dev.ctx()) + "; make it with CudaBackend::make_cache");
  if (kv.type() != dev.type())
    throw Error(std::string("CUDA backend: this KV cache was made as ") + kv_type_name(kv.type()) +
                " but the device cache is now " + kv_type_name(dev.type()) +
                " (a later make_cache switched it; the device holds one cache)");
}

void CudaBackend::Impl::select_slot(int slot) {
  cur_slot = slot;
  if (slot == graph_slot) return;
  // The decode graphs hold the K/V (and recurrent state) addresses of the
  // slot they were captured for.
  MS_CUDA_CHECK(cudaStreamSynchronize(stream));
  graph.reset();
  for (auto& g : hybrid_graphs) g->reset();
  graph_slot = slot;
}

void CudaBackend::forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) {
  Impl& m = *impl_;
  const int64_t V = m.c.n_vocab;
  check_seq_tokens(seqs, V);
  const int ns = m.opt.n_seq;
  if (seqs.size() > 1 && static_cast<int>(seqs.size()) > ns)
    throw Error("forward_seqs: " + std::to_string(seqs.size()) + " sequences in one step, but the CUDA backend holds " +
                std::to_string(ns) + " (--parallel " + std::to_string(ns) + ")");
  std::vector<int> slot(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    check_device_cache(*seqs[i].kv, m.kv);
    slot[i] = slot_of(*seqs[i].kv, ns);
  }
  // A forward that keeps every token's state runs token by token (forward()),
  // entry after entry.
  for (const SeqTokens& s : seqs)
    if (s.kv->token_states_wanted()) return Backend::forward_seqs(seqs, logits);
  if (seqs.size() == 1) {  // forward() alone (the decode graph where it applies)
    std::vector<float> one;
    forward(*seqs[0].kv, seqs[0].tokens, one, seqs[0].all_logits);
    logits.clear();
    if (seqs[0].all_logits) logits = std::move(one);
    else if (seqs[0].want_logits) logits.assign(one.begin(), one.begin() + V);
    return;
  }
  // Distinct caches of one backend hold distinct slots; checked all the same
  // (two entries on one state would corrupt both).
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (slot[i] == slot[j])
        throw Error("forward_seqs: entries " + std::to_string(j) + " and " + std::to_string(i) +
                    " run on the same device sequence state");
  size_t n_want = 0;
  for (const SeqTokens& s : seqs) n_want += s.logit_rows();
  logits.assign(n_want * static_cast<size_t>(V), 0.0f);
  MS_CUDA_CHECK(cudaSetDevice(m.opt.device));
  // Passes of at most B tokens, entries in order (one may be split across
  // passes); each pass's wanted rows are consecutive entries' last tokens.
  std::vector<int32_t> toks;
  std::vector<int> want;
  std::vector<std::pair<size_t, int>> pieces;  // (entry, tokens) advanced after the pass
  size_t e = 0, off = 0, rank = 0;
  for (const SeqTokens& s : seqs) s.kv->begin_forward();
  while (e < seqs.size()) {
    toks.clear();
    want.clear();
    pieces.clear();
    m.runs.clear();
    const size_t first_rank = rank;
    while (e < seqs.size() && static_cast<int>(toks.size()) < m.B) {
      const SeqTokens& s = seqs[e];
      const size_t take = std::min(static_cast<size_t>(m.B) - toks.size(), s.tokens.size() - off);
      // A sequence starts: its slot's recurrent state starts from zeros.
      if (off == 0 && s.kv->n_past() == 0) m.kv.zero_recurrent(slot[e], m.stream);
      m.runs.push_back({static_cast<int>(toks.size()), static_cast<int>(take), slot[e], s.kv->n_past()});
      if (s.all_logits)  // a verify: every token's row
        for (size_t t = 0; t < take; ++t) {
          want.push_back(static_cast<int>(toks.size() + t));
          ++rank;
        }
      toks.insert(toks.end(), s.tokens.begin() + static_cast<std::ptrdiff_t>(off),
                  s.tokens.begin() + static_cast<std::ptrdiff_t>(off + take));
      pieces.emplace_back(e, static_cast<int>(take));
      off += take;
      if (off == s.tokens.size()) {
        if (s.want_logits && !s.all_logits) {
          want.push_back(static_cast<int>(toks.size()) - 1);
          ++rank;
        }
        ++e;
        off = 0;
      }
    }
    // The hidden hook (MTP drafting): every row of the pass, handed out per
    // entry as forward() hands out its passes' rows.
    float* rows = nullptr;
    if (mtp_ && mtp_->hook) {
      mtp_->pass_rows.resize(toks.size() * static_cast<size_t>(m.c.n_embd));
      rows = mtp_->pass_rows.data();
    }
    m.run_seqs(toks.data(), static_cast<int>(toks.size()), want,
               want.empty() ? nullptr : logits.data() + first_rank * static_cast<size_t>(V), rows);
    for (size_t j = 0; j < pieces.size(); ++j) {
      const auto& [entry, n] = pieces[j];
      KvCache& kv = *seqs[entry].kv;
      if (rows)
        mtp_->emit(kv, kv.n_past(), n, rows + static_cast<int64_t>(m.runs[j].row0) * m.c.n_embd,
                   m.w.output_norm.f32(), m.c.n_embd, m.c.rms_eps);
      kv.advance(n);
    }
  }
  for (const SeqTokens& s : seqs) s.kv->end_forward(static_cast<int64_t>(s.tokens.size()));
}

void CudaBackend::forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool all_logits) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  const int64_t n = static_cast<int64_t>(tokens.size());
  // A verify's drafts (mark_drafts, for this forward only): its last `drafts`
  // tokens, ranks 1.. (the tokens before: 0, certain).
  const int64_t drafts = m.hybrid ? std::min<int64_t>(pending_drafts_, n - 1) : 0;
  pending_drafts_ = 0;
  const auto rank_of = [&](int64_t i) { return static_cast<int32_t>(std::max<int64_t>(0, i - (n - 1 - drafts))); };
  if (n == 0) throw Error("forward: no tokens");
  check_device_cache(kv, m.kv);
  const int slot = slot_of(kv, m.opt.n_seq);
  kv.check_room(n);
  for (int32_t id : tokens)
    if (id < 0 || id >= c.n_vocab)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(c.n_vocab) +
                  " tokens)");
  const int64_t V = c.n_vocab;
  logits.resize(static_cast<size_t>((all_logits ? n : 1) * V));
  MS_CUDA_CHECK(cudaSetDevice(m.opt.device));
  m.select_slot(slot);
  // A sequence starts: the recurrent layers' state starts from zeros (the
  // CPU does the same at position 0). Outside any graph: a plain async memset.
  if (kv.n_past() == 0) m.kv.zero_recurrent(slot, m.stream);
  kv.begin_forward();
  // The passes after this forward are certain again, even if it throws.
  struct CertainAfter {
    HybridMoe* h;
    ~CertainAfter() {
      if (h) h->set_draft_ranks({});
    }
  } certain_after{drafts > 0 ? m.hybrid.get() : nullptr};
  if (kv.token_states_wanted()) {
    // Every token's state kept (a verify batch, a test of every position):
    // token by token through the decode step, each state copied after it.
    for (int64_t i = 0; i < n; ++i) {
      if (drafts > 0) {
        const int32_t rank[1] = {rank_of(i)};
        m.hybrid->set_draft_ranks(rank);
      }
      m.decode(tokens[static_cast<size_t>(i)], kv.n_past(), logits.data() + (all_logits ? i * V : 0));
      emit_hidden(kv, kv.n_past(), 1);
      kv.advance(1);
      const int e = kv.reserve_checkpoint(kv.n_past());
      if (e >= 0) kv.state_store()->save(e);
    }
    kv.end_forward(n);
    return;
  }
  if (n == 1) {
    m.decode(tokens[0], kv.n_past(), logits.data());
    emit_hidden(kv, kv.n_past(), 1);
    kv.advance(1);
    kv.end_forward(1);
    return;
  }
  // A chosen pass size splits a longer input into passes of equal size (8192
  // tokens at B = 7000: two of 4096, not 7000 + 1192, whose short second pass
  // could not hide the cold experts' copies behind its compute); a given one
  // into passes of B and the rest.
  const int64_t passes = (n + m.B - 1) / m.B;
  const int64_t per_pass = m.pass_chosen ? (n + passes - 1) / passes : m.B;
  for (int64_t done = 0; done < n;) {
    const int nb = static_cast<int>(std::min<int64_t>(per_pass, n - done));
    const bool last = done + nb == n;
    float* out = all_logits ? logits.data() + done * V : (last ? logits.data() : nullptr);
    if (drafts > 0) {  // a verify as one pass (attention-only models, or replay rollback)
      std::vector<int32_t> ranks(static_cast<size_t>(nb));
      for (int t = 0; t < nb; ++t) ranks[static_cast<size_t>(t)] = rank_of(done + t);
      m.hybrid->set_draft_ranks(ranks);
    }
    m.prefill(tokens.data() + done, nb, kv.n_past(), out, all_logits);
    emit_hidden(kv, kv.n_past(), nb);
    kv.advance(nb);
    done += nb;
  }
  kv.end_forward(n);
}

void CudaBackend::mark_drafts(const KvCache&, int n_drafts) {
  if (impl_->hybrid) pending_drafts_ = std::max(0, n_drafts);
}

void CudaBackend::confirm_drafts(const KvCache&, int accepted) {
  if (impl_->hybrid) impl_->hybrid->confirm_drafts(accepted);
}

void CudaBackend::fork(const KvCache& src, KvCache& dst) {
  Impl& m = *impl_;
  check_device_cache(src, m.kv);
  check_device_cache(dst, m.kv);
  const int a = slot_of(src, m.opt.n_seq), b = slot_of(dst, m.opt.n_seq);
  if (a == b)
    throw Error("fork: both caches run on one device sequence state (the CUDA backend holds " +
                std::to_string(m.opt.n_seq) + "; a fork needs two: --parallel 2 or more)");
  MS_CUDA_CHECK(cudaSetDevice(m.opt.device));
  m.kv.copy_slot(a, b, src.n_past(), m.stream);
  if (src.state_store() && dst.state_store()) dst.state_store()->copy_entries_from(*src.state_store());
  dst.copy_from(src);  // the positions and checkpoint bookkeeping (the host side of a device cache)
}

}  // namespace ms
