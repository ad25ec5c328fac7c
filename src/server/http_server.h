// The HTTP side of `moestream serve` (cpp-httplib): OpenAI's routes over a
// Scheduler.
//
//   POST /v1/chat/completions, POST /v1/completions   (stream: SSE "data:" chunks, then [DONE])
//   GET  /v1/models, GET /health, GET /metrics         (Prometheus text)
//   POST /v1/responses, POST /v1/messages[/count_tokens] (agents' APIs: server/agent_routes.h)
//
// Errors are OpenAI's JSON shape ({"error": {message, type, param, code}})
// with the matching status. With an API key every route but /health needs
// "Authorization: Bearer KEY" (401 otherwise). A streaming client that goes
// away is noticed at the next write; its job is cancelled and its slot freed.
//
// Hostile clients (issue #28): bodies are checked against JsonLimits before
// parsing; connections are capped (ConnectionPool: excess gets a 503 at once,
// /health and /metrics are still answered past the cap), and a request must
// arrive whole within request_timeout_s. A wrong method on a known route is a
// 405 with an Allow header; with cors_origins, browsers' preflight (OPTIONS)
// is answered and responses carry Access-Control-Allow-Origin. With
// access_log, one line per request goes to stderr.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "server/json_limits.h"

namespace ms {
class Tokenizer;
}

namespace ms::server {

class Scheduler;
class Metrics;
class ChatRenderer;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;              // 0: any free port (see HttpServer::bind)
  std::string api_key;          // empty: no authentication
  size_t max_body = 8u << 20;   // request body limit in bytes (413 beyond)
  std::string model_name = "moestream";  // what /v1/models lists and responses name
  size_t max_connections = 128;    // connections served at once (--max-connections); more: 503
  int request_timeout_s = 10;       // a request's headers and body must arrive within this (--read-timeout)
  std::vector<std::string> cors_origins;  // --cors-origin: allowed origins ("*": any); empty: no CORS
  bool access_log = true;           // one line per request on stderr
  JsonLimits json_limits;           // request bodies' nesting depth and element count
};

// The largest --max-connections: each connection may hold a thread and two
// descriptors, and httplib's select() cannot watch descriptors past 1023.
constexpr size_t kMaxConnectionsLimit = 256;

class HttpServer {
 public:
  HttpServer(Scheduler& sched, const Tokenizer& tok, const ChatRenderer& chat, Metrics& metrics, HttpOptions opt);
  ~HttpServer();
  // Binds host:port (port 0: a free port); returns the port. Throws ms::Error
  // when the address cannot be bound (in use: no SO_REUSEPORT, so a second
  // server on the same port is an error, never a silent split of the traffic).
  int bind();
  // Serves until stop(); returns then. Throws ms::Error when its threads
  // cannot be started.
  void listen();
  // Stops accepting and ends listen(). Thread-safe; may be called before listen().
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms::server
