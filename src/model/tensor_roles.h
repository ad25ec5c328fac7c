// What each tensor of a GGUF model is for, from its name alone, and how a
// model's bytes split between dense weights (which live in VRAM) and routed
// experts (which the residency tiers move around).
//
// Names follow the GGUF convention: global tensors (`token_embd.weight`,
// `output_norm.weight`, `output.weight`) and per-layer ones
// `blk.<layer>.<part>.<weight|bias|...>`. Routed experts come in three layouts:
//   stacked:    blk.N.ffn_{gate,up,down}_exps.weight   3-D {cols, rows, n_expert}
//   merged:     blk.N.ffn_gate_up_exps.weight          3-D {n_embd, 2*n_ff, n_expert}
//   per-expert: blk.N.ffn_{gate,up,down}.E.weight      2-D, one tensor per expert (older Mixtral files)
// Extending: add a role to the enum, its name to role_name(), and its part
// name to the table in tensor_roles.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

class GgufFile;
struct ModelHParams;

enum class TensorRole {
  TokenEmbd, Output, OutputNorm,
  AttnNorm, AttnQ, AttnK, AttnV, AttnQKV, AttnOutput, AttnQNorm, AttnKNorm, AttnPostNorm,
  AttnSinks,                                      // attn_sinks: a learned logit per head (gpt-oss)
  FfnNorm, FfnPostNorm,
  Router,                                         // ffn_gate_inp
  ExpertGate, ExpertUp, ExpertDown, ExpertGateUp, // routed experts (any layout)
  SharedGate, SharedUp, SharedDown, SharedRouter, // shared experts: ffn_*_shexp, ffn_gate_inp_shexp
  DenseGate, DenseUp, DenseDown,                  // dense FFN
  Other,                                          // anything else (still counted, as dense)
};
const char* role_name(TensorRole r);  // "attn_q", "expert_gate", ...

struct TensorClass {
  TensorRole role = TensorRole::Other;
  int layer = -1;   // blk.N; -1 for global tensors
  int expert = -1;  // per-expert layout only: the E of blk.N.ffn_gate.E.weight
  std::string suffix;  // "weight", "bias", ... (what follows the part name)

  bool is_routed_expert() const {
    return role == TensorRole::ExpertGate || role == TensorRole::ExpertUp || role == TensorRole::ExpertDown ||
           role == TensorRole::ExpertGateUp;
  }
  bool is_shared_expert() const {
    return role == TensorRole::SharedGate || role == TensorRole::SharedUp || role == TensorRole::SharedDown ||
           role == TensorRole::SharedRouter;
  }
};

// Classifies a tensor name. Never throws: unknown names are Other (with the
// layer filled in when the name starts with blk.N.).
TensorClass classify_tensor(std::string_view name);

// ---------------------------------------------------------------- byte split

struct LayerSplit {
  int layer = 0;
  uint64_t dense_bytes = 0;       // attention, norms, router, shared experts, dense FFN, ...
  uint64_t expert_bytes = 0;      // routed experts, all of them
  int n_dense_tensors = 0;
  int n_expert_tensors = 0;
  int64_t n_expert = 0;           // routed experts in this layer (0: dense layer)
  uint64_t one_expert_bytes = 0;  // gate+up+down of the largest expert of this layer
};

struct WeightSplit {
  std::vector<LayerSplit> layers;  // index = layer; layers with no tensors are present with zeros
  uint64_t global_bytes = 0;       // token_embd, output, output_norm and other non-layer tensors (dense)
  int n_global_tensors = 0;
  uint64_t dense_bytes = 0;        // global + every layer's dense bytes
  uint64_t expert_bytes = 0;       // every layer's routed-expert bytes
  int64_t total_experts = 0;       // sum over layers of n_expert (expert slots in the whole model)
  uint64_t one_expert_bytes = 0;   // the largest single expert of any layer
  uint64_t total_bytes() const { return dense_bytes + expert_bytes; }
};

// Sums tensor bytes by role. A stacked tensor of n_expert experts gives each
// expert nbytes / n_expert (its last dimension); per-expert tensors add to
// their expert. Throws ms::Error if a stacked expert tensor's last dimension
// disagrees with another in the same layer.
WeightSplit split_weights(const GgufFile& file);

// ---------------------------------------------------------------- VRAM budget

// What a VRAM budget leaves for routed experts once the things that must be
// on the GPU are there:
//   room = budget - dense weights - KV cache(n_ctx) - reserve
//   reserve = kVramFixedReserve + n_vocab * 4 B * kVramLogitRows   (f32 logits)
//   KV cache = n_ctx * sum over attention layers of n_head_kv * (key_length + value_length) * 2 B   (F16 K and V;
//              kv_bytes_per_32 / 32 B an element for other cache types: ModelHParams::kv_cache_bytes)
//              + the recurrent state of linear-attention layers (hybrids; ModelHParams::recurrent_state_bytes)
// CUDA context, activations, workspaces (activations and the hybrid step's
// buffers for 512-token batches, with room to spare: the measured figure is in
// bench/results/hybrid_bench.md, "Figures moved from code comments").
constexpr uint64_t kVramFixedReserve = 384ull << 20;
constexpr int64_t kVramLogitRows = 64;                // logits of up to 64 tokens (speculative verify batches)

struct VramPlan {
  uint64_t budget = 0;
  int64_t n_ctx = 0;
  uint64_t dense_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t reserve_bytes = 0;
  uint64_t minimum_bytes = 0;     // dense + KV + reserve: below this nothing runs
  uint64_t everything_bytes = 0;  // minimum + every routed expert
  bool fits_minimum = false;
  uint64_t shortfall = 0;         // minimum - budget when !fits_minimum
  uint64_t room = 0;              // for routed experts
  int64_t experts_fit = 0;        // of the largest expert size, capped at total_experts
  int64_t total_experts = 0;
  double fraction = 0;            // experts_fit / total_experts
  int layers_fit = 0;             // whole layers of experts that fit, taken in layer order
  bool fits_everything = false;
};

// The reserve for a vocabulary of n_vocab tokens.
uint64_t vram_reserve_bytes(int64_t n_vocab);
VramPlan plan_vram(const WeightSplit& split, const ModelHParams& hp, uint64_t budget, int64_t n_ctx,
                   int kv_bytes_per_32 = 64);
// The same sums with no budget: minimum and everything (budget = 0).
VramPlan vram_needs(const WeightSplit& split, const ModelHParams& hp, int64_t n_ctx, int kv_bytes_per_32 = 64);

}  // namespace ms
