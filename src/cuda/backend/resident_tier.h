// The resident tier of the MoE step (engine/moe_tiers.h) on CUDA: a layer
// whose every routed expert stays in VRAM (the all-resident model's
// ResidentExperts, or a tiered layer pinned in its slots) is the step's
// resident plan, and its execution is the fused all-resident kernel
// (cuda::expert_ffn) over the device's own routes, combine included: the
// same launches as before the step took this path, nothing read back, no
// host work beyond the calls (so a decode graph captures it as it was).
//
// CUDA-only header; used by CudaBackend's MoE block (layer_recipe.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "cuda/expert_ffn.h"
#include "cuda/matvec.h"
#include "engine/moe_tiers.h"
#include "util/error.h"

namespace ms {

class ResidentTier final : public MoeTiers {
 public:
  struct Inputs {
    const cuda::ExpertWeights* experts = nullptr;
    const float* x = nullptr;           // [n][d] FFN input
    const cuda::Q8Act* x_q8 = nullptr;  // the same as Q8 rows
    const int32_t* ids = nullptr;       // [n][k] device routes
    const float* weights = nullptr;     // [n][k]
    float* h = nullptr;                 // [n][d] residual, added to in place
    void* scratch = nullptr;
    size_t scratch_bytes = 0;
    int k = 0;
    int64_t d = 0;
    // Tokens per launch (a pinned layer's long pass may run in sub-batches
    // that fit the scratch; each token's rows are computed the same whatever
    // the batch around them).
    int batch = 0;
    cudaStream_t stream = nullptr;
  };
  explicit ResidentTier(const Inputs& in) : in_(in) {}

  bool device_runs_layer(int, int) const override { return true; }
  void run_on_device(int, int n) override {
    const int sub = in_.batch > 0 ? in_.batch : n;
    for (int t0 = 0; t0 < n; t0 += sub) {
      const int m = std::min(sub, n - t0);
      const cuda::Q8Act xq = cuda::q8act_rows(*in_.x_q8, t0);
      const int64_t row = static_cast<int64_t>(t0) * in_.d, pair = static_cast<int64_t>(t0) * in_.k;
      cuda::expert_ffn(*in_.experts, in_.x + row, &xq, m, in_.k, in_.ids + pair, in_.weights + pair, in_.h + row,
                       in_.h + row, in_.scratch, in_.scratch_bytes, in_.stream);
    }
  }
  // The resident plan reads nothing back and has no share on the host.
  MoeRoutes fetch_routes(int, int, bool) override { throw Error("CUDA backend: a resident layer has no host routes"); }
  void compute_share(const MoeShare&) override {}
  void combine(int, int) override {}

 private:
  Inputs in_;
};

}  // namespace ms
