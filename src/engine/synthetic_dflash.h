// `moestream gen --arch dflash`: a tiny random DFlash drafter
// (model/dflash_weights.h) for the tiny targets (qwen3moe, qwen35moe and the
// dense tiny presets: n_embd 256, 512 tokens, 4 layers), for tests. It reads
// target layers 1 and 3 (llama.cpp's numbering: the inputs of those layers),
// drafts blocks of 16, and shares the target's embeddings and output head,
// as the published drafters do; its tokenizer is the tiny targets' with a
// mask token. Weights are f32, ~U with standard deviation 1/sqrt(fan_in);
// norm weights 1 +- 0.2 so that a forward that skipped one would show.
#pragma once
#include <string>

#include "engine/synthetic_model.h"

namespace ms {

constexpr int kDFlashGenMaxLayers = 8;

// Uses opt.preset (tiny only), opt.seed and opt.n_layer (drafter layers; 0:
// 2). Throws ms::Error for another preset or an I/O error.
GenResult generate_dflash(const GenOptions& opt, const std::string& path);

}  // namespace ms
