// A scripted gpt-oss for the server tests: a backend whose logits make
// greedy sampling follow a script of tokens, and a small vocabulary with the
// harmony markers and gpt-oss's chat template (tests/tokenizer/templates).
#pragma once
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../tokenizer/tiny_vocabs.h"
#include "engine/backend.h"
#include "tokenizer/tokenizer.h"

namespace ms::server::test {

// Logits that make greedy sampling follow `script`, one token per pass
// (the prompt's pass gives the first); past its end it repeats the last.
class ScriptedBackend final : public Backend {
 public:
  ScriptedBackend(std::vector<int32_t> script, int64_t n_vocab) : script_(std::move(script)) {
    cfg_.n_vocab = n_vocab;
  }
  void forward(KvCache&, std::span<const int32_t>, std::vector<float>& logits, bool) override {
    logits.assign(static_cast<size_t>(cfg_.n_vocab), 0.0f);
    logits[static_cast<size_t>(script_[std::min(next_, script_.size() - 1)])] = 10.0f;
    ++next_;
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return KvCache(1, 1, 8, ctx, type); }
  const ModelConfig& config() const override { return cfg_; }
  std::string name() const override { return "scripted"; }
  void set_route_hook(RouteHook, bool = false) override {}

 private:
  std::vector<int32_t> script_;
  size_t next_ = 0;
  ModelConfig cfg_;
};

// A small vocabulary with the harmony markers and gpt-oss's chat template.
inline Tokenizer harmony_tokenizer() {
  Vocab v = ms::test::tiny_bpe({{"a", "n"}, {" ", "w"}},
                           {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
                            "<|call|>", "<|endoftext|>"},
                           "gpt-4o");
  std::ifstream in(std::filesystem::path(MS_SOURCE_DIR) / "tests" / "tokenizer" / "templates" /
                   "openai-gpt-oss-120b.jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  v.chat_template = ss.str();
  return Tokenizer(v);
}

}  // namespace ms::server::test
