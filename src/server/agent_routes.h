// The routes coding agents and their SDKs speak besides chat completions,
// served over the same Scheduler (server/answer_reader.h):
//
//   POST   /v1/responses                 OpenAI's Responses API (server/responses_api.h)
//   GET    /v1/responses/{id}            a stored response
//   DELETE /v1/responses/{id}            forgets it
//   POST   /v1/messages                  Anthropic's Messages API (server/messages_api.h)
//   POST   /v1/messages/count_tokens     {"input_tokens": N}
//
// With an API key, "Authorization: Bearer KEY" and "x-api-key: KEY" (what
// Anthropic's clients send) are both accepted. The anthropic-version and
// anthropic-beta headers are accepted and not needed. Errors are OpenAI's
// shape on /v1/responses, Anthropic's on /v1/messages.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/answer_reader.h"
#include "server/json_limits.h"
#include "server/responses_api.h"

namespace ms::server::http {
class Router;
}

namespace ms::server {

// The methods a route of this file takes, or nullptr when the path is none of them.
const char* agent_allowed_methods(const std::string& path);
// The /metrics label of such a path (bounded: ids are not labels), or nullptr.
const char* agent_endpoint_label(const std::string& path);

class AgentApi {
 public:
  struct Context {
    ChatServing serving;
    std::string api_key;     // empty: no authentication
    std::string model_name;  // what responses name when the request names none
    JsonLimits json_limits;
    ResponseStoreLimits store_limits;
    // Called on the connection's thread when an answer ends (the access log's counts).
    std::function<void(int prompt_tokens, int completion_tokens)> on_tokens;
  };
  explicit AgentApi(Context ctx);
  ~AgentApi();
  void add_routes(http::Router& svr);
  const ResponseStore& store() const { return store_; }

 private:
  struct Handlers;
  Context ctx_;
  ResponseStore store_;
  std::string id_prefix_;
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace ms::server
