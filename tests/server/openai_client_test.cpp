// The `openai` npm client (tools/openai_client_test/client_test.mjs) against
// the server: plain chat, tool calls whole and streamed, and a tool result
// sent back. The model is scripted by its prompt (Qwen3's template): a
// prompt offering tools gets a <tool_call>, one with a tool response or
// none gets text. Skips unless node and the package are there:
// tools/openai_client_test/run.sh (CTest openai_client, label slow)
// installs the package into the build directory first.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "../tokenizer/tiny_vocabs.h"
#include "engine/backend.h"
#include "server/chat.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "served_test_util.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {
namespace {

namespace fs = std::filesystem;

Tokenizer qwen3_tokenizer() {
  Vocab v = ms::test::tiny_bpe({}, {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"});
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == "<tool_call>" || v.tokens[i] == "</tool_call>") v.types[i] = TokenType::UserDefined;
  v.eos_id = ms::test::id_of(v, "<|im_end|>");
  std::ifstream in(fs::path(MS_SOURCE_DIR) / "tests" / "server" / "templates" / "Qwen-Qwen3-0.6B.jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  v.chat_template = ss.str();
  return Tokenizer(v);
}

// Answers by what the prompt holds; each prompt (a pass of more than one
// token) starts its answer over.
class PromptScriptedBackend final : public Backend {
 public:
  explicit PromptScriptedBackend(const Tokenizer& tok) : tok_(tok) { cfg_.n_vocab = tok.n_tokens(); }
  void forward(KvCache&, std::span<const int32_t> tokens, std::vector<float>& logits, bool) override {
    if (tokens.size() > 1) {
      const std::string prompt = tok_.decode(std::vector<int32_t>(tokens.begin(), tokens.end()), true);
      std::string answer = "Hello!";
      if (prompt.find("<tool_response>") != std::string::npos) answer = "It is 21 C and sunny in Paris.";
      else if (prompt.find("<tools>") != std::string::npos)
        answer = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
      script_ = tok_.encode(answer, false, true);
      script_.push_back(tok_.eos_id());
      next_ = 0;
    }
    logits.assign(static_cast<size_t>(cfg_.n_vocab), 0.0f);
    logits[static_cast<size_t>(script_[std::min(next_, script_.size() - 1)])] = 10.0f;
    ++next_;
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return KvCache(1, 1, 8, ctx, type); }
  const ModelConfig& config() const override { return cfg_; }
  std::string name() const override { return "prompt-scripted"; }
  void set_route_hook(RouteHook, bool = false) override {}

 private:
  const Tokenizer& tok_;
  ModelConfig cfg_;
  std::vector<int32_t> script_;
  size_t next_ = 0;
};

TEST(OpenAiClient, ChatStreamAndTools) {
  const fs::path modules = fs::path(MS_BINARY_DIR) / "openai_client";
  if (!fs::exists(modules / "node_modules" / "openai" / "package.json"))
    GTEST_SKIP() << "the openai npm package is not installed: tools/openai_client_test/run.sh installs it";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node not found";

  const Tokenizer tok = qwen3_tokenizer();
  PromptScriptedBackend be(tok);
  Scheduler::Options so;
  so.ctx = 8192;
  so.prefill_chunk = 8192;  // one pass per prompt: the backend sees it whole
  Scheduler sched(be, tok, so);
  const test::ServedScheduler served(sched, tok);
  const int port = served.port();

  const std::string cmd = "node " + (fs::path(MS_SOURCE_DIR) / "tools" / "openai_client_test" / "client_test.mjs").string() +
                          " http://127.0.0.1:" + std::to_string(port) + "/v1 " + modules.string() + " 2>&1";
  std::string out;
  int status = -1;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    status = pclose(p);
  }
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("all ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

}  // namespace
}  // namespace ms::server
