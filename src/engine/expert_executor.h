// Where the routed-expert FFN of a layer is computed: the seam between the
// forward pass and the devices. The forward pass routes a batch, groups its
// (token, slot) pairs by expert into ExpertWork items, and asks an executor to
// fill y[slot] = FFN_e(x[token]) for each; it then combines the slots in a
// fixed order (so results never depend on which device computed an expert).
// The hybrid planner later hands some work items to the GPU and the rest to
// the CPU executor here.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/thread_pool.h"
#include "model/weights.h"

namespace ms {

struct ExpertWork {
  int expert = 0;
  std::vector<int32_t> tokens;  // rows of x
  std::vector<int32_t> slots;   // rows of y (token * k + j), same length as tokens
};

// Groups a layer's routing (ids [n_tokens][k]) by expert, in increasing
// expert id; within an expert, tokens in increasing order.
std::vector<ExpertWork> group_by_expert(const int32_t* ids, int n_tokens, int k, int n_expert);

class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;
  // y[slot] = down_e(silu(gate_e x[token]) * up_e x[token]) for every pair of
  // every work item (n_embd floats per row of x and y).
  virtual void compute(int layer, const float* x, int n_tokens, const std::vector<ExpertWork>& work, float* y) = 0;
};

// Computes experts on the CPU from the mapped weights. All work items of a
// call share two parallel regions (gate+up of every expert, then down), so
// each expert's weight rows are read once per call whatever its token count.
class CpuExpertExecutor : public ExpertExecutor {
 public:
  CpuExpertExecutor(const ModelWeights& w, ThreadPool& pool) : w_(w), pool_(pool) {}
  void compute(int layer, const float* x, int n_tokens, const std::vector<ExpertWork>& work, float* y) override;

 private:
  const ModelWeights& w_;
  ThreadPool& pool_;
  std::vector<uint8_t> act_gate_, act_up_, act_down_;
  std::vector<float> gate_, up_;
  std::vector<int32_t> pair_slot_;  // slot of each pair, in work order
};

// The reference the fast executor is tested against: every pair on its own,
// weights dequantized to f32, double accumulation, no threads.
void expert_ffn_ref(const ExpertWeights& ex, int expert, const float* x, float* y);

}  // namespace ms
