// One forward recipe per architecture, written once over the block interface
// (model/blocks.h) that every backend implements: which blocks a layer runs,
// in which order, with which parameters.
//
//   const Recipe& r = recipe_for(cfg);           // by general.architecture
//   for (int il = 0; il < cfg.n_layer; ++il) r.layer(blocks, cfg, il);
//
// Adding an architecture: a row in model/arch.cpp, its tensors in the loader
// (model/weights.cpp), a recipe file model/recipe_<arch>.cpp defining
// `void <arch>_layer(LayerBlocks&, const ModelConfig&, int)`, and one line in
// kRecipes (model/recipe.cpp). New blocks (or block parameters) only where the
// architecture has new math.
#pragma once
#include <string>
#include <variant>
#include <vector>

#include "model/blocks.h"
#include "model/weights.h"

namespace ms {

using LayerRecipeFn = void (*)(LayerBlocks& blocks, const ModelConfig& c, int il);

struct Recipe {
  const char* arch;    // GGUF general.architecture
  LayerRecipeFn layer; // runs layer il (0 .. n_layer-1) of the main stack
};

// The recipe of c's architecture; throws ms::Error naming an architecture
// that has none.
const Recipe& recipe_for(const ModelConfig& c);

// The recipes (model/recipe_*.cpp).
void decoder_layer(LayerBlocks& b, const ModelConfig& c, int il);    // llama, qwen2, qwen3, qwen3moe
void qwen35moe_layer(LayerBlocks& b, const ModelConfig& c, int il);  // Qwen3.5/3.6-MoE hybrids
void gpt_oss_layer(LayerBlocks& b, const ModelConfig& c, int il);    // OpenAI gpt-oss

// ---- what a recipe asks of a backend, without running it

using BlockCall = std::variant<AttentionBlock, LinearAttentionBlock, DenseFfnBlock, MoeFfnBlock>;
// The blocks of each layer, in call order ([n_layer][calls]): for sizing
// buffers and for refusing, at construction, a model whose recipe asks for a
// part the backend lacks.
std::vector<std::vector<BlockCall>> plan_layers(const ModelConfig& c);

// Which optional parts a backend implements; the default is what both
// backends ran before gpt-oss.
struct BlockSupport {
  bool attention_output_bias = false;
  bool attention_sinks = false;
  bool attention_window = false;
  bool router_bias = false;
  bool expert_bias = false;
  bool clamped_swiglu = false;
};
// The first optional part of `call` outside `has` ("attention sinks", ...),
// or nullptr when the backend has all it asks for.
const char* missing_block_part(const BlockCall& call, const BlockSupport& has);
// Throws ms::Error "<backend>: <part> (layer N of '<arch>') is not
// implemented" for the first part the recipe asks for outside `has`.
void check_blocks(const ModelConfig& c, const BlockSupport& has, const std::string& backend);

}  // namespace ms
