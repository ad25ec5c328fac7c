// The tensor table: every tensor a model file holds, under which GGUF name, of
// which shape, and where the loader binds it. It is derived from the blocks
// the architecture's recipe runs (model/recipe.h), so each name is spelled
// once, here: the loader (model/weights.cpp), the generator
// (engine/synthetic_model.cpp) and the converter (convert/tensor_plan.cpp) all
// walk it, and a new architecture made of existing blocks adds no loader,
// generator or converter naming code. The one per-architecture naming choice
// (the FFN norm's name) comes from its model/arch.cpp row.
//
//   for (const LayerTensorSpec& t : layer_file_tensors(cfg, il, plan[il], ExpertLayout::Stacked))
//     bind(t.name, t.shape, t.f32, t.required);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/recipe.h"
#include "model/weights.h"

namespace ms {

// How a layer's routed experts are stored (model/weights.h):
//   Stacked:   ffn_{gate,up,down}_exps.weight, 3-D {cols, rows, n_expert}
//   Merged:    ffn_gate_up_exps.weight {n_embd, 2*n_ff, n_expert} + ffn_down_exps.weight
//   PerExpert: ffn_{gate,up,down}.E.weight, 2-D, one tensor per expert (older Mixtral files)
enum class ExpertLayout { Stacked, Merged, PerExpert };
const char* expert_layout_name(ExpertLayout l);  // "stacked", "merged", "per-expert"

// One tensor of the routed experts: a matrix (all experts, or one expert's in
// the per-expert layout) or a bias (one row per expert; arch->expert_bias).
enum class ExpertPart { Gate, Up, Down, GateUp, GateBias, UpBias, DownBias };

struct LayerTensorSpec {
  enum class Kind {
    Global,  // token_embd, output_norm, output: a ModelWeights field
    Dense,   // a layer's dense tensor: a LayerWeights field
    Expert,  // a routed-expert tensor (ExpertWeights is assembled from them)
    Mtp,     // an MTP block's own nextn tensor: an MtpWeights field
  };
  Kind kind = Kind::Dense;
  TensorView ModelWeights::*global = nullptr;  // Global
  TensorView LayerWeights::*field = nullptr;   // Dense: where the loader binds it
  ExpertPart part = ExpertPart::Gate;          // Expert
  int expert = -1;                             // Expert, per-expert layout: whose matrix
  TensorView MtpWeights::*mtp = nullptr;       // Mtp
  int layer = -1;                              // blk.N (-1: global)
  std::string name;                            // "blk.3.attn_q.weight"
  std::vector<int64_t> shape;                  // GGUF order: {cols, rows[, n_expert]} or {n}
  bool f32 = false;      // norms, biases, conv taps: the engine reads them as floats
  bool required = true;  // the loader refuses a file without it (else binds it when present)
  bool written = true;   // gen and the converter write it (false: other converters' files may have it)
};

// The dense tensors of layer il that `blocks` (the layer's calls, from
// plan_layers) read, in block order and, within a block, in file order.
// Routed experts and nextn tensors are not in it (layer_file_tensors has them).
std::vector<LayerTensorSpec> layer_tensor_table(const ModelConfig& c, int il, const std::vector<BlockCall>& blocks);

// Every tensor of layer il in file order: the dense ones, the routed experts
// in `layout` right after the router (and its bias), and, for an MTP block
// (il >= c.n_layer), its nextn tensors last. This is the order gen writes and
// the converter plans.
std::vector<LayerTensorSpec> layer_file_tensors(const ModelConfig& c, int il, const std::vector<BlockCall>& blocks,
                                                ExpertLayout layout);

// The global tensors in file order: token_embd, output_norm, output (not
// required: absent means tied to token_embd; left out with `tied_output`).
std::vector<LayerTensorSpec> global_tensor_table(const ModelConfig& c, bool tied_output);

// The blocks an MTP block runs: those of the main stack's first full-attention
// layer. Throws ms::Error when the main stack has none.
const std::vector<BlockCall>& mtp_blocks(const std::vector<std::vector<BlockCall>>& plan);

// The whole file in order: globals, then layers 0 .. n_layer + n_layer_mtp - 1.
// Only tensors that gen and the converter write (`written`).
std::vector<LayerTensorSpec> model_tensor_table(const ModelConfig& c, ExpertLayout layout, bool tied_output);

// The GGUF name of a dense layer tensor after "blk.N.", by the LayerWeights
// field it binds to ("attn_q.weight"; the FFN norm's per-arch name from `a`).
// Throws ms::Error for a field without one.
const char* layer_tensor_suffix(TensorView LayerWeights::*field, const ArchInfo& a);
// "blk.<il>." + layer_tensor_suffix(field, a).
std::string layer_tensor_name(int il, TensorView LayerWeights::*field, const ArchInfo& a);
// A routed-expert tensor's name: "blk.<il>.ffn_gate_exps.weight", or with
// expert >= 0 (per-expert layout, Gate/Up/Down only) "blk.<il>.ffn_gate.<expert>.weight".
std::string expert_tensor_name(int il, ExpertPart part, int expert = -1);
// An MTP block's nextn tensor: "blk.<il>.nextn.eh_proj.weight", ...
std::string mtp_tensor_name(int il, TensorView MtpWeights::*field);

// The GGUF name of the FFN norm (after blk.N.): "ffn_norm.weight", or
// "post_attention_norm.weight" for the archs whose files call it that.
const char* ffn_norm_name(const ArchInfo& a);

}  // namespace ms
