// The server's connection handling: one event-loop thread (epoll) holds every
// connection and frames its requests (server/http_parser.h); a bounded pool of
// worker threads answers the requests that may block (generation).
//
// Why: a thread per connection let slow or idle clients use up the threads,
// and with them the server. Here a connection costs its buffers only:
//  - requests whose answer is quick (/health, /metrics, /v1/models, errors) are
//    answered on the loop itself, however many connections are open or busy;
//  - the others go to a worker; with every worker busy they get a 503 at once;
//  - a request must arrive whole within request_timeout of its connection
//    opening or of the previous response (else 408 and the connection closes),
//    so trickling bytes buys nothing;
//  - past max_connections, overflow_connections more are accepted with a short
//    deadline and one request each (the handler serves only cheap routes there:
//    Request::over_capacity); past those, a 503 at once without reading;
//  - request bytes held across all connections are capped (max_buffered).
// Requests on one connection are answered in order (pipelining). A worker owns
// its connection's socket while it answers; the loop takes it back after.
// HTTP/1.0 streams are close-delimited (no chunked encoding there).
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "server/http_message.h"
#include "server/http_parser.h"

namespace ms::server::http {

struct FrontOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port
  size_t max_connections = 1024;      // open at once
  size_t overflow_connections = 64;   // past max_connections: cheap routes only, one request each
  size_t workers = 128;               // requests answered on worker threads at once
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds overflow_timeout{2000};
  std::chrono::milliseconds write_timeout{30000};  // a worker's write (an answer, a stream's chunk) must complete within this
  size_t max_buffered = 256u << 20;   // request bytes held across all connections
  ParserLimits parser;
};

struct FrontHandlers {
  // Answers a request: on the loop (must not block) when needs_worker says no.
  std::function<void(Request&, Response&)> handle;
  std::function<bool(const Request&)> needs_worker;
  // The response to a request refused before a handler ran: a framing error,
  // a timeout, no worker free, shutting down (status and what was wrong).
  std::function<void(const Request&, int status, const std::string& message, Response&)> refuse;
  // After a response went out (or failed), on the thread that answered it.
  std::function<void(const Request&, const Response&)> log;
};

class HttpFront {
 public:
  HttpFront(FrontOptions opt, FrontHandlers h);
  ~HttpFront();
  // Binds and listens; returns the port. Throws ms::Error.
  int bind();
  // Serves until stop(): then closes idle connections, lets the workers finish
  // their responses, joins them and returns.
  void run();
  // Thread-safe; may be called before run().
  void stop();

  size_t open_connections() const { return open_; }
  size_t refused_connections() const { return refused_; }

  struct Conn;
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<size_t> open_{0}, refused_{0};
};

}  // namespace ms::server::http
