// Routes: a method and a path to a handler. A pattern ending in "(.+)" matches
// any path that begins with what comes before it and has something after
// (req.matches[1]); others match exactly. GET routes answer HEAD too. POST
// routes run on a worker thread (they may wait for generation); GET and DELETE
// routes run on the connection loop and must answer without waiting
// (server/http_front.h).
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_message.h"

namespace ms::server::http {

class Router {
 public:
  using Handler = std::function<void(const Request&, Response&)>;

  void Get(std::string pattern, Handler h) { add("GET", std::move(pattern), std::move(h), false); }
  void Post(std::string pattern, Handler h) { add("POST", std::move(pattern), std::move(h), true); }
  void Delete(std::string pattern, Handler h) { add("DELETE", std::move(pattern), std::move(h), false); }

  struct Route {
    std::string method, pattern;
    bool prefix;  // pattern was "PREFIX(.+)"
    bool worker;
    Handler handler;
  };

  // The route for (method, path), filling req.matches; nullptr when none.
  const Route* find(Request& req) const {
    const std::string& m = req.method == "HEAD" ? std::string("GET") : req.method;
    for (const Route& r : routes_) {
      if (r.method != m || !matches(r, req.path)) continue;
      req.matches = {req.path};
      if (r.prefix) req.matches.push_back(req.path.substr(r.pattern.size()));
      return &r;
    }
    return nullptr;
  }
  // Whether a request to (method, path) runs on a worker.
  bool needs_worker(const std::string& method, const std::string& path) const {
    for (const Route& r : routes_)
      if (r.method == method && matches(r, path)) return r.worker;
    return false;
  }

 private:
  static bool matches(const Route& r, const std::string& path) {
    if (!r.prefix) return path == r.pattern;
    return path.size() > r.pattern.size() && path.compare(0, r.pattern.size(), r.pattern) == 0;
  }
  void add(std::string method, std::string pattern, Handler h, bool worker) {
    constexpr std::string_view any = "(.+)";
    const bool prefix = pattern.size() >= any.size() && pattern.compare(pattern.size() - any.size(), any.size(), any) == 0;
    if (prefix) pattern.resize(pattern.size() - any.size());
    routes_.push_back(Route{std::move(method), std::move(pattern), prefix, worker, std::move(h)});
  }
  std::vector<Route> routes_;
};

}  // namespace ms::server::http
