#include "model/arch.h"

#include "util/error.h"

namespace ms {

const std::vector<ArchInfo>& all_archs() {
  static const std::vector<ArchInfo> table = {
      //  name      rope        qk_norm qkv_bias moe  moe_opt router          renorm linear out_gate shexp
      {"llama", RopeMode::Normal, false, false, false, true, RouterMode::TopKSoftmax, false, false, false, false},
      {"qwen2", RopeMode::Neox, false, true, false, false, RouterMode::SoftmaxTopK, true, false, false, false},
      {"qwen3", RopeMode::Neox, true, false, false, false, RouterMode::SoftmaxTopK, true, false, false, false},
      {"qwen3moe", RopeMode::Neox, true, false, true, false, RouterMode::SoftmaxTopK, true, false, false, false},
      {"qwen35moe", RopeMode::Neox, true, false, true, false, RouterMode::SoftmaxTopK, true, true, true, true},
      // gpt-oss: q/k/v biases, top-k of the (biased) logits then softmax over the k.
      {"gpt-oss", RopeMode::Neox, false, true, true, false, RouterMode::TopKSoftmax, false, false, false, false,
       /*attn_sinks*/ true, /*swa_pattern*/ 2, /*attn_out_bias*/ true, /*router_bias*/ true, /*expert_bias*/ true,
       /*clamped_swiglu*/ true, /*post_attention_norm*/ true},
  };
  return table;
}

std::string supported_arch_names() {
  std::string s;
  for (const ArchInfo& a : all_archs()) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

const ArchInfo& arch_info(const std::string& name) {
  for (const ArchInfo& a : all_archs())
    if (name == a.name) return a;
  if (name == "dflash")  // a drafter, not a model (model/dflash_weights.h)
    throw Error("architecture 'dflash' is a DFlash drafter, not a model to run: use it as --spec dflash -md FILE");
  throw Error("unknown architecture '" + name + "': moestream runs " + supported_arch_names() +
              " (Mixtral is 'llama' with experts)");
}

}  // namespace ms
