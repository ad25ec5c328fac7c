// The architectures the engine runs, as data: one row per GGUF
// `general.architecture` with the few switches the generic layer recipe
// (src/engine/cpu_backend.cpp) reads. Adding a Llama-like architecture means
// adding a row here, not a forward pass.
//
// The recipe, for every layer (pre-norm decoder):
//   x = rmsnorm(h, attn_norm)
//   q, k, v = Wq x (+bq), Wk x (+bk), Wv x (+bv)         bias: qkv_bias
//   q, k = rmsnorm per head (attn_q_norm, attn_k_norm)   qk_norm
//   q, k = rope(q, k, pos)                               rope_mode
//   h += Wo attention(q, k, v)
//   x = rmsnorm(h, ffn_norm)
//   dense: h += Wdown (silu(Wgate x) * Wup x)
//   MoE:   ids, w = router(Wr x)                         router_mode
//          h += sum_j w_j * down_j(silu(gate_j x) * up_j x)
// then logits = Woutput rmsnorm(h, output_norm) (Woutput = token_embd if absent).
#pragma once
#include <string>
#include <vector>

#include "model/rope_router.h"

namespace ms {

struct ArchInfo {
  const char* name;        // GGUF general.architecture
  RopeMode rope_mode;      // Normal (adjacent pairs) for llama; Neox (halves) for the Qwen family
  bool qk_norm;            // per-head RMSNorm of q and k (attn_q_norm / attn_k_norm)
  bool qkv_bias;           // attn_q/k/v.bias present (qwen2)
  bool moe;                // routed experts: required (qwen3moe) ...
  bool moe_optional;       // ... or only when `<arch>.expert_count` > 0 (llama: Mixtral)
  RouterMode router_mode;  // how router logits become expert weights
  bool default_renorm;     // SoftmaxTopK: renormalise the top-k unless `<arch>.expert_weights_norm` says otherwise
};

// The row for a GGUF architecture name. Throws ms::Error naming the
// architecture and listing the supported ones.
const ArchInfo& arch_info(const std::string& name);
const std::vector<ArchInfo>& all_archs();
std::string supported_arch_names();  // "llama, qwen2, qwen3, qwen3moe"

}  // namespace ms
