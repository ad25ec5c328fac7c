// The routed-expert FFN of a layer on the CPU, from a model's weights. The
// forward pass routes a batch, groups its (token, slot) pairs by expert into
// ExpertWork items (cpu/expert_ffn.h), and asks the executor to fill
// y[slot] = FFN_e(x[token]) for each; it then combines the slots in a fixed
// order (so results never depend on which device computed an expert). The
// CPU backend and the tiered (hybrid) step's CPU share
// (cuda/backend/hybrid_moe.h) both compute through CpuExpertExecutor.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/expert_ffn.h"
#include "cpu/thread_pool.h"
#include "model/weights.h"

namespace ms {

// A layer's routed experts as the CPU expert FFN takes them (a view of `ex`:
// valid while `ex` is).
ExpertFfnWeights expert_ffn_weights(const ExpertWeights& ex);
// Every layer's, indexed by layer (dense layers: no experts), then the MTP
// blocks' (index n_layer + j).
std::vector<ExpertFfnWeights> expert_ffn_layers(const ModelWeights& w);

// Computes experts on the CPU from the mapped weights: ExpertFfn
// (cpu/expert_ffn.h) on the layer's weights. rounding: ActRounding::Gpu for
// the hybrid mode's CPU experts, so they round activations as the GPU's do.
class CpuExpertExecutor {
 public:
  CpuExpertExecutor(const ModelWeights& w, ThreadPool& pool, ActRounding rounding = ActRounding::Native)
      : layers_(expert_ffn_layers(w)), ffn_(pool, rounding) {}
  // y[slot] = FFN_e(x[token]) for every pair of every work item (n_embd
  // floats per row of x and y; the FFN as cpu/expert_ffn.h defines it).
  void compute(int layer, const float* x, int n_tokens, const std::vector<ExpertWork>& work, float* y);

 private:
  std::vector<ExpertFfnWeights> layers_;
  ExpertFfn ffn_;
};

}  // namespace ms
