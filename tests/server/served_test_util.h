// A Scheduler served over HTTP on a free local port for the length of a test:
// the renderer, metrics and server around it, listening on a thread until
// the object goes out of scope.
#pragma once
#include <httplib.h>

#include <string>
#include <thread>
#include <vector>

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

// The first choice of each chunk of a streamed (server-sent events) answer,
// in order, up to "[DONE]"; chunks without choices are skipped.
inline std::vector<nlohmann::json> streamed_choices(const std::string& body) {
  std::vector<nlohmann::json> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    const nlohmann::json chunk = nlohmann::json::parse(data);
    if (!chunk["choices"].empty()) out.push_back(chunk["choices"][0]);
  }
  return out;
}

}  // namespace ms::server::test
