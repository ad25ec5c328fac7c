#include "model/recipe.h"

#include "util/error.h"

namespace ms {
namespace {

// One row per architecture. llama (Mixtral too), qwen2, qwen3 and qwen3moe
// share one recipe: they differ only by switches of the same blocks (qk norm,
// qkv bias, RoPE pairing, router mode, experts or not) read from their
// arch.cpp rows. An architecture with its own layer structure has its own.
constexpr Recipe kRecipes[] = {
    {"llama", decoder_layer},
    {"qwen2", decoder_layer},
    {"qwen3", decoder_layer},
    {"qwen3moe", decoder_layer},
    {"qwen35moe", qwen35moe_layer},
    {"gpt-oss", gpt_oss_layer},
};

// Records the calls instead of computing.
class Recorder final : public LayerBlocks {
 public:
  std::vector<BlockCall> calls;
  void attention(int, const AttentionBlock& b) override { calls.emplace_back(b); }
  void linear_attention(int, const LinearAttentionBlock& b) override { calls.emplace_back(b); }
  void dense_ffn(int, const DenseFfnBlock& b) override { calls.emplace_back(b); }
  void moe_ffn(int, const MoeFfnBlock& b) override { calls.emplace_back(b); }
};

}  // namespace

const Recipe& recipe_for(const ModelConfig& c) {
  for (const Recipe& r : kRecipes)
    if (c.arch_name == r.arch) return r;
  throw Error("no forward recipe for architecture '" + c.arch_name + "' (model/recipe.cpp)");
}

const char* missing_block_part(const BlockCall& call, const BlockSupport& has) {
  if (const auto* a = std::get_if<AttentionBlock>(&call)) {
    if (a->output_bias && !has.attention_output_bias) return "the attention output bias";
    if (a->sinks && !has.attention_sinks) return "attention sinks";
    if (a->window > 0 && !has.attention_window) return "sliding-window attention";
  }
  auto act_missing = [&](const GluActivation& act) {
    return act.kind == GluActivation::Kind::ClampedSwiGLU && !has.clamped_swiglu;
  };
  if (const auto* d = std::get_if<DenseFfnBlock>(&call))
    if (act_missing(d->act)) return "the clamped SwiGLU";
  if (const auto* m = std::get_if<MoeFfnBlock>(&call)) {
    if (m->router_bias && !has.router_bias) return "the router bias";
    if (m->expert_bias && !has.expert_bias) return "expert biases";
    if (act_missing(m->act)) return "the clamped SwiGLU";
  }
  return nullptr;
}

std::vector<std::vector<BlockCall>> plan_layers(const ModelConfig& c) {
  const Recipe& r = recipe_for(c);
  std::vector<std::vector<BlockCall>> plan(static_cast<size_t>(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    Recorder rec;
    r.layer(rec, c, il);
    plan[static_cast<size_t>(il)] = std::move(rec.calls);
  }
  return plan;
}

void check_blocks(const ModelConfig& c, const BlockSupport& has, const std::string& backend) {
  const auto plan = plan_layers(c);
  for (size_t il = 0; il < plan.size(); ++il)
    for (const BlockCall& call : plan[il])
      if (const char* part = missing_block_part(call, has))
        throw Error(backend + ": " + part + " (layer " + std::to_string(il) + " of '" + c.arch_name +
                    "') is not implemented");
}

}  // namespace ms
