// CudaBackend's private state and its blocks' declarations, shared by
// cuda_backend.cpp (setup, budget, the public API), layer_recipe.cpp (the
// blocks of model/blocks.h that the architecture's recipe runs: attention,
// dense and MoE FFN; the head, and the decode and prefill drivers around the
// recipe) and qwen35_blocks.cpp (the blocks hybrids add: Gated DeltaNet, the
// shared expert). The device storage lives in its own objects: DeviceWeights (dense
// weights), ResidentExperts (all-resident routed experts) or HybridMoe (tiered ones),
// DeviceKvCache, DecodeGraph.
//
// CUDA-only header; include it only from src/cuda/backend.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "cuda/attention.h"
#include "cuda/backend/arena_layout.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/decode_graph.h"
#include "cuda/backend/device_kv_cache.h"
#include "cuda/backend/device_weights.h"
#include "cuda/backend/hybrid_moe.h"
#include "cuda/backend/resident_experts.h"
#include "cuda/device.h"
#include "cuda/matvec.h"
#include "engine/moe_step.h"
#include "experts/pass_size.h"
#include "model/recipe.h"
#include "model/tensor_roles.h"

namespace ms {

struct CudaBackend::Impl final : LayerBlocks {
  // Rows of logits computed (and copied back) per pass when every position's
  // logits are asked for.
  static constexpr int kLogitRows = 16;

  const ModelWeights& w;
  const ModelConfig& c;
  Options opt;
  const Recipe& recipe;  // the architecture's (model/recipe.h), run over this backend's blocks
  cuda::DeviceInfo info;

  cuda::DeviceWeights weights;
  // Every routed expert in VRAM (empty when they are tiered: `hybrid`).
  cuda::ResidentExperts experts;
  cuda::DeviceKvCache kv;
  cuda::DeviceArena act_arena;
  // Made after cudaSetDevice (a member Stream would be created before it).
  std::unique_ptr<cuda::Stream> stream_owner;
  cudaStream_t stream = nullptr;

  // Activations, sized for B tokens: opt.max_batch, or chosen by
  // choose_batch (pass_batch.cpp) when that is 0; `pass` says why.
  int B = 1;
  PassSize pass;
  bool pass_chosen = false;  // B was chosen (forward splits into equal passes)
  // Rows per chunk of the tiered step's buffers (HybridMoeOptions::chunk_rows):
  // the default, or the tight layout's that choose_batch chose.
  int pass_chunk_rows = kHybridChunkRows;
  float *qkv = nullptr;  // decode: q|k|v of one token
  float *h = nullptr, *x = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr;
  float *router_logits = nullptr, *route_w = nullptr, *ffg = nullptr, *ffu = nullptr;
  float* logits = nullptr;
  uint32_t* router_counter = nullptr;
  int32_t *tok = nullptr, *pos = nullptr, *route_ids = nullptr, *step_in = nullptr;
  // Multi-sequence passes: per run, its attention length (pos0 + n), for
  // the decode attention of one-token runs.
  int32_t* run_kv_len = nullptr;
  // Per row of a multi-sequence pass, its slot (the multi-row kernels of
  // src/cuda/attention_multi.h and kv_multi.h read it on the device); the
  // multi-row decode attention's scratch, for up to multi_rows rows (null
  // when n_seq is 1 or the shape is not served: a launch per sequence then).
  int32_t* row_slot = nullptr;
  void* multi_attn_scratch = nullptr;
  int multi_rows = 0;
  cuda::Q8Act xq8, attq8, ffq8;
  // Gated attention (arch->attn_output_gate): Wq's [q | gate] rows (decode:
  // the stacked Wq|Wk|Wv row), and the gates split from them.
  float *q_gate = nullptr, *gate = nullptr;
  // Gated DeltaNet layers (hybrids): the fused projection [q | k | v], its
  // conv output, z, alpha/beta and the gates made from them, the recurrence's
  // output (normed in place) and its Q8 copy for the output projection.
  float *lin_qkv = nullptr, *lin_conv = nullptr, *lin_z = nullptr, *lin_a = nullptr, *lin_b = nullptr;
  float *lin_g = nullptr, *lin_beta = nullptr, *lin_out = nullptr;
  cuda::Q8Act linq8;
  // Shared expert: SwiGLU activations (gate, then silu(gate) * up), the
  // gate's score per token, the Q8 copy for the down projection.
  float *sh_g = nullptr, *sh_u = nullptr, *sh_score = nullptr;
  cuda::Q8Act shq8;
  void* attn_scratch = nullptr;
  void* exp_scratch = nullptr;
  size_t exp_scratch_bytes = 0;
  cuda::PinnedBuffer host_in, host_logits;
  static constexpr int kCopyChunks = 4;
  std::vector<cuda::Event> copy_done;

  // Routed experts tiered (VRAM slots / PCIe / CPU) when the budget does not
  // hold them all; null when every expert is resident.
  std::unique_ptr<HybridMoe> hybrid;
  // The engine's MoE step for layers whose experts all stay in VRAM (the
  // resident model's, pinned tiered layers): its resident plan, no scheduler.
  std::unique_ptr<MoeStep> resident_step;
  bool tiered = false;     // decided before upload: experts stay on the host
  // The decode step being enqueued (or captured) is the hybrid's gated kind:
  // tiered layers' experts go through HybridMoe::enqueue_gated.
  bool gated_step = false;
  uint64_t budget = 0;     // bytes (0 when every expert is resident by --vram full)

  // Sequence states (Options::n_seq): the pool make_cache draws from when
  // there is more than one; the slot the pass being enqueued runs on (single
  // sequence passes: forward()); the slot the decode graphs were captured for
  // (they hold its K/V addresses).
  std::shared_ptr<SeqSlotPool> slots;
  int cur_slot = 0;
  int graph_slot = 0;
  // One entry's rows in a multi-sequence pass: rows row0 .. row0+n-1 of the
  // pass, at positions pos0 .. of slot `slot`.
  struct SeqRun {
    int row0 = 0, n = 0, slot = 0;
    int64_t pos0 = 0;
  };
  std::vector<SeqRun> runs;

  RouteHook route_hook;
  bool route_hook_hidden = false;  // the hook wants the FFN input rows too
  std::vector<int32_t> route_host;
  std::vector<float> route_w_host, hidden_host;

  // Options::step_timing: where a decode step's time goes, printed at exit.
  struct StepTiming {
    bool on = false;
    int steps = 0;
    double gpu_ms = 0, call_ms = 0, between_ms = 0;
    std::chrono::steady_clock::time_point last_end{};
    std::unique_ptr<cuda::Event> t0, t1;
  } timing;

  // Last, so they go first: their graphs hold addresses of everything above.
  cuda::DecodeGraph graph;
  // Hybrid decode: per layer, its attention and the FFN's norm + router.
  std::vector<std::unique_ptr<cuda::DecodeGraph>> hybrid_graphs;
  // Multi-sequence steps of one token per sequence (all experts resident):
  // the layers replayed from a graph captured for the step's shape, its
  // runs' (slot, decode span) in order (seq_graph_key); re-captured when a
  // sequence joins, leaves or outgrows its span (every kGraphKvStep
  // positions). Tokens, positions and attention lengths come from device
  // memory, uploaded before each launch.
  cuda::DecodeGraph seq_graph;
  std::vector<int> seq_graph_key;
  bool seq_graph_ok = true;  // false after a failed capture: direct launches from then on
  // Hybrid decode with prefetch: per layer, the next layer whose MoE step is
  // planned on the host (-1: none), whose router the span's end applies to
  // this layer's FFN input (route_ids + K, route_w + K).
  std::vector<int> next_tiered;

  Impl(const ModelWeights& model, Options o) : w(model), c(model.cfg), opt(o), recipe(recipe_for(model.cfg)) {
    bind_recipe();
  }
  ~Impl() override;

  // ---- setup (cuda_backend.cpp)
  void check_types() const;
  VramPlan plan_budget(int64_t kv_ctx);
  void make_hybrid(const VramPlan& plan);
  int choose_batch(const VramPlan& plan, int64_t kv_ctx);  // pass_batch.cpp
  void layout_activations(cuda::Layout& L);
  void allocate_activations();
  void set_kv_type(KvType type);
  uint64_t weight_bytes() const { return weights.bytes() + experts.bytes(); }
  cuda::AttentionShape attn_shape() const;

  // ---- the blocks (model/blocks.h) the recipe runs (layer_recipe.cpp)
  // The FFN block, or one of its two halves (hybrid decode captures the
  // first with the attention as a graph per layer; the second talks to the host).
  enum class FfnPart { All, Route, Experts };
  // The pass the blocks run in, set by the drivers (decode, hybrid decode
  // spans, prefill) before they run the recipe's layers.
  struct BlockPass {
    int n = 1;                           // tokens
    const int32_t* positions = nullptr;  // device [n]
    bool decode = false;                 // split-K decode attention (else prefill attention)
    int max_kv_len = 0;                  // decode: the span the split-K launch covers
    const int32_t* kv_len = nullptr;     // decode: device
    int pos0 = 0;                        // prefill: the first position, on the host
    FfnPart part = FfnPart::All;         // hybrid decode spans: which half of the MoE block
    int slot = 0;                        // the sequence state (one sequence: runs is null)
    // Several sequences (forward_seqs): their rows; attention and the
    // recurrence run per run, everything else over all n rows.
    const std::vector<SeqRun>* runs = nullptr;
  } block_pass;
  // Per layer, the MoE block its recipe runs (the hybrid span's Experts half
  // and the decode prefetch's router run outside the recipe's call); whether
  // any attention block has an output gate (its buffers).
  std::vector<MoeFfnBlock> moe_blocks;
  bool output_gate = false;
  void bind_recipe();  // checks the recipe's parts against this backend's, fills the two above
  void run_layer(int il) { recipe.layer(*this, c, il); }
  void attention(int il, const AttentionBlock& b) override;
  void linear_attention(int il, const LinearAttentionBlock& b) override;
  void dense_ffn(int il, const DenseFfnBlock& b) override;
  void moe_ffn(int il, const MoeFfnBlock& b) override;

  void project(const cuda::DevMat& m, const float* xf, const cuda::Q8Act* xq, int n, float* y, const float* residual);
  void norm_rows(const float* src, const float* weight, int n);
  void attention_block(int il, const AttentionBlock& b, int n, const int32_t* positions, bool decode, int max_kv_len,
                       const int32_t* kv_len, int pos0);
  // ---- the blocks hybrids add (qwen35_blocks.cpp)
  void linear_attention_block(int il, int n);
  void shared_expert(int il, int n);
  void small_projection(const cuda::DevMat& m, int n, float* y);
  void check_hybrid_arch() const;
  void prologue(int il, int slot, int n, float* qp, float* kp, float* vp, const int32_t* positions, bool one_qkv,
                RopeMode rm);
  void attend(int il, const AttentionBlock& b, int slot, int row0, int n, const int32_t* positions, bool decode,
              int max_kv_len, const int32_t* kv_len, int pos0, bool one_qkv, float* qp, float* kp, float* vp);
  // A multi-sequence pass of one token per sequence: the prologue and the
  // decode attention of all its rows in one launch each, when they can be.
  bool attend_decode_rows(int il, const AttentionBlock& b, int n, const int32_t* positions, float* qp, float* kp,
                          float* vp);
  void router_logits_rows(const cuda::DevMat& R, int n);
  // Router R on the FFN input x of n tokens: top-k ids and weights.
  // router_b: the layer's router bias (b.router_bias, gpt-oss), added to the logits before the top k.
  void route(const MoeFfnBlock& b, const cuda::DevMat& R, int n, int32_t* ids, float* weights,
             const float* router_b = nullptr);
  void report_routes(int il, int n);
  void dense_ffn_block(int il, int n);
  void moe_ffn_block(int il, const MoeFfnBlock& b, int n, FfnPart part);
  bool pinned_experts(int il, int n) const;
  // Tokens per launch of the all-resident expert kernels on pinned layer il
  // for an n-token pass (n, or sub-batches the lent scratch holds; 0: the
  // tiered step). Sub-batches are at least kMinPinnedBatch tokens.
  int pinned_batch(int il, int n) const;
  static constexpr int kMinPinnedBatch = 512;
  uint64_t pinned_splits = 0;  // passes pinned_batch split (CudaBackend::pinned_split_passes)
  int predicted_layer(int il);  // next_tiered[il] when prefetch is on, else -1
  void predict_routes(int target);
  void enqueue_hybrid_decode(int max_kv_len);
  void head(int first, int m);
  void enqueue_decode(int max_kv_len);
  void copy_logits(float* dst, int m);
  void decode(int32_t token, int64_t p, float* out);
  void prefill(const int32_t* tokens, int n, int64_t pos0, float* out, bool all);
  void prefill_batch(const int32_t* tokens, int n, int64_t pos0, float* out, bool all);
  // ---- several sequences (forward_seqs)
  void select_slot(int slot);  // cur_slot, dropping decode graphs captured for another
  // One pass over `runs` (tokens: n of them, in run order): logits of the
  // rows `want` (ascending) into out, one n_vocab row each; rows_out (when
  // not null, n x n_embd floats on the host): every row's residual stream
  // after the last layer (the hidden hook's input), before the head.
  void run_seqs(const int32_t* tokens, int n, const std::vector<int>& want, float* out, float* rows_out = nullptr);
  void enqueue_seq_layers(int n);  // embed + every layer over `runs` (run_seqs; captured for decode steps)
};

}  // namespace ms
