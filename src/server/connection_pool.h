// The threads that serve HTTP connections, and the limits that keep slow or
// numerous clients from starving the server (issue #28).
//
// cpp-httplib hands every accepted connection to a TaskQueue; this one
//  - serves up to max_connections at once, one thread each (threads are
//    started as connections need them, so an idle server holds few);
//  - past that, hands connections to a few "overflow" threads that answer
//    only /health and /metrics (anything else: 503), with a short deadline,
//    so a probe gets its answer even while every connection is taken;
//  - past the overflow queue, or when no thread can be started, answers 503
//    at once from the accepting thread, without reading the request;
//  - gives every request a deadline to arrive whole (headers and body): a
//    client that trickles bytes is cut off when it passes, instead of holding
//    a thread for read-timeout seconds per byte (httplib's timeouts are per
//    read). While a handler runs (generation, a stream) there is no deadline;
//    writes have httplib's write timeout.
//
// httplib gives the task no socket, so the pool finds the one just accepted
// itself (the connected socket on our port it has not seen: fstat's inode
// tells sockets apart) and keeps a dup() of it: shutting that down ends a
// blocked read, and a dup can never name a socket reused by a later accept.
//
// Handlers talk to their connection through the static calls below; they act
// on the calling thread's connection (each connection lives on one thread).
#pragma once
#ifndef MOESTREAM_NO_HTTPLIB
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace ms::server {

struct ConnectionLimits {
  size_t max_connections = 128;  // served at once (--max-connections)
  size_t overflow_threads = 2;   // answer /health and /metrics past the cap
  size_t overflow_queue = 16;    // connections waiting for them; beyond: 503 at once
  std::chrono::milliseconds request_timeout{10000};  // a request's headers+body must arrive within this
  std::chrono::milliseconds overflow_timeout{2000};  // the same, past the cap
};

class ConnectionPool : public httplib::TaskQueue {
 public:
  // `port`: the server's port (the pool recognises its connections by it).
  // Starts the overflow threads and the deadline watchdog; throws ms::Error
  // when they cannot be started.
  ConnectionPool(ConnectionLimits lim, int port);
  ~ConnectionPool() override;

  void enqueue(std::function<void()> fn) override;
  // Ends every connection's reads (a shutdown), then joins every thread.
  void shutdown() override;

  // httplib listens with a backlog of 5 (a compile-time constant of the
  // library): a burst of connections overflows it and the kernel drops SYNs,
  // which clients retry only after a second. Finds the listening socket on
  // `port` and listens again with `backlog` (Linux updates it in place).
  // Returns whether it found the socket.
  static bool widen_backlog(int port, int backlog);

  size_t open_connections() const { return open_; }
  size_t refused_connections() const { return refused_; }

  // ---- from handlers, about the calling thread's connection (no-ops elsewhere)
  // This connection came past max_connections: serve only cheap routes.
  static bool over_capacity();
  // The request is read: no read deadline while the response is made.
  static void request_read();
  // A response went out: the next request on this connection must arrive
  // within the request timeout; with close(), the connection ends instead.
  static void response_sent();
  // End the connection after the current response (its body may be unread).
  static void close_after_response();
  // Whether the client has closed its end (an orderly close or a reset),
  // without waiting: lets a non-streaming request notice it is unwanted.
  static bool client_gone();

  struct Conn;

 private:
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<Conn> conn;
  };
  std::shared_ptr<Conn> adopt_new_socket();
  void refuse(Task& t);
  void run(Task t, bool overflow);
  void main_worker();
  void overflow_worker();
  void watchdog();
  void finish(const std::shared_ptr<Conn>& c);

  const ConnectionLimits lim_;
  const int port_;
  mutable std::mutex m_;
  std::condition_variable cv_main_, cv_overflow_, cv_watch_;
  std::deque<Task> main_q_, overflow_q_;
  std::vector<std::thread> main_threads_, overflow_threads_;
  std::thread watchdog_;
  size_t idle_main_ = 0;
  std::set<unsigned long> known_inodes_;
  std::vector<std::shared_ptr<Conn>> live_;
  bool stopping_ = false;
  bool spawn_failed_reported_ = false;
  std::atomic<size_t> open_{0}, refused_{0};
};

}  // namespace ms::server
#endif
