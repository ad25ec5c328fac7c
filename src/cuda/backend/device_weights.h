// The dense weights of a model in device memory, in their file's quant
// format: embeddings, attention, norms, routers, dense FFNs, the output head
// and, for hybrids (qwen35moe), the Gated DeltaNet layers and the shared
// experts (always resident: every token runs them), each blob uploaded once
// into one arena. Routed experts are not here
// (resident_experts.h, or the hybrid step's slots: hybrid_moe.h).
//
// CUDA-only header; used by CudaBackend.
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/device.h"
#include "cuda/expert_bias.h"
#include "cuda/matvec.h"
#include "model/blocks.h"
#include "model/weights.h"

namespace ms::cuda {

// A weight matrix in device memory.
struct DevMat {
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  explicit operator bool() const { return data != nullptr; }
  MatrixSet set() const {
    MatrixSet m;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    m.base = data;
    return m;
  }
};

// One layer's dense weights (absent ones null).
struct DevLayer {
  DevMat wq, wk, wv, wo, ffn_gate, ffn_up, ffn_down, router;
  // Wq, Wk, Wv stored back to back when they share a type: decode computes
  // q|k|v in one launch (wq/wk/wv then point into it, for batches).
  DevMat wqkv;
  // Wq|Wk stored so, with Wv (of another type) right after them, when the
  // three do not share a type: decode's q|k in one launch, v in a second.
  DevMat wqk;
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;
  // gpt-oss: the output projection's bias, the per-head attention sinks, the
  // router's bias, and the routed experts' biases ([n_expert][n_ff] gate and
  // up, [n_expert][n_embd] down; kept with the dense weights, not the tiers).
  const float *bo = nullptr, *attn_sinks = nullptr, *router_b = nullptr;
  const float *exp_gate_b = nullptr, *exp_up_b = nullptr, *exp_down_b = nullptr;

  // Gated DeltaNet (a linear-attention layer; see model/weights.h).
  DevMat ssm_qkv, ssm_z, ssm_alpha, ssm_beta, ssm_out;
  const float *ssm_a = nullptr, *ssm_dt = nullptr, *ssm_conv = nullptr, *ssm_norm = nullptr;
  // Shared expert: SwiGLU FFN scaled by sigmoid(shexp_router . x).
  DevMat shexp_gate, shexp_up, shexp_down, shexp_router;
};

// Layer L's routed-expert biases (resident here for every expert, indexed by
// expert id) and the activation its MoE block runs, as the tiered step's slot
// tables carry them (expert_slots.h); none for a block without expert biases.
ExpertBias expert_bias(const DevLayer& L, const MoeFfnBlock& b);

struct DeviceWeights {
  DeviceArena arena;
  DevMat token_embd, output;  // output aliases token_embd's bytes when tied
  const float* output_norm = nullptr;
  std::vector<DevLayer> layers;

  // Every dense weight blob of w once (a tied output = token_embd is uploaded
  // once): measure, allocate the arena, copy. Throws ms::Error (from the
  // arena) when the device has not enough memory.
  static DeviceWeights upload(const ModelWeights& w);

  const DevLayer& layer(int il) const { return layers[static_cast<size_t>(il)]; }
  uint64_t bytes() const { return arena.capacity(); }
};

}  // namespace ms::cuda
