// A Scheduler served over HTTP on a free local port for the length of a test:
// the renderer, metrics and server around it, listening on a thread until
// the object goes out of scope.
#pragma once
#include <httplib.h>

#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/chat.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace ms::server::test {

class ServedScheduler {
 public:
  ServedScheduler(Scheduler& sched, const Tokenizer& tok)
      : chat_(tok), server_(sched, tok, chat_, metrics_, options()), port_(server_.bind()),
        serving_([this] { server_.listen(); }) {}
  ~ServedScheduler() {
    server_.stop();
    serving_.join();
  }
  ServedScheduler(const ServedScheduler&) = delete;
  ServedScheduler& operator=(const ServedScheduler&) = delete;

  int port() const { return port_; }
  // POST path with a JSON body (30 s read timeout); a null result when the
  // server did not answer.
  httplib::Result post(const std::string& path, const nlohmann::json& body) const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(30, 0);
    return cli.Post(path, body.dump(), "application/json");
  }

 private:
  static HttpOptions options() {
    HttpOptions ho;
    ho.port = 0;
    ho.access_log = false;
    return ho;
  }
  ChatRenderer chat_;
  Metrics metrics_;
  HttpServer server_;
  int port_;
  std::thread serving_;
};

}  // namespace ms::server::test
