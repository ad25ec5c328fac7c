// A model's weights bound from a GGUF file: per-layer views of the mmap'd
// tensors, checked against the hyper-parameters, for the engine to compute
// with. Nothing is copied; the GgufFile must outlive the ModelWeights.
//
// Routed experts come in three layouts that all look the same through
// ExpertWeights (gate/up/down of expert e, and the file byte ranges of
// expert e, which the streaming tiers move around):
//   stacked:  blk.N.ffn_{gate,up,down}_exps.weight, 3-D {cols, rows, n_expert}
//   merged:   blk.N.ffn_gate_up_exps.weight {n_embd, 2*n_ff, n_expert}
//             (expert e's gate rows first, then its up rows) + ffn_down_exps
//   per-expert (older Mixtral files): blk.N.ffn_{gate,up,down}.E.weight, 2-D
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/arch.h"
#include "model/rope_router.h"
#include "quant/types.h"

namespace ms {

class GgufFile;

// The hyper-parameters the forward pass needs, from `<arch>.*` metadata.
struct ModelConfig {
  std::string arch_name;
  const ArchInfo* arch = nullptr;
  int n_layer = 0;
  int64_t n_embd = 0;
  int n_head = 0, n_head_kv = 0;
  int head_dim = 0;       // attention.key_length, else n_embd / n_head
  int n_rot = 0;          // rope.dimension_count, else head_dim
  int64_t n_vocab = 0;    // rows of token_embd
  int64_t n_ctx_train = 0;
  int64_t n_ff = 0;       // dense FFN width (dense models)
  int n_expert = 0, n_expert_used = 0;
  int64_t n_ff_exp = 0;   // one expert's FFN width
  float rms_eps = 1e-6f;
  float rope_base = 10000.0f;
  RopeScaling rope_scaling;  // rope.scaling.*: none, linear or YaRN (model/rope_scaling.h)
  bool router_renorm = true;  // SoftmaxTopK: renormalise the top-k weights
  int64_t n_ff_shexp = 0;     // shared expert's FFN width (arch->shared_expert)

  // Linear-attention hybrids (arch->linear_attention). n_layer counts the main
  // stack only; the MTP blocks after it (n_layer_mtp, `nextn_predict_layers`)
  // are bound but not run by the forward pass.
  int n_layer_mtp = 0;
  std::vector<bool> linear_layer;  // [n_layer]: Gated DeltaNet instead of softmax attention
  struct LinearAttn {
    int conv_kernel = 0;            // ssm.conv_kernel: taps of the causal depthwise conv
    int n_k_heads = 0, n_v_heads = 0;  // ssm.group_count, ssm.time_step_rank
    int head_k = 0, head_v = 0;     // ssm.state_size, ssm.inner_size / n_v_heads
    int64_t key_dim() const { return static_cast<int64_t>(n_k_heads) * head_k; }
    int64_t value_dim() const { return static_cast<int64_t>(n_v_heads) * head_v; }
    // Channels of the fused projection and of the conv: [q | k | v].
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  } lin;

  // Sliding-window attention (arch->swa_pattern, gpt-oss): a query at
  // position p sees keys in (p - n_swa, p] on the layers marked here.
  int64_t n_swa = 0;
  std::vector<bool> swa_layer;  // [n_layer]; empty without a window
  bool is_swa(int il) const { return !swa_layer.empty() && swa_layer[static_cast<size_t>(il)]; }

  bool is_moe() const { return n_expert > 0; }
  bool is_linear(int il) const { return !linear_layer.empty() && linear_layer[static_cast<size_t>(il)]; }
  int n_attention_layers() const;
  std::string describe() const;  // one line: arch, layers, widths, experts
};

// Reads and checks the hyper-parameters; throws ms::Error naming the missing
// or invalid key, or the unknown architecture.
ModelConfig read_model_config(const GgufFile& file);

// One bound tensor: a matrix of `rows` rows of `cols` elements (vectors: rows 1).
struct TensorView {
  std::string name;
  DType type = DType::F32;
  const uint8_t* data = nullptr;  // nullptr: absent (optional tensor)
  int64_t rows = 0, cols = 0;
  uint64_t file_offset = 0;       // absolute, in the GGUF file
  uint64_t nbytes = 0;

  explicit operator bool() const { return data != nullptr; }
  uint64_t row_bytes() const;
  const float* f32() const { return reinterpret_cast<const float*>(data); }  // F32 vectors
};

struct ByteRange {
  uint64_t offset = 0;  // absolute file offset
  uint64_t size = 0;
};

class ExpertWeights {
 public:
  int n_expert = 0;
  int64_t n_embd = 0, n_ff = 0;
  DType gate_type = DType::F32, up_type = DType::F32, down_type = DType::F32;
  std::string layout;  // "stacked", "merged", "per-expert"

  // gate_e, up_e: n_ff rows x n_embd cols; down_e: n_embd rows x n_ff cols.
  const uint8_t* gate(int e) const { return gate_[static_cast<size_t>(e)]; }
  const uint8_t* up(int e) const { return up_[static_cast<size_t>(e)]; }
  const uint8_t* down(int e) const { return down_[static_cast<size_t>(e)]; }
  uint64_t gate_bytes() const;  // one expert's matrix
  uint64_t up_bytes() const;
  uint64_t down_bytes() const;
  uint64_t expert_bytes() const { return gate_bytes() + up_bytes() + down_bytes(); }
  // Where expert e's bytes are in the file (merged layouts give one range
  // for gate and up together).
  std::vector<ByteRange> ranges(int e) const;

  // f32 biases (arch->expert_bias, gpt-oss), null when absent: n_ff values
  // for gate and up, n_embd for down. Small and kept with the dense weights
  // (not in ranges(): the tiers move matrices, every device has the biases).
  const float* gate_bias(int e) const { return gate_b_ ? gate_b_ + static_cast<int64_t>(e) * n_ff : nullptr; }
  const float* up_bias(int e) const { return up_b_ ? up_b_ + static_cast<int64_t>(e) * n_ff : nullptr; }
  const float* down_bias(int e) const { return down_b_ ? down_b_ + static_cast<int64_t>(e) * n_embd : nullptr; }
  bool has_bias() const { return gate_b_ || up_b_ || down_b_; }
  bool clamped_swiglu = false;  // the activation (arch->clamped_swiglu, cpu/ops.h: swiglu_oai)

  // Filled by the binder. Pointers are into the data section at data_base_,
  // which starts at file offset data_offset_ (the mapping, or a copy in RAM).
  std::vector<const uint8_t*> gate_, up_, down_;
  const uint8_t* data_base_ = nullptr;
  uint64_t data_offset_ = 0;
  const float *gate_b_ = nullptr, *up_b_ = nullptr, *down_b_ = nullptr;  // [n_expert][n_ff|n_embd]
  TensorView gate_b_view_, up_b_view_, down_b_view_;  // the bias tensors (for byte counts and uploads)
};

struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo;  // wq: 2 * q_dim rows (q, gate per head) with attn_output_gate
  TensorView bq, bk, bv;          // qkv_bias archs
  TensorView bo;                  // attn_out_bias archs: n_embd
  TensorView attn_sinks;          // attn_sinks archs: one f32 logit per q head
  TensorView q_norm, k_norm;      // qk_norm archs: head_dim values each
  TensorView ffn_norm;            // post_attention_norm in qwen35moe files
  TensorView ffn_gate, ffn_up, ffn_down;  // dense FFN
  TensorView router;              // MoE: n_expert rows x n_embd
  TensorView router_b;            // router_bias archs: n_expert f32, added to the logits
  ExpertWeights experts;          // MoE

  // Gated DeltaNet (a linear-attention layer of a hybrid; wq..wo absent).
  // Value heads are in llama.cpp's tiled order: value head j reads key head
  // j % n_k_heads (see src/cpu/delta_net.h).
  TensorView ssm_qkv;             // attn_qkv: conv_dim rows x n_embd ([q | k | v])
  TensorView ssm_z;               // attn_gate: value_dim rows (the output gate z)
  TensorView ssm_beta, ssm_alpha; // n_v_heads rows: write strength, decay input
  TensorView ssm_a;               // n_v_heads f32: -exp(A_log), the decay rate (< 0)
  TensorView ssm_dt;              // n_v_heads f32: bias added to alpha before softplus
  TensorView ssm_conv;            // conv_dim rows x conv_kernel f32 (last tap: the current token)
  TensorView ssm_norm;            // head_v f32: the gated RMSNorm's weight
  TensorView ssm_out;             // n_embd rows x value_dim

  // Shared expert (arch->shared_expert): a dense SwiGLU FFN every token runs,
  // scaled by sigmoid(shexp_router . x).
  TensorView shexp_gate, shexp_up, shexp_down;  // n_ff_shexp x n_embd, .., n_embd x n_ff_shexp
  TensorView shexp_router;        // ffn_gate_inp_shexp: one row of n_embd

  // Every dense (non-routed-expert) tensor of the layer that is present.
  std::vector<const TensorView*> dense_tensors() const;
};

// An MTP (next-token prediction) block: a full-attention MoE layer fed by
// eh_proj [enorm(embedding) | hnorm(hidden)]. Bound and kept for drafting;
// the normal forward pass never runs it.
struct MtpWeights {
  LayerWeights layer;
  TensorView eh_proj;             // n_embd rows x 2 * n_embd
  TensorView enorm, hnorm;        // n_embd f32
  TensorView shared_head_norm;    // optional: n_embd f32
  TensorView shared_head_head;    // optional: its own output head (else the model's)
  TensorView embed_tokens;        // optional: its own embeddings (else the model's)
};

struct ModelWeights {
  ModelConfig cfg;
  TensorView token_embd, output_norm, output;  // output == token_embd when tied
  bool tied_output = false;
  std::vector<LayerWeights> layers;
  std::vector<MtpWeights> mtp;    // cfg.n_layer_mtp blocks (file layers n_layer ..)
  const GgufFile* file = nullptr;

  // Bytes one decode step reads: dense weights, k routed experts per layer,
  // and the output head (the "active bytes" of the bandwidth floor).
  uint64_t active_bytes_per_token() const;
  uint64_t total_expert_bytes() const;
};

// Binds every tensor the architecture's recipe needs. Throws ms::Error naming
// the missing tensor (and the file), or the tensor whose shape or type does
// not match the hyper-parameters. `data` (optional) is a copy of the file's
// data section (from file.data_offset() to the end) to bind to instead of
// the mapping, e.g. in huge-page-backed RAM.
ModelWeights bind_weights(const GgufFile& file, const uint8_t* data = nullptr);

}  // namespace ms
