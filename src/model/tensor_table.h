// The tensor table of a layer: which dense tensors (all but the routed
// experts) its blocks read, under which GGUF names, of which shapes. It is
// derived from the blocks the architecture's recipe runs (model/recipe.h), so
// the names are spelled once, here, and a new architecture made of existing
// blocks adds no loader code; the one per-architecture naming choice (the FFN
// norm's name) comes from its model/arch.cpp row.
//
//   for (const LayerTensorSpec& t : layer_tensor_table(cfg, il, plan[il]))
//     layer.*t.field = bind(t.name, t.shape, t.f32);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/recipe.h"
#include "model/weights.h"

namespace ms {

struct LayerTensorSpec {
  TensorView LayerWeights::*field = nullptr;  // where the loader binds it
  std::string name;                           // "blk.3.attn_q.weight"
  std::vector<int64_t> shape;                 // GGUF order: {cols, rows} or {n}
  bool f32 = false;                           // norms, biases, conv taps: the engine reads them as floats
};

// The dense tensors of layer il that `blocks` (the layer's calls, from
// plan_layers) read, in block order and, within a block, in the order the
// generated and converted files store them (gen writes its files in this
// order). Routed experts are bound separately (three layouts: model/weights.h);
// the generator and the converter place them right after the router (and its
// bias).
std::vector<LayerTensorSpec> layer_tensor_table(const ModelConfig& c, int il, const std::vector<BlockCall>& blocks);

// The GGUF name of a dense layer tensor after "blk.N.", by the LayerWeights
// field it binds to ("attn_q.weight"; the FFN norm's per-arch name from `a`):
// the one spelling that the table, the generator (engine/synthetic_model.cpp)
// and the converter (convert/tensor_plan.cpp) share. Throws ms::Error for a
// field without one.
const char* layer_tensor_suffix(TensorView LayerWeights::*field, const ArchInfo& a);
// "blk.<il>." + layer_tensor_suffix(field, a).
std::string layer_tensor_name(int il, TensorView LayerWeights::*field, const ArchInfo& a);

// The GGUF name of the FFN norm (after blk.N.): "ffn_norm.weight", or
// "post_attention_norm.weight" for the archs whose files call it that.
const char* ffn_norm_name(const ArchInfo& a);

}  // namespace ms
