// The HTTP side of `moestream serve` (cpp-httplib): OpenAI's routes over a
// Scheduler.
//
//   POST /v1/chat/completions, POST /v1/completions   (stream: SSE "data:" chunks, then [DONE])
//   GET  /v1/models, GET /health, GET /metrics         (Prometheus text)
//
// Errors are OpenAI's JSON shape ({"error": {message, type, param, code}})
// with the matching status. With an API key every route but /health needs
// "Authorization: Bearer KEY" (401 otherwise). A streaming client that goes
// away is noticed at the next write; its job is cancelled and its slot freed.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

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
  int threads = 0;              // HTTP worker threads (0: enough for --parallel and a queue)
};

class HttpServer {
 public:
  HttpServer(Scheduler& sched, const Tokenizer& tok, const ChatRenderer& chat, Metrics& metrics, HttpOptions opt);
  ~HttpServer();
  // Binds host:port (port 0: a free port); returns the port. Throws ms::Error
  // when the address cannot be bound.
  int bind();
  // Serves until stop(); returns then.
  void listen();
  // Stops accepting and ends listen(). Thread-safe; may be called before listen().
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms::server
