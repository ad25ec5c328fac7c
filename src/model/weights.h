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
  float rope_freq_scale = 1.0f;
  bool router_renorm = true;  // SoftmaxTopK: renormalise the top-k weights

  bool is_moe() const { return n_expert > 0; }
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

  // Filled by the binder. Pointers are into the data section at data_base_,
  // which starts at file offset data_offset_ (the mapping, or a copy in RAM).
  std::vector<const uint8_t*> gate_, up_, down_;
  const uint8_t* data_base_ = nullptr;
  uint64_t data_offset_ = 0;
};

struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo;
  TensorView bq, bk, bv;          // qkv_bias archs
  TensorView q_norm, k_norm;      // qk_norm archs: head_dim values each
  TensorView ffn_norm;
  TensorView ffn_gate, ffn_up, ffn_down;  // dense FFN
  TensorView router;              // MoE: n_expert rows x n_embd
  ExpertWeights experts;          // MoE
};

struct ModelWeights {
  ModelConfig cfg;
  TensorView token_embd, output_norm, output;  // output == token_embd when tied
  bool tied_output = false;
  std::vector<LayerWeights> layers;
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
