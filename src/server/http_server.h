// The HTTP side of `moestream serve`: OpenAI's routes over a Scheduler.
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
// Hostile clients (issues #28, #44): connections are held by one event loop
// (server/http_front.h) that frames requests with every size bounded
// (server/http_parser.h: headers, chunked bodies, no compressed bodies) and
// answers GET routes itself, so /health and /metrics answer under any
// connection load; generation requests go to at most max_requests worker
// threads (503 at once past that). Bodies are parsed in time linear in their
// size with nesting, element and key counts bounded (server/json_limits.h).
// A wrong method on a known route is a 405 with an Allow header; with
// cors_origins, browsers' preflight (OPTIONS) is answered and responses carry
// Access-Control-Allow-Origin. With access_log, one line per request goes to stderr.
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
  size_t max_connections = 1024;   // connections open at once (--max-connections); more: 503
  size_t max_requests = 128;       // generation requests answered at once (--max-requests); more: 503
  size_t max_buffered = 256u << 20;  // request bytes held while they arrive, all connections (at least 4 bodies)
  int request_timeout_s = 10;       // a request's headers and body must arrive within this (--read-timeout)
  std::vector<std::string> cors_origins;  // --cors-origin: allowed origins ("*": any); empty: no CORS
  bool access_log = true;           // one line per request on stderr
  JsonLimits json_limits;           // request bodies' nesting depth and element count
};

// The largest --max-connections (each is a descriptor and its buffers) and
// --max-requests (each a thread while it runs).
constexpr size_t kMaxConnectionsLimit = 65536;
constexpr size_t kMaxRequestsLimit = 4096;

class HttpServer {
 public:
  HttpServer(Scheduler& sched, const Tokenizer& tok, const ChatRenderer& chat, Metrics& metrics, HttpOptions opt);
  ~HttpServer();
  // Binds host:port (port 0: a free port); returns the port. Throws ms::Error
  // when the address cannot be bound (in use: no SO_REUSEPORT, so a second
  // server on the same port is an error, never a silent split of the traffic).
  int bind();
  // Serves until stop(); returns once the responses being written (streams
  // ended by the scheduler's stop) are out.
  void listen();
  // Stops accepting and ends listen(). Thread-safe; may be called before listen().
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms::server
