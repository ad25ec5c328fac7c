// CudaBackend: weights upload, device KV cache, decode (graph) and prefill.
// Host code only: every kernel is reached through the launchers of src/cuda.
#include "cuda/backend/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "cuda/attention.h"
#include "cuda/backend/decode_fused.h"
#include "cuda/backend/decode_moe.h"
#include "cuda/backend/hybrid_moe.h"
#include "cuda/backend/prefill_fused.h"
#include "cuda/device.h"
#include "cuda/expert_ffn.h"
#include "cuda/gemm.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "format/gguf.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "util/bytes.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }

// The attention launch of a decode graph covers this many positions more at
// a time; the graph is re-captured when the sequence outgrows it.
constexpr int kGraphKvStep = 256;
// Rows of logits computed (and copied back) per pass when every position's
// logits are asked for.
constexpr int kLogitRows = 16;

// A weight matrix in device memory.
struct DevMat {
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  explicit operator bool() const { return data != nullptr; }
  cuda::MatrixSet set() const {
    cuda::MatrixSet m;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    m.base = data;
    return m;
  }
};

struct DevLayer {
  DevMat wq, wk, wv, wo, ffn_gate, ffn_up, ffn_down, router;
  // Wq, Wk, Wv stored back to back when they share a type: decode computes
  // q|k|v in one launch (wq/wk/wv then point into it, for batches).
  DevMat wqkv;
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;
  cuda::ExpertWeights experts;
  // This layer's K and V cache, [n_kv][ctx][head_dim] of f16 or f32 (Impl::kv_f32).
  void *kc = nullptr, *vc = nullptr;
};

// Whether Wq, Wk, Wv can be one matrix of stacked rows: same type and width,
// and each part a multiple of 16 bytes (the matvec's alignment).
bool fusable_qkv(const LayerWeights& L) {
  return L.wq && L.wk && L.wv && L.wq.type == L.wk.type && L.wq.type == L.wv.type && L.wq.cols == L.wk.cols &&
         L.wq.cols == L.wv.cols && L.wq.nbytes % 16 == 0 && L.wk.nbytes % 16 == 0 && L.wq.data != L.wk.data &&
         L.wk.data != L.wv.data;
}

// Lays buffers out back to back: run once with base 0 to measure, once with
// the arena's base to bind.
struct Layout {
  uintptr_t base = 0;
  size_t used = 0;
  void* take(size_t bytes) {
    void* p = reinterpret_cast<void*>(base + used);
    used += align_up(bytes);
    return p;
  }
  template <class T>
  T* take_n(size_t n) {
    return static_cast<T*>(take(n * sizeof(T)));
  }
};

}  // namespace

struct CudaBackend::Impl {
  const ModelWeights& w;
  const ModelConfig& c;
  Options opt;
  cuda::DeviceInfo info;
  int64_t kv_ctx = 0;
  bool kv_f32 = false;  // the device cache holds f32 (exact) or f16 keys and values

  cuda::DeviceArena weights_arena, kv_arena, act_arena;
  // Made after cudaSetDevice (a member Stream would be created before it).
  std::unique_ptr<cuda::Stream> stream_owner;
  cudaStream_t stream = nullptr;

  DevMat token_embd, output;
  const float* output_norm = nullptr;
  std::vector<DevLayer> layers;

  // Activations, sized for opt.max_batch tokens.
  int B = 1;
  float *qkv = nullptr;  // decode: q|k|v of one token
  float *h = nullptr, *x = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr;
  float *router_logits = nullptr, *route_w = nullptr, *ffg = nullptr, *ffu = nullptr;
  float *exp_gate = nullptr, *exp_up = nullptr, *exp_y = nullptr, *logits = nullptr;
  uint32_t* router_counter = nullptr;
  uint32_t* norm_counter = nullptr;  // down_combine_decode's next-norm tail
  cuda::Q8Act dec_hq8;               // decode: the k experts' SwiGLU outputs, Q8
  // Decode: the next RMSNorm (x, xq8) was already made by the previous
  // launch (down_combine_decode's tail); the norm it stands for is skipped.
  bool norm_ready = false;
  int32_t *tok = nullptr, *pos = nullptr, *route_ids = nullptr, *step_in = nullptr, *groups = nullptr;
  cuda::Q8Act xq8, attq8, ffq8, expq8;
  void* attn_scratch = nullptr;
  void* exp_scratch = nullptr;
  size_t exp_scratch_bytes = 0;
  cuda::PinnedBuffer host_in, host_logits;
  static constexpr int kCopyChunks = 4;
  std::vector<cuda::Event> copy_done;

  // Routed experts tiered (VRAM slots / PCIe / CPU) when the budget does not
  // hold them all; null when every expert is resident.
  std::unique_ptr<HybridMoe> hybrid;
  bool tiered = false;     // decided before upload: experts stay on the host
  uint64_t budget = 0;     // bytes (0 when every expert is resident by --vram full)

  RouteHook route_hook;
  bool route_hook_hidden = false;  // the hook wants the FFN input rows too
  std::vector<int32_t> route_host;
  std::vector<float> route_w_host, hidden_host;

  cudaGraphExec_t graph = nullptr;
  int graph_kv = 0;  // the max_kv_len the graph was captured with
  int captures = 0;

  Impl(const ModelWeights& weights, Options o) : w(weights), c(weights.cfg), opt(o) {}
  ~Impl() {
    if (graph) cudaGraphExecDestroy(graph);
    if (timing.on && timing.steps > 1)
      std::fprintf(stderr,
                   "moestream cuda timing: %d decode steps: GPU (step launch to end) %.3f ms/step, forward() %.3f "
                   "ms/step (incl. logits copy), caller between steps %.3f ms/step\n",
                   timing.steps, timing.gpu_ms / timing.steps, timing.call_ms / timing.steps,
                   timing.between_ms / (timing.steps - 1));
  }

  // ---------------------------------------------------------------- setup
  // The VRAM budget against what the model needs (the same sums as
  // `moestream inspect --vram`): throws below the minimum; sets `tiered` when
  // the routed experts do not all fit.
  VramPlan plan_budget() {
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
    plan = plan_vram(split, inspect_hparams(*w.file), budget, kv_ctx);
    if (!plan.fits_minimum)
      throw Error(std::string(automatic ? "the GPU's free memory less a " + format_bytes(CudaBackend::kAutoMargin) +
                                              " margin (" + format_bytes(budget) + ")"
                                        : "--vram " + format_bytes(budget)) +
                  " is too small: this model needs at least " + format_bytes(plan.minimum_bytes) +
                  " for dense weights + KV at ctx " + std::to_string(kv_ctx) + " (dense " +
                  format_bytes(plan.dense_bytes) + ", KV " + format_bytes(plan.kv_bytes) + ", reserve " +
                  format_bytes(plan.reserve_bytes) + "); lower --ctx or raise --vram");
    tiered = !plan.fits_everything;
    return plan;
  }

  // The slot pool is what the budget leaves after the dense weights, the KV
  // cache, the activations and the hybrid step's buffers; up to half the
  // reserve (the other half is for the CUDA context) absorbs those buffers.
  void make_hybrid(const VramPlan& plan) {
    uint64_t largest = 0;
    std::map<uint64_t, int> sizes;
    for (const LayerWeights& L : w.layers)
      if (L.experts.n_expert > 0) {
        const uint64_t b = HybridMoe::slot_bytes(L.experts);
        largest = std::max(largest, b);
        sizes[b] = 1;
      }
    const uint64_t buffers = HybridMoe::buffer_bytes(c, B, opt.transit_slots, largest, sizes.size());
    const uint64_t used = weights_arena.capacity() + kv_arena.capacity() + act_arena.capacity() + buffers;
    const uint64_t fixed = plan.dense_bytes + plan.kv_bytes + plan.reserve_bytes / 2;
    const uint64_t over = used > fixed ? used - fixed : 0;
    HybridMoeOptions ho;
    ho.pool_bytes = plan.room - std::min(plan.room, over);
    ho.transit_slots = opt.transit_slots;
    ho.policy = opt.policy;
    ho.host_pin = opt.host_pin;
    ho.profile = opt.profile;
    ho.max_tokens = B;
    ho.gemm_min_batch = opt.gemm_min_batch;
    ho.cost_overrides = opt.cost_overrides;
    ho.verbose_steps = opt.verbose_steps;
    ho.pool = opt.cpu_pool;
    hybrid = std::make_unique<HybridMoe>(w, ho, stream);
  }

  void check_types() const {
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
      for (const TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.router}) need(*t);
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
  }

  // Every weight blob once (tied output = token_embd uploaded once): measure,
  // allocate the arena, copy.
  void upload_weights() {
    std::map<const void*, void*> done;
    // pass 1: measure; pass 2: allocate and copy.
    size_t total = 0;
    auto blob_size = [&](const TensorView& t) {
      if (t && !done.count(t.data)) {
        done[t.data] = nullptr;
        total += align_up(t.nbytes);
      }
    };
    blob_size(w.token_embd);
    blob_size(w.output_norm);
    blob_size(w.output);
    for (const LayerWeights& L : w.layers) {
      if (fusable_qkv(L)) {
        total += align_up(L.wq.nbytes + L.wk.nbytes + L.wv.nbytes);
        done[L.wq.data] = done[L.wk.data] = done[L.wv.data] = nullptr;
      }
      for (const TensorView* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv, &L.q_norm, &L.k_norm,
                                  &L.ffn_norm, &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.router})
        blob_size(*t);
      if (c.is_moe() && !tiered) {
        const ExpertWeights& e = L.experts;
        total += align_up(e.gate_bytes() * e.n_expert) + align_up(e.up_bytes() * e.n_expert) +
                 align_up(e.down_bytes() * e.n_expert);
      }
    }
    done.clear();
    weights_arena = cuda::DeviceArena("weights", total);

    auto put = [&](const TensorView& t) -> const void* {
      if (!t) return nullptr;
      auto it = done.find(t.data);
      if (it != done.end()) return it->second;
      void* d = weights_arena.alloc(t.nbytes, kAlign);
      MS_CUDA_CHECK(cudaMemcpy(d, t.data, t.nbytes, cudaMemcpyHostToDevice));
      done[t.data] = d;
      return d;
    };
    auto mat = [&](const TensorView& t) {
      DevMat m;
      if (!t) return m;
      m.type = t.type;
      m.rows = t.rows;
      m.cols = t.cols;
      m.data = put(t);
      return m;
    };
    auto vec = [&](const TensorView& t) { return static_cast<const float*>(put(t)); };
    // Experts e = 0..n-1 of one matrix kind, back to back `bytes` apart (one
    // copy when the file already has them so).
    auto experts = [&](const std::vector<const uint8_t*>& src, uint64_t bytes) -> const void* {
      const size_t n = src.size();
      auto* d = static_cast<uint8_t*>(weights_arena.alloc(bytes * n, kAlign));
      bool contiguous = true;
      for (size_t e = 1; e < n && contiguous; ++e) contiguous = src[e] == src[0] + e * bytes;
      if (contiguous) {
        MS_CUDA_CHECK(cudaMemcpy(d, src[0], bytes * n, cudaMemcpyHostToDevice));
      } else {
        for (size_t e = 0; e < n; ++e)
          MS_CUDA_CHECK(cudaMemcpy(d + e * bytes, src[e], bytes, cudaMemcpyHostToDevice));
      }
      return d;
    };

    token_embd = mat(w.token_embd);
    output_norm = vec(w.output_norm);
    output = mat(w.output);
    layers.resize(w.layers.size());
    for (size_t il = 0; il < w.layers.size(); ++il) {
      const LayerWeights& L = w.layers[il];
      DevLayer& D = layers[il];
      if (fusable_qkv(L)) {
        auto* d = static_cast<uint8_t*>(weights_arena.alloc(L.wq.nbytes + L.wk.nbytes + L.wv.nbytes, kAlign));
        MS_CUDA_CHECK(cudaMemcpy(d, L.wq.data, L.wq.nbytes, cudaMemcpyHostToDevice));
        MS_CUDA_CHECK(cudaMemcpy(d + L.wq.nbytes, L.wk.data, L.wk.nbytes, cudaMemcpyHostToDevice));
        MS_CUDA_CHECK(cudaMemcpy(d + L.wq.nbytes + L.wk.nbytes, L.wv.data, L.wv.nbytes, cudaMemcpyHostToDevice));
        done[L.wq.data] = d;
        done[L.wk.data] = d + L.wq.nbytes;
        done[L.wv.data] = d + L.wq.nbytes + L.wk.nbytes;
        D.wqkv = DevMat{L.wq.type, d, L.wq.rows + L.wk.rows + L.wv.rows, L.wq.cols};
      }
      D.attn_norm = vec(L.attn_norm);
      D.wq = mat(L.wq);
      D.wk = mat(L.wk);
      D.wv = mat(L.wv);
      D.wo = mat(L.wo);
      D.bq = vec(L.bq);
      D.bk = vec(L.bk);
      D.bv = vec(L.bv);
      D.q_norm = vec(L.q_norm);
      D.k_norm = vec(L.k_norm);
      D.ffn_norm = vec(L.ffn_norm);
      D.ffn_gate = mat(L.ffn_gate);
      D.ffn_up = mat(L.ffn_up);
      D.ffn_down = mat(L.ffn_down);
      D.router = mat(L.router);
      if (c.is_moe() && !tiered) {
        const ExpertWeights& e = L.experts;
        cuda::ExpertWeights& x = D.experts;
        x.n_expert = e.n_expert;
        x.gate.type = e.gate_type;
        x.gate.rows = e.n_ff;
        x.gate.cols = e.n_embd;
        x.gate.base = experts(e.gate_, e.gate_bytes());
        x.gate.stride = static_cast<int64_t>(e.gate_bytes());
        x.up.type = e.up_type;
        x.up.rows = e.n_ff;
        x.up.cols = e.n_embd;
        x.up.base = experts(e.up_, e.up_bytes());
        x.up.stride = static_cast<int64_t>(e.up_bytes());
        x.down.type = e.down_type;
        x.down.rows = e.n_embd;
        x.down.cols = e.n_ff;
        x.down.base = experts(e.down_, e.down_bytes());
        x.down.stride = static_cast<int64_t>(e.down_bytes());
      }
    }
  }

  void allocate_kv() {
    const size_t elem = kv_f32 ? sizeof(float) : sizeof(uint16_t);
    const size_t half_layer = static_cast<size_t>(c.n_head_kv) * static_cast<size_t>(kv_ctx) * c.head_dim * elem;
    kv_arena = cuda::DeviceArena();  // the old cache goes first: both may not fit at once
    kv_arena = cuda::DeviceArena(kv_f32 ? "KV cache (f32)" : "KV cache (f16)", 2 * align_up(half_layer) * c.n_layer);
    for (DevLayer& D : layers) {
      D.kc = kv_arena.alloc(half_layer);
      D.vc = kv_arena.alloc(half_layer);
    }
    MS_CUDA_CHECK(cudaMemset(kv_arena.base(), 0, kv_arena.capacity()));
    MS_CUDA_CHECK(cudaDeviceSynchronize());  // the memset runs on the legacy stream; `stream` does not wait for it
  }

  // Switches the device cache to f32 or f16 (reallocating it, contents lost);
  // the decode graph holds the old cache's addresses, so it goes too.
  void set_kv_f32(bool f32) {
    if (f32 == kv_f32) return;
    MS_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (graph) {
      MS_CUDA_CHECK(cudaGraphExecDestroy(graph));
      graph = nullptr;
    }
    kv_f32 = f32;
    allocate_kv();
  }

  // Calls f(k_cache, v_cache) with layer L's cache pointers as their element
  // type (uint16_t: f16 bits, or float); every cache launcher has both overloads.
  template <class F>
  void with_cache(const DevLayer& L, F&& f) const {
    if (kv_f32)
      f(static_cast<float*>(L.kc), static_cast<float*>(L.vc));
    else
      f(static_cast<uint16_t*>(L.kc), static_cast<uint16_t*>(L.vc));
  }

  cuda::AttentionShape attn_shape() const {
    return {c.n_head, c.n_head_kv, c.head_dim, kv_ctx, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  }

  void layout_activations(Layout& L) {
    const size_t b = static_cast<size_t>(B), D = static_cast<size_t>(c.n_embd);
    const size_t qd = static_cast<size_t>(c.n_head) * c.head_dim, kvd = static_cast<size_t>(c.n_head_kv) * c.head_dim;
    h = L.take_n<float>(b * D);
    x = L.take_n<float>(b * D);
    q = L.take_n<float>(b * qd);
    k = L.take_n<float>(b * kvd);
    v = L.take_n<float>(b * kvd);
    att = L.take_n<float>(b * qd);
    qkv = L.take_n<float>(qd + 2 * kvd);
    tok = L.take_n<int32_t>(b);
    pos = L.take_n<int32_t>(b);
    step_in = L.take_n<int32_t>(4);
    router_counter = L.take_n<uint32_t>(1);
    norm_counter = L.take_n<uint32_t>(1);
    logits = L.take_n<float>(static_cast<size_t>(kLogitRows) * c.n_vocab);
    xq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(c.n_embd, B)), c.n_embd, B);
    attq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(static_cast<int64_t>(qd), B)), static_cast<int64_t>(qd), B);
    attn_scratch = L.take(cuda::attention_decode_scratch_bytes(attn_shape(), static_cast<int>(kv_ctx)));
    if (c.is_moe()) {
      const size_t E = static_cast<size_t>(c.n_expert), K = static_cast<size_t>(c.n_expert_used);
      const size_t F = static_cast<size_t>(c.n_ff_exp), pairs = b * K;
      router_logits = L.take_n<float>(b * E);
      route_w = L.take_n<float>(b * K);
      route_ids = L.take_n<int32_t>(b * K);
      groups = L.take_n<int32_t>(1 + 3 * pairs + 1);
      dec_hq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(c.n_ff_exp, c.n_expert_used)), c.n_ff_exp,
                                 c.n_expert_used);
      if (B >= opt.gemm_min_batch && opt.grouped_matmul_experts) {
        exp_gate = L.take_n<float>(pairs * F);
        exp_up = L.take_n<float>(pairs * F);
        exp_y = L.take_n<float>(pairs * D);
        expq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(c.n_ff_exp, static_cast<int64_t>(pairs))), c.n_ff_exp,
                                 static_cast<int64_t>(pairs));
      }
      // expert_ffn runs every batch (it groups by expert itself) unless the
      // grouped matmul path takes the large ones. Tiered experts use the
      // hybrid step's own buffers instead.
      if (!tiered) {
        const int largest = opt.grouped_matmul_experts ? std::min(B, std::max(1, opt.gemm_min_batch - 1)) : B;
        exp_scratch_bytes = cuda::expert_ffn_scratch_bytes(layers[0].experts, largest, c.n_expert_used);
        exp_scratch = L.take(exp_scratch_bytes);
      }
    } else {
      const size_t F = static_cast<size_t>(c.n_ff);
      ffg = L.take_n<float>(b * F);
      ffu = L.take_n<float>(b * F);
      ffq8 = cuda::q8act_view(L.take(cuda::q8act_bytes(c.n_ff, B)), c.n_ff, B);
    }
  }

  void allocate_activations() {
    Layout measure;
    layout_activations(measure);
    act_arena = cuda::DeviceArena("activations", measure.used);
    Layout bind;
    bind.base = reinterpret_cast<uintptr_t>(act_arena.alloc(measure.used, kAlign));
    layout_activations(bind);
    // router_counter and the attention scratch's counters start at 0 (the constructor syncs after this)
    MS_CUDA_CHECK(cudaMemset(act_arena.base(), 0, act_arena.capacity()));
    host_in = cuda::PinnedBuffer(sizeof(int32_t) * 2 * static_cast<size_t>(B) + 64);
    host_logits = cuda::PinnedBuffer(sizeof(float) * kLogitRows * static_cast<size_t>(c.n_vocab));
    copy_done.clear();
    for (int i = 0; i < kCopyChunks; ++i) copy_done.emplace_back(false);
    if (const char* t = std::getenv("MOESTREAM_CUDA_TIMING"); t && std::string(t) == "1") {
      timing.on = true;
      timing.t0 = std::make_unique<cuda::Event>(true);
      timing.t1 = std::make_unique<cuda::Event>(true);
    }
  }

  // ---------------------------------------------------------------- pieces
  // y[t] = W x[t] (+ residual) for n tokens: tensor-core matmul for batches,
  // the fused-dequant matvec (Q8 activations) otherwise.
  void project(const DevMat& m, const float* xf, const cuda::Q8Act* xq, int n, float* y, const float* residual) {
    cudaStream_t s = stream;
    if (n >= opt.gemm_min_batch) {
      cuda::MatvecInput in;
      in.f32 = xf;
      if (cuda::matvec_takes_q8(m.type)) in.q8 = *xq;  // the int8 tensor-core path where there is one
      cuda::MatvecGroups g;
      g.max_groups = 1;
      g.per_group = n;
      cuda::matmul(m.set(), in, g, y, m.rows, residual, s);
      return;
    }
    cuda::MatvecInput in;
    in.f32 = xf;
    if (cuda::matvec_takes_q8(m.type)) in.q8 = *xq;
    cuda::linear(m.type, m.data, m.rows, m.cols, in, n, y, residual, s);
  }

  // RMSNorm of n rows of the hidden state into x (and xq8).
  void norm_rows(const float* src, const float* weight, int n) {
    if (n == 1 && norm_ready) {  // made by the previous layer's last launch
      norm_ready = false;
      return;
    }
    if (n == 1 && opt.fused_decode && cuda::rmsnorm_row_supported(c.n_embd))
      cuda::rmsnorm_row_q8(src, weight, x, c.n_embd, c.rms_eps, xq8, stream);
    else
      cuda::rmsnorm(src, weight, x, n, c.n_embd, c.rms_eps, stream, &xq8);
  }

  static bool uses_q8(const DevMat& m) { return cuda::matvec_takes_q8(m.type); }

  // positions: device [n]; decode: kv_len device and max_kv_len for the
  // split-K launch; prefill: pos0 on the host.
  void attention_block(int il, int n, const int32_t* positions, bool decode, int max_kv_len, const int32_t* kv_len,
                       int pos0) {
    cudaStream_t s = stream;
    const DevLayer& L = layers[static_cast<size_t>(il)];
    const int64_t hd = c.head_dim;
    const int64_t qd = c.n_head * hd, kvd = c.n_head_kv * hd;
    norm_rows(h, L.attn_norm, n);
    // One token with stacked Wq|Wk|Wv: one launch, and q, k adjacent so one
    // rope launch turns both.
    const bool one_qkv = n == 1 && L.wqkv;
    float* qp = one_qkv ? qkv : q;
    float* kp = one_qkv ? qkv + qd : k;
    float* vp = one_qkv ? qkv + qd + kvd : v;
    if (one_qkv) {
      project(L.wqkv, x, &xq8, 1, qkv, nullptr);
    } else if (L.wqkv && n >= opt.gemm_min_batch && cuda::matmul_int8_supported(L.wqkv.type)) {
      // Batches: Wq|Wk|Wv as one int8 GEMM launch writing q, k and v.
      cuda::MatvecInput in;
      in.f32 = x;
      in.q8 = xq8;
      const int64_t rows[3] = {L.wq.rows, L.wk.rows, L.wv.rows};
      float* outs[3] = {q, k, v};
      cuda::matmul_stacked(L.wqkv.set(), in, n, 3, rows, outs, stream);
    } else {
      project(L.wq, x, &xq8, n, q, nullptr);
      project(L.wk, x, &xq8, n, k, nullptr);
      project(L.wv, x, &xq8, n, v, nullptr);
    }
    if (one_qkv && !L.bq && opt.fused_decode) {
      with_cache(L, [&](auto* kc, auto* vc) {
        cuda::decode_qk_prologue(qkv, c.n_head, c.n_head_kv, c.head_dim, L.q_norm, L.k_norm, c.rms_eps, c.n_rot,
                                 positions, c.rope_base, c.rope_freq_scale, c.arch->rope_mode, kc, vc,
                                 kv_ctx, s);
      });
    } else if (!one_qkv && !L.bq && opt.fused_prefill && (L.q_norm == nullptr) == (L.k_norm == nullptr)) {
      with_cache(L, [&](auto* kc, auto* vc) {
        cuda::batch_qk_prologue(qp, kp, vp, n, c.n_head, c.n_head_kv, c.head_dim, L.q_norm, L.k_norm, c.rms_eps,
                                c.n_rot, positions, c.rope_base, c.rope_freq_scale, c.arch->rope_mode, kc, vc,
                                kv_ctx, s);
      });
    } else {
      prologue(L, n, qp, kp, vp, positions, one_qkv);
    }
    const cuda::AttentionShape shape = attn_shape();
    with_cache(L, [&](const auto* kc, const auto* vc) {
      if (decode)
        cuda::attention_decode(shape, qp, kc, vc, max_kv_len, kv_len, att, attn_scratch, s);
      else
        cuda::attention_prefill(shape, qp, kc, vc, n, pos0, att, s);
    });
    if (uses_q8(L.wo)) cuda::quantize_q8act(att, qd, n, attq8, s);
    project(L.wo, att, &attq8, n, h, h);
  }

  // Biases, q/k norms, rope and the cache append as separate launches.
  void prologue(const DevLayer& L, int n, float* qp, float* kp, float* vp, const int32_t* positions, bool one_qkv) {
    cudaStream_t s = stream;
    const int64_t hd = c.head_dim;
    const int64_t qd = c.n_head * hd, kvd = c.n_head_kv * hd;
    for (int t = 0; t < n && L.bq; ++t) {
      cuda::add(qp + t * qd, L.bq, qp + t * qd, qd, s);
      cuda::add(kp + t * kvd, L.bk, kp + t * kvd, kvd, s);
      cuda::add(vp + t * kvd, L.bv, vp + t * kvd, kvd, s);
    }
    if (L.q_norm) {
      cuda::rmsnorm(qp, L.q_norm, qp, static_cast<int64_t>(n) * c.n_head, hd, c.rms_eps, s);
      cuda::rmsnorm(kp, L.k_norm, kp, static_cast<int64_t>(n) * c.n_head_kv, hd, c.rms_eps, s);
    }
    const RopeMode rm = c.arch->rope_mode;
    if (one_qkv) {
      cuda::rope(qp, 1, c.n_head + c.n_head_kv, c.head_dim, c.n_rot, positions, c.rope_base, c.rope_freq_scale, rm, s);
    } else {
      cuda::rope(qp, n, c.n_head, c.head_dim, c.n_rot, positions, c.rope_base, c.rope_freq_scale, rm, s);
      cuda::rope(kp, n, c.n_head_kv, c.head_dim, c.n_rot, positions, c.rope_base, c.rope_freq_scale, rm, s);
    }
    with_cache(L, [&](auto* kc, auto* vc) {
      cuda::kv_append(kp, vp, n, c.n_head_kv, c.head_dim, positions, kc, vc, kv_ctx, s);
    });
  }

  // The three-launch MoE decode (decode_moe.h) applies to this layer.
  bool moe_decode_fusable(const DevLayer& L) const {
    if (!c.is_moe() || !opt.fused_decode || !opt.fused_moe_decode || tiered) return false;
    const int E = c.n_expert, K = c.n_expert_used;
    return cuda::router_norm_decode_supported(L.router.type, E, c.n_embd, K) && cuda::gate_up_q8_decode_supported(L.experts) &&
           cuda::down_combine_decode_supported(L.experts) && L.experts.gate.rows == c.n_ff_exp &&
           L.experts.down.rows == c.n_embd && c.n_embd % 32 == 0;
  }

  // Router logits of n tokens (x / xq8) into router_logits. Several tokens:
  // launched as groups of 8 vectors (one block row per group), not one group
  // of n that a few blocks would walk through 8 vectors at a time.
  void router_logits_rows(const DevMat& R, int n) {
    const int64_t D = c.n_embd, E = c.n_expert;
    const bool q8 = cuda::matvec_takes_q8(R.type);
    auto input = [&](int first) {
      cuda::MatvecInput in;
      in.f32 = x + static_cast<int64_t>(first) * D;
      if (q8) {
        in.q8 = xq8;
        in.q8.q += static_cast<int64_t>(first) * D;
        in.q8.ds += static_cast<int64_t>(first) * (D / 32) * 2;
      }
      return in;
    };
    constexpr int kVec = 8;
    const int full = n >= 2 * kVec ? n / kVec * kVec : 0;
    if (full > 0) {
      cuda::MatvecGroups g;
      g.max_groups = full / kVec;
      g.per_group = kVec;
      cuda::matvec(R.set(), input(0), g, router_logits, E, nullptr, stream);
    }
    if (n > full)
      cuda::linear(R.type, R.data, R.rows, R.cols, input(full), n - full, router_logits + full * E, nullptr, stream);
  }

  void ffn_block(int il, int n) {
    cudaStream_t s = stream;
    const DevLayer& L = layers[static_cast<size_t>(il)];
    const int64_t D = c.n_embd;
    const bool moe_fused = n == 1 && moe_decode_fusable(L);
    if (!moe_fused) norm_rows(h, L.ffn_norm, n);
    if (!c.is_moe()) {
      const int64_t F = c.n_ff;
      if (n >= opt.gemm_min_batch) {
        project(L.ffn_gate, x, &xq8, n, ffg, nullptr);
        project(L.ffn_up, x, &xq8, n, ffu, nullptr);
        cuda::silu_mul(ffg, ffu, ffg, static_cast<int64_t>(n) * F, s);
      } else {
        cuda::MatvecInput in;
        in.f32 = x;
        if (cuda::matvec_takes_q8(L.ffn_gate.type)) in.q8 = xq8;
        cuda::MatvecGroups g;
        g.per_group = n;
        cuda::matvec_glu(L.ffn_gate.set(), L.ffn_up.set(), in, g, ffg, F, s);
      }
      if (uses_q8(L.ffn_down)) cuda::quantize_q8act(ffg, F, n, ffq8, s);
      project(L.ffn_down, ffg, &ffq8, n, h, h);
      return;
    }
    const int E = c.n_expert, K = c.n_expert_used;
    if (moe_fused) {
      cuda::router_norm_decode(h, L.ffn_norm, c.rms_eps, static_cast<const float*>(L.router.data), E, D, K,
                               c.arch->router_mode, c.router_renorm, x, xq8, router_logits, route_ids,
                               route_w, router_counter, s);
    } else if (n == 1 && opt.fused_decode && cuda::router_decode_supported(L.router.type, E, D, K)) {
      cuda::router_decode_f32(static_cast<const float*>(L.router.data), x, E, D, K, c.arch->router_mode,
                              c.router_renorm, router_logits, route_ids, route_w, router_counter, s);
    } else {  // router: always the exact matvec (f32 weights, no f16 rounding), so batch and decode choose alike
      router_logits_rows(L.router, n);
      cuda::router_topk(router_logits, n, E, K, c.arch->router_mode, c.router_renorm, route_ids, route_w, s);
    }
    if (route_hook) {
      route_host.resize(static_cast<size_t>(n) * K);
      route_w_host.resize(static_cast<size_t>(n) * K);
      MS_CUDA_CHECK(cudaMemcpyAsync(route_host.data(), route_ids, sizeof(int32_t) * n * K, cudaMemcpyDeviceToHost, s));
      MS_CUDA_CHECK(cudaMemcpyAsync(route_w_host.data(), route_w, sizeof(float) * n * K, cudaMemcpyDeviceToHost, s));
      if (route_hook_hidden) {  // x: the FFN input, made by every router path above
        hidden_host.resize(static_cast<size_t>(n) * D);
        MS_CUDA_CHECK(cudaMemcpyAsync(hidden_host.data(), x, sizeof(float) * n * D, cudaMemcpyDeviceToHost, s));
      }
      MS_CUDA_CHECK(cudaStreamSynchronize(s));
      route_hook({il, n, K, route_host.data(), route_w_host.data(), route_hook_hidden ? hidden_host.data() : nullptr});
    }
    if (hybrid) {
      hybrid->run(il, n, x, xq8, route_ids, route_w, h);
      return;
    }
    if (moe_fused) {
      cuda::gate_up_q8_decode(L.experts, xq8, route_ids, K, dec_hq8, nullptr, s);
      cuda::NextNorm next;
      next.w = il + 1 < c.n_layer ? layers[static_cast<size_t>(il) + 1].attn_norm : output_norm;
      next.eps = c.rms_eps;
      next.x_out = x;
      next.x_q8 = xq8;
      next.counter = norm_counter;
      cuda::down_combine_decode(L.experts, dec_hq8, route_ids, route_w, K, h, h, &next, s);
      norm_ready = true;  // the next norm_rows (next layer's attention, or the head) is done
      return;
    }
    if (n < opt.gemm_min_batch || !opt.grouped_matmul_experts) {
      cuda::expert_ffn(L.experts, x, &xq8, n, K, route_ids, route_w, h, h, exp_scratch, exp_scratch_bytes, s);
      return;
    }
    // Batch: (token, slot) pairs grouped by expert, then each expert's
    // gate/up/down once over its tokens on tensor cores.
    const int pairs = n * K;
    const int64_t F = c.n_ff_exp;
    int32_t* n_groups = groups;
    int32_t* group_expert = groups + 1;
    int32_t* offsets = group_expert + pairs;
    int32_t* list = offsets + pairs + 1;
    cuda::moe_group_by_expert(route_ids, pairs, E, n_groups, group_expert, offsets, list, s);
    cuda::MatvecGroups g;
    g.max_groups = std::min(pairs, E);
    g.per_group = n;
    g.x_div = K;
    g.n_expert = E;
    g.n_groups = n_groups;
    g.expert = group_expert;
    g.offsets = offsets;
    g.list = list;
    cuda::MatvecInput in;
    in.f32 = x;
    if (cuda::matvec_takes_q8(L.experts.gate.type)) in.q8 = xq8;
    cuda::matmul(L.experts.gate, in, g, exp_gate, F, nullptr, s);
    cuda::matmul(L.experts.up, in, g, exp_up, F, nullptr, s);
    cuda::silu_mul(exp_gate, exp_up, exp_gate, static_cast<int64_t>(pairs) * F, s);
    cuda::MatvecInput hin;
    hin.f32 = exp_gate;
    if (cuda::matvec_takes_q8(L.experts.down.type)) {
      cuda::quantize_q8act(exp_gate, F, pairs, expq8, s);
      hin.q8 = expq8;
    }
    g.x_div = 1;
    cuda::matmul(L.experts.down, hin, g, exp_y, D, nullptr, s);
    cuda::moe_combine(exp_y, route_w, n, K, D, h, h, s);
  }

  // logits[0..m) of hidden rows first..first+m-1 (m <= kLogitRows).
  void head(int first, int m) {
    cudaStream_t s = stream;
    const int64_t D = c.n_embd;
    norm_rows(h + first * D, output_norm, m);
    cuda::MatvecInput in;
    in.f32 = x;
    if (cuda::matvec_takes_q8(output.type)) in.q8 = xq8;
    cuda::linear(output.type, output.data, output.rows, output.cols, in, m, logits, nullptr, s);
  }

  // One decode step, all on the device: token, position and attention length
  // come from step_in = {token, pos, kv_len}.
  void enqueue_decode(int max_kv_len) {
    norm_ready = false;
    cuda::embed_rows(token_embd.type, token_embd.data, c.n_vocab, c.n_embd, step_in, 1, h, stream);
    for (int il = 0; il < c.n_layer; ++il) {
      attention_block(il, 1, step_in + 1, true, max_kv_len, step_in + 2, 0);
      ffn_block(il, 1);
    }
    head(0, 1);
  }

  void capture(int max_kv_len) {
    if (graph) {
      MS_CUDA_CHECK(cudaGraphExecDestroy(graph));
      graph = nullptr;
    }
    cudaGraph_t g = nullptr;
    MS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue_decode(max_kv_len);
    } catch (...) {
      cudaStreamEndCapture(stream, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    MS_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    const cudaError_t err = cudaGraphInstantiate(&graph, g, 0);
    cudaGraphDestroy(g);
    MS_CUDA_CHECK(err);
    graph_kv = max_kv_len;
    ++captures;
  }

  // Device logits -> pinned staging -> dst, in kCopyChunks pieces so the host
  // copy of one piece overlaps the device-to-host transfer of the next (a
  // decode step waits for all of it: 600 KB for a 152k vocabulary).
  void copy_logits(float* dst, int m) {
    const size_t n = static_cast<size_t>(m) * c.n_vocab;
    const size_t per = (n + kCopyChunks - 1) / kCopyChunks;
    auto* staging = static_cast<float*>(host_logits.get());
    for (int i = 0; i < kCopyChunks; ++i) {
      const size_t b = std::min(n, i * per), e = std::min(n, b + per);
      if (e > b)
        MS_CUDA_CHECK(cudaMemcpyAsync(staging + b, logits + b, (e - b) * sizeof(float), cudaMemcpyDeviceToHost, stream));
      copy_done[i].record(stream);
    }
    for (int i = 0; i < kCopyChunks; ++i) {
      const size_t b = std::min(n, i * per), e = std::min(n, b + per);
      copy_done[i].synchronize();
      if (e > b) std::memcpy(dst + b, staging + b, (e - b) * sizeof(float));
    }
  }

  // MOESTREAM_CUDA_TIMING=1: where a decode step's time goes, printed at exit.
  struct StepTiming {
    bool on = false;
    int steps = 0;
    double gpu_ms = 0, call_ms = 0, between_ms = 0;
    std::chrono::steady_clock::time_point last_end{};
    std::unique_ptr<cuda::Event> t0, t1;
  } timing;

  void decode(int32_t token, int64_t p, float* out) {
    if (hybrid) hybrid->begin_pass(1);
    auto* in = host_in.as<int32_t>();
    in[0] = token;
    in[1] = static_cast<int32_t>(p);
    in[2] = static_cast<int32_t>(p + 1);
    in[3] = 0;
    MS_CUDA_CHECK(cudaMemcpyAsync(step_in, in, 4 * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    const int max_kv = static_cast<int>(std::min<int64_t>(kv_ctx, (p + kGraphKvStep) / kGraphKvStep * kGraphKvStep));
    const bool use_graph = opt.use_graph && !route_hook && !hybrid;
    if (use_graph && (!graph || graph_kv != max_kv)) {
      try {
        capture(max_kv);
      } catch (const Error& e) {
        // A launcher that cannot be captured: run the step directly from now on.
        cudaGetLastError();
        opt.use_graph = false;
        std::fprintf(stderr, "moestream: CUDA graph capture failed (%s); decoding without graphs\n", e.what());
      }
    }
    const auto call_start = std::chrono::steady_clock::now();
    if (timing.on) timing.t0->record(stream);
    if (use_graph && opt.use_graph) {
      MS_CUDA_CHECK(cudaGraphLaunch(graph, stream));
    } else {
      enqueue_decode(max_kv);
    }
    if (timing.on) timing.t1->record(stream);
    copy_logits(out, 1);
    if (hybrid) hybrid->end_pass();
    if (timing.on) {
      const auto now = std::chrono::steady_clock::now();
      if (timing.steps > 0)
        timing.between_ms += std::chrono::duration<double, std::milli>(call_start - timing.last_end).count();
      timing.call_ms += std::chrono::duration<double, std::milli>(now - call_start).count();
      timing.gpu_ms += timing.t1->ms_since(*timing.t0);
      timing.last_end = now;
      ++timing.steps;
    }
  }

  // n <= B tokens at positions pos0..; logits of the last token (out) or of
  // every token (all).
  void prefill(const int32_t* tokens, int n, int64_t pos0, float* out, bool all) {
    if (hybrid) hybrid->begin_pass(n);
    prefill_batch(tokens, n, pos0, out, all);
    if (hybrid) hybrid->end_pass();
  }

  void prefill_batch(const int32_t* tokens, int n, int64_t pos0, float* out, bool all) {
    auto* in = host_in.as<int32_t>();
    std::memcpy(in, tokens, sizeof(int32_t) * n);
    for (int t = 0; t < n; ++t) in[B + t] = static_cast<int32_t>(pos0 + t);
    MS_CUDA_CHECK(cudaMemcpyAsync(tok, in, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream));
    MS_CUDA_CHECK(cudaMemcpyAsync(pos, in + B, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream));
    cuda::embed_rows(token_embd.type, token_embd.data, c.n_vocab, c.n_embd, tok, n, h, stream);
    for (int il = 0; il < c.n_layer; ++il) {
      attention_block(il, n, pos, false, 0, nullptr, static_cast<int>(pos0));
      ffn_block(il, n);
    }
    if (!out) {
      // The inputs in pinned memory must stay put until the copies ran.
      MS_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
    }
    if (!all) {
      head(n - 1, 1);
      copy_logits(out, 1);
      return;
    }
    for (int t = 0; t < n; t += kLogitRows) {
      const int m = std::min(kLogitRows, n - t);
      head(t, m);
      copy_logits(out + static_cast<int64_t>(t) * c.n_vocab, m);
    }
  }
};

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
  m.kv_ctx = opt.ctx > 0 ? opt.ctx : std::min<int64_t>(c.n_ctx_train > 0 ? c.n_ctx_train : 4096, 4096);
  if (m.kv_ctx > (int64_t{1} << 30)) throw Error("CUDA backend: context too large");
  m.B = std::max(1, opt.max_batch);
  m.kv_f32 = opt.kv_f32;
  m.opt.max_batch = m.B;
  m.opt.gemm_min_batch = std::max(2, opt.gemm_min_batch);
  m.check_types();
  m.stream_owner = std::make_unique<cuda::Stream>();
  m.stream = m.stream_owner->get();
  const VramPlan plan = m.plan_budget();
  try {
    m.upload_weights();
    m.allocate_kv();
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

int64_t CudaBackend::ctx_capacity() const { return impl_->kv_ctx; }
int CudaBackend::graph_captures() const { return impl_->captures; }
std::string CudaBackend::device_description() const { return cuda::describe(impl_->info); }
std::string CudaBackend::device_name() const { return impl_->info.name; }

CudaBackend::MemoryUse CudaBackend::memory_use() const {
  return {impl_->weights_arena.capacity(), impl_->kv_arena.capacity(), impl_->act_arena.capacity(),
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
  if (ctx > impl_->kv_ctx)
    throw Error("CUDA backend: a context of " + std::to_string(ctx) + " tokens does not fit the device KV cache of " +
                std::to_string(impl_->kv_ctx) + " tokens (set CudaBackend::Options::ctx / --ctx)");
  // The device holds one cache: asking for the other element type reallocates
  // it (Options::kv_f32 sizes the right one up front).
  impl_->set_kv_f32(type == KvType::F32);
  // Keys and values live in the device arena; this cache only counts positions
  // (and says which type it was made for).
  return KvCache(1, 1, 1, ctx, type);
}

void CudaBackend::forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool all_logits) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw Error("forward: no tokens");
  if (kv.ctx() > m.kv_ctx)
    throw Error("CUDA backend: this KV cache holds " + std::to_string(kv.ctx()) + " positions, the device cache " +
                std::to_string(m.kv_ctx) + "; make it with CudaBackend::make_cache");
  if ((kv.type() == KvType::F32) != m.kv_f32)
    throw Error(std::string("CUDA backend: this KV cache was made as ") + kv_type_name(kv.type()) +
                " but the device cache is now " + (m.kv_f32 ? "f32" : "f16") +
                " (a later make_cache switched it; the device holds one cache)");
  kv.check_room(n);
  for (int32_t id : tokens)
    if (id < 0 || id >= c.n_vocab)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(c.n_vocab) +
                  " tokens)");
  const int64_t V = c.n_vocab;
  logits.resize(static_cast<size_t>((all_logits ? n : 1) * V));
  MS_CUDA_CHECK(cudaSetDevice(m.opt.device));
  if (n == 1) {
    m.decode(tokens[0], kv.n_past(), logits.data());
    kv.advance(1);
    return;
  }
  for (int64_t done = 0; done < n;) {
    const int nb = static_cast<int>(std::min<int64_t>(m.B, n - done));
    const bool last = done + nb == n;
    float* out = all_logits ? logits.data() + done * V : (last ? logits.data() : nullptr);
    m.prefill(tokens.data() + done, nb, kv.n_past(), out, all_logits);
    kv.advance(nb);
    done += nb;
  }
}

}  // namespace ms
