#include "engine/expert_executor.h"

#include <string>

#include "util/error.h"

namespace ms {

ExpertFfnWeights expert_ffn_weights(const ExpertWeights& ex) {
  ExpertFfnWeights w;
  w.n_embd = ex.n_embd;
  w.n_ff = ex.n_ff;
  w.gate_type = ex.gate_type;
  w.up_type = ex.up_type;
  w.down_type = ex.down_type;
  w.gate = ex.gate_;
  w.up = ex.up_;
  w.down = ex.down_;
  w.gate_bias = ex.gate_b_;  // gpt-oss: biases and the clamped SwiGLU
  w.up_bias = ex.up_b_;
  w.down_bias = ex.down_b_;
  w.clamped_swiglu = ex.clamped_swiglu;
  return w;
}

std::vector<ExpertFfnWeights> expert_ffn_layers(const ModelWeights& w) {
  std::vector<ExpertFfnWeights> layers;
  layers.reserve(w.layers.size());
  for (const LayerWeights& L : w.layers) layers.push_back(expert_ffn_weights(L.experts));
  // The MTP blocks follow the main stack (layer n_layer + j), as in the file.
  for (const MtpWeights& m : w.mtp) layers.push_back(expert_ffn_weights(m.layer.experts));
  return layers;
}

void CpuExpertExecutor::compute(int layer, const float* x, int n_tokens, const std::vector<ExpertWork>& work,
                                float* y) {
  if (work.empty()) return;
  if (layer < 0 || layer >= static_cast<int>(layers_.size()))
    throw Error("expert executor: layer " + std::to_string(layer) + " out of range");
  ffn_.compute(layers_[static_cast<size_t>(layer)], x, n_tokens, work, y);
}

}  // namespace ms
