// The official agent SDKs against the server: the `openai` npm client's
// Responses API (tools/agent_clients_test/responses_test.mjs) and the
// `@anthropic-ai/sdk` client's Messages API (messages_test.mjs), each with
// whole and streamed answers, a tool call and its result sent back. The
// model is scripted by its prompt (agent_test_util.h); the server wants an
// API key, which the OpenAI client sends as a Bearer token and Anthropic's
// as x-api-key. Skips unless node and the packages are there:
// tools/agent_clients_test/run.sh (CTest agent_clients, label slow)
// installs them into the build directory first.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "agent_test_util.h"

namespace ms::server {
namespace {

namespace fs = std::filesystem;

// Runs `script` with the server's base URL; "" when it cannot start.
void run_client(const std::string& script, const fs::path& modules, const std::string& url_suffix,
                const std::string& needed_package) {
  if (!fs::exists(modules / "node_modules" / needed_package / "package.json"))
    GTEST_SKIP() << "the " << needed_package << " npm package is not installed: tools/agent_clients_test/run.sh installs it";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node not found";

  const Tokenizer tok = test::qwen3_agent_tokenizer();
  test::AgentScriptedBackend be(tok);
  Scheduler::Options so;
  so.ctx = 8192;
  so.prefill_chunk = 8192;  // one pass per prompt: the backend reads it whole
  Scheduler sched(be, tok, so);
  HttpOptions ho;
  ho.api_key = "agent-test-key";
  const test::AgentServer served(sched, tok, ho);

  const std::string cmd = "node " + (fs::path(MS_SOURCE_DIR) / "tools" / "agent_clients_test" / script).string() +
                          " http://127.0.0.1:" + std::to_string(served.port()) + url_suffix + " " + modules.string() +
                          " agent-test-key 2>&1";
  std::string out;
  int status = -1;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    status = pclose(p);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << out;
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("all ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

TEST(AgentClients, OpenAiResponses) {
  run_client("responses_test.mjs", fs::path(MS_BINARY_DIR) / "openai_client", "/v1", "openai");
}

TEST(AgentClients, AnthropicMessages) {
  run_client("messages_test.mjs", fs::path(MS_BINARY_DIR) / "anthropic_client", "", "@anthropic-ai/sdk");
}

}  // namespace
}  // namespace ms::server
