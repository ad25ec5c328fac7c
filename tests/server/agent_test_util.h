// For the Responses and Messages API tests over HTTP: a Qwen3 chat template
// over a byte-level vocabulary, a backend that answers by what its prompt
// holds (so a conversation's turns get the answers a real model's would
// have the shape of), and the server on a free port with chosen options.
#pragma once
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "../tokenizer/tiny_vocabs.h"
#include "engine/backend.h"
#include "server/chat.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace ms::server::test {

// Qwen3's template and markers: <tool_call> and <think> are ordinary text
// (user-defined tokens, as in the real GGUFs).
inline Tokenizer qwen3_agent_tokenizer() {
  Vocab v = ms::test::tiny_bpe({}, {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
                                    "<think>", "</think>"});
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == "<tool_call>" || v.tokens[i] == "</tool_call>" || v.tokens[i] == "<think>" ||
        v.tokens[i] == "</think>")
      v.types[i] = TokenType::UserDefined;
  v.eos_id = ms::test::id_of(v, "<|im_end|>");
  std::ifstream in(std::filesystem::path(MS_SOURCE_DIR) / "tests" / "server" / "templates" / "Qwen-Qwen3-0.6B.jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  v.chat_template = ss.str();
  return Tokenizer(v);
}

// The answer to a prompt, by the first marker its new part holds:
//   <tool_response> (a tool's result came back)  -> "It is 21 C and sunny in Paris."
//   <tools> (tools offered)                        -> a get_weather call for Paris
//   STOPTEST  -> "one two STOP three four"         THINKTEST -> reasoning, then "The answer."
//   LONGTEST  -> twenty words                      otherwise -> "Hello!"
// A pass of more than one token starts a new answer (the prompt, or the part
// of it past what the slot's cache held). Remembers every prompt's text.
class AgentScriptedBackend final : public Backend {
 public:
  explicit AgentScriptedBackend(const Tokenizer& tok) : tok_(tok) { cfg_.n_vocab = tok.n_tokens(); }
  void forward(KvCache&, std::span<const int32_t> tokens, std::vector<float>& logits, bool) override {
    if (tokens.size() > 1) {
      const std::string prompt = tok_.decode(std::vector<int32_t>(tokens.begin(), tokens.end()), true);
      std::string answer = "Hello!";
      if (prompt.find("<tool_response>") != std::string::npos) answer = "It is 21 C and sunny in Paris.";
      else if (prompt.find("<tools>") != std::string::npos)
        answer = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
      else if (prompt.find("STOPTEST") != std::string::npos) answer = "one two STOP three four";
      else if (prompt.find("THINKTEST") != std::string::npos) answer = "<think>\nPondering.\n</think>\n\nThe answer.";
      else if (prompt.find("LONGTEST") != std::string::npos)
        answer = "a b c d e f g h i j k l m n o p q r s t";
      script_ = tok_.encode(answer, false, true);
      script_.push_back(tok_.eos_id());
      next_ = 0;
      std::lock_guard lk(m_);
      prompts_.push_back(prompt);
    }
    logits.assign(static_cast<size_t>(cfg_.n_vocab), 0.0f);
    logits[static_cast<size_t>(script_[std::min(next_, script_.size() - 1)])] = 10.0f;
    ++next_;
  }
  KvCache make_cache(int64_t ctx, KvType type = KvType::F16) const override { return KvCache(1, 1, 8, ctx, type); }
  const ModelConfig& config() const override { return cfg_; }
  std::string name() const override { return "agent-scripted"; }
  void set_route_hook(RouteHook, bool = false) override {}
  std::vector<std::string> prompts() {
    std::lock_guard lk(m_);
    return prompts_;
  }

 private:
  const Tokenizer& tok_;
  ModelConfig cfg_;
  std::vector<int32_t> script_;
  size_t next_ = 0;
  std::mutex m_;
  std::vector<std::string> prompts_;
};

// A server with `opt` (port 0, no access log) over `sched`.
class AgentServer {
 public:
  AgentServer(Scheduler& sched, const Tokenizer& tok, HttpOptions opt = {})
      : chat_(tok), server_(sched, tok, chat_, metrics_, with_defaults(std::move(opt))), port_(server_.bind()),
        serving_([this] { server_.listen(); }) {}
  ~AgentServer() {
    server_.stop();
    serving_.join();
  }
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;
  int port() const { return port_; }
  const Metrics& metrics() const { return metrics_; }

  httplib::Result post(const std::string& path, const nlohmann::json& body, const httplib::Headers& headers = {}) const {
    return client().Post(path, headers, body.dump(), "application/json");
  }
  httplib::Result get(const std::string& path) const { return client().Get(path); }
  httplib::Result del(const std::string& path) const { return client().Delete(path); }

 private:
  httplib::Client client() const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(30, 0);
    return cli;
  }
  static HttpOptions with_defaults(HttpOptions o) {
    o.port = 0;
    o.access_log = false;
    return o;
  }
  ChatRenderer chat_;
  Metrics metrics_;
  HttpServer server_;
  int port_;
  std::thread serving_;
};

// A server-sent event stream as (event name, data) pairs; data that is not
// JSON is kept as a string. Comments (": waiting") are skipped.
inline std::vector<std::pair<std::string, nlohmann::json>> sse_events(const std::string& body) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    if (end == std::string::npos) end = body.size();
    const std::string block = body.substr(at, end - at);
    at = end + 2;
    std::string name, data;
    std::istringstream lines(block);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("event: ", 0) == 0) name = line.substr(7);
      else if (line.rfind("data: ", 0) == 0) data += line.substr(6);
    }
    if (data.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(data);
    } catch (const std::exception&) {
      j = data;
    }
    out.emplace_back(name, j);
  }
  return out;
}

}  // namespace ms::server::test
