#include "server/http_server.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include <nlohmann/json.hpp>

#include "server/agent_routes.h"
#include "server/api.h"
#include "server/chat.h"
#include "server/messages_api.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/text_stream.h"
#include "server/tool_calls.h"
#include "tokenizer/harmony.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include "server/http_front.h"
#include "server/http_router.h"

namespace ms::server {

using nlohmann::json;
// The handlers were written against cpp-httplib; server/http_message.h keeps
// the names of its Request, Response and DataSink that they use.
namespace httplib = http;

namespace {

// JSON text that never throws: a string that is not UTF-8 (a %ff in a path
// echoed by an error message, a template's output) gets U+FFFD instead of
// nlohmann's exception.
std::string text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(text(e.body()), "application/json");
}

// An error made before a route's handler ran (framing, capacity, method):
// in the shape the route's clients read (Anthropic's under /v1/messages).
void send_error_for(const std::string& path, httplib::Response& res, const ApiError& e) {
  if (path.rfind("/v1/messages", 0) != 0) return send_error(res, e);
  res.status = e.status;
  res.set_content(text(anthropic_error_body(e)), "application/json");
}

std::string sse(const json& j) { return "data: " + text(j) + "\n\n"; }

// What the access log says of the request this thread is answering (a
// connection's requests all run on one thread, one at a time).
struct AccessInfo {
  std::chrono::steady_clock::time_point start{};
  bool started = false;
  int prompt_tokens = -1, completion_tokens = -1;
};
thread_local AccessInfo t_access;

// The methods a known route takes ("" for an unknown route).
const char* allowed_methods(const std::string& path) {
  if (path == "/v1/chat/completions" || path == "/v1/completions") return "POST";
  if (path == "/v1/models" || path == "/health" || path == "/metrics") return "GET, HEAD";
  if (path.rfind("/v1/models/", 0) == 0 && path.size() > 11) return "GET, HEAD";
  if (const char* agent = agent_allowed_methods(path)) return agent;
  return "";
}

json usage_json(const Update& u) {
  return {{"prompt_tokens", u.n_prompt},
          {"completion_tokens", u.n_completion},
          {"total_tokens", u.n_prompt + u.n_completion},
          {"prompt_tokens_details", {{"cached_tokens", u.n_cached}}}};
}

}  // namespace

struct HttpServer::Impl {
  Scheduler& sched;
  const Tokenizer& tok;
  const ChatRenderer& chat;
  Metrics& metrics;
  HttpOptions opt;
  http::Router svr;  // the routes (named as the httplib server they replaced was)
  http::HttpFront front;
  std::atomic<uint64_t> next_id{0};
  std::string id_prefix;
  std::atomic<bool> stopped{false};
  const bool harmony;  // gpt-oss: chat answers are parsed by channel (tokenizer/harmony.h)
  const ModelToolCalls tool_model;  // how the model writes tool calls (server/tool_calls.h)
  std::unique_ptr<AgentApi> agent;  // /v1/responses, /v1/messages (server/agent_routes.h)

  Impl(Scheduler& s, const Tokenizer& t, const ChatRenderer& c, Metrics& m, HttpOptions o)
      : sched(s), tok(t), chat(c), metrics(m), opt(std::move(o)), front(front_options(opt), front_handlers()),
        harmony(harmony_markers(t).has_value()), tool_model(tool_calls_of(t)) {
    std::random_device rd;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
    id_prefix = buf;
    routes();
  }

  static http::FrontOptions front_options(const HttpOptions& o) {
    http::FrontOptions f;
    f.host = o.host;
    f.port = o.port;
    f.max_connections = std::max<size_t>(1, o.max_connections);
    f.workers = std::max<size_t>(1, o.max_requests);
    f.request_timeout = std::chrono::seconds(std::max(1, o.request_timeout_s));
    f.overflow_timeout = std::min(f.overflow_timeout, f.request_timeout);
    f.parser.max_body = o.max_body;
    // Room for a few whole bodies at once, whatever --max-body is.
    f.max_buffered = std::max(o.max_buffered, 4 * o.max_body);
    return f;
  }

  http::FrontHandlers front_handlers() {
    http::FrontHandlers h;
    h.handle = [this](httplib::Request& req, httplib::Response& res) { handle(req, res); };
    h.needs_worker = [this](const httplib::Request& req) { return svr.needs_worker(req.method, req.path); };
    h.refuse = [this](const httplib::Request& req, int status, const std::string& message, httplib::Response& res) {
      send_error_for(req.path, res, ApiError(status, message, status >= 500 ? "server_error" : "invalid_request_error"));
      if (status == 503) res.set_header("Retry-After", "1");
      const std::string origin = cors_origin(req);
      if (!origin.empty()) res.set_header("Access-Control-Allow-Origin", origin);
    };
    h.log = [this](const httplib::Request& req, const httplib::Response& res) { logged(req, res); };
    return h;
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (opt.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    const std::string want = "Bearer " + opt.api_key;
    // Compared in time independent of where they differ.
    unsigned diff = h.size() != want.size();
    for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(i < h.size() ? h[i] : 0) ^
                                                      static_cast<unsigned char>(want[i]);
    if (diff == 0) return true;
    send_error(res, ApiError(401,
                             h.empty() ? "no API key given: send the header 'Authorization: Bearer KEY'"
                                       : "incorrect API key",
                             "authentication_error", "", "invalid_api_key"));
    return false;
  }

  // Runs before routing on the thread that answers (the connection loop, or a
  // worker for generation routes).
  void handle(httplib::Request& req, httplib::Response& res) {
    t_access = AccessInfo{std::chrono::steady_clock::now(), true};
    dispatch(req, res);
    const std::string origin = cors_origin(req);
    if (!origin.empty()) {
      res.set_header("Access-Control-Allow-Origin", origin);
      if (origin != "*") res.set_header("Vary", "Origin");
    }
  }

  void dispatch(httplib::Request& req, httplib::Response& res) {
    if (req.over_capacity && req.path != "/health" && req.path != "/metrics") {
      res.close = true;
      res.set_header("Retry-After", "1");
      send_error_for(req.path, res,
                     ApiError(503,
                              "the server has " + std::to_string(opt.max_connections) +
                                  " connections open (--max-connections); retry later",
                              "server_error"));
      return;
    }
    const std::string allow = allowed_methods(req.path);
    if (req.method == "OPTIONS" && !opt.cors_origins.empty()) {
      preflight(req, res, allow);
      return;
    }
    const bool is_get = req.method == "GET" || req.method == "HEAD";
    if (!allow.empty() && (allow == "POST" ? req.method != "POST" : !is_get)) {
      res.set_header("Allow", allow);
      send_error_for(req.path, res,
                     ApiError(405, "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow +
                                       ")"));
      return;
    }
    const http::Router::Route* route = svr.find(req);
    if (!route) {
      send_error(res, ApiError(404, "no route " + req.method + " " + req.path));
      return;
    }
    try {
      route->handler(req, res);
    } catch (const ApiError& e) {
      res = httplib::Response{};
      send_error(res, e);
    } catch (const std::exception& e) {
      res = httplib::Response{};
      send_error(res, ApiError(500, e.what(), "server_error"));
    }
  }

  // After the response went out (on the thread that answered it).
  void logged(const httplib::Request& req, const httplib::Response& res) {
    // Known routes by name; anything else under one label (no unbounded label set).
    static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"};
    const char* endpoint = "other";
    for (const char* k : known)
      if (req.path == k) endpoint = k;
    if (req.path.rfind("/v1/models/", 0) == 0) endpoint = "/v1/models/{id}";
    if (const char* agent_endpoint = agent_endpoint_label(req.path)) endpoint = agent_endpoint;
    metrics.request(endpoint, res.status);
    if (opt.access_log) log_access(req, res);
    t_access = AccessInfo{};
  }

  void routes() {
    // GET routes answer on the connection loop: nothing here may wait.
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      metrics.set_queue(sched.queue_depth(), sched.active_slots());
      metrics.set_connections(front.open_connections(), front.refused_connections());
      res.set_content(metrics.render(), "text/plain; version=0.0.4");
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(text(json{{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
    });
    // One model by id (OpenAI's retrieve): the served model, or 404.
    svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      const std::string want = req.matches[1];
      if (want != opt.model_name) {
        send_error(res, ApiError(404, "the model '" + want + "' does not exist (this server serves '" + opt.model_name + "')",
                                 "invalid_request_error", "model", "model_not_found"));
        return;
      }
      res.set_content(text(model_json()), "application/json");
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      completion(req, res, true);
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      completion(req, res, false);
    });
    agent = std::make_unique<AgentApi>(AgentApi::Context{
        ChatServing{sched, tok, chat, tool_model, harmony, &stopped}, opt.api_key, opt.model_name, opt.json_limits, {},
        [](int prompt, int completion) {
          t_access.prompt_tokens = prompt;
          t_access.completion_tokens = completion;
        }});
    agent->add_routes(svr);
  }

  json model_json() const {
    return {{"id", opt.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "moestream"},
            {"meta", {{"n_ctx", sched.ctx()}, {"n_vocab", tok.n_tokens()}}}};
  }

  // CORS: the Access-Control-Allow-Origin a response to `req` carries ("":
  // none): "*" when any origin is allowed, else the request's Origin when it
  // is one of --cors-origin.
  std::string cors_origin(const httplib::Request& req) const {
    if (opt.cors_origins.empty()) return "";
    const std::string origin = req.get_header_value("Origin");
    for (const std::string& o : opt.cors_origins) {
      if (o == "*") return "*";
      if (!origin.empty() && o == origin) return origin;
    }
    return "";
  }

  // A browser's preflight: which methods and headers the real request may
  // use. No authentication (browsers send none with it); an origin that is
  // not allowed gets no Access-Control-Allow-Origin (post-routing), which the
  // browser takes as a refusal.
  void preflight(const httplib::Request& req, httplib::Response& res, const std::string& allow) {
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", allow.empty() ? "GET, POST, OPTIONS" : allow + ", OPTIONS");
    const std::string want = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers", want.empty() ? "Authorization, Content-Type" : want);
    res.set_header("Access-Control-Max-Age", "86400");
  }

  // One line per request: client, method, route, status, tokens, duration.
  void log_access(const httplib::Request& req, const httplib::Response& res) const {
    char took[32] = "-";
    if (t_access.started)
      std::snprintf(took, sizeof took, "%.3fs",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t_access.start).count());
    char tokens[48] = "-";
    if (t_access.prompt_tokens >= 0)
      std::snprintf(tokens, sizeof tokens, "%d+%d", t_access.prompt_tokens, std::max(0, t_access.completion_tokens));
    // The path as sent may hold anything: printable ASCII only, bounded.
    std::string path;
    for (char ch : req.path.substr(0, 200)) path += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
    std::string method;
    for (char ch : req.method.substr(0, 16)) method += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
    std::fprintf(stderr, "moestream: access %s %s %s %d tokens %s %s\n", req.remote_addr.c_str(), method.c_str(),
                 path.c_str(), res.status, tokens, took);
  }

  void completion(const httplib::Request& hreq, httplib::Response& res, bool is_chat) {
    if (!authorized(hreq, res)) return;
    try {
      CompletionRequest r = parse_request(hreq.body, is_chat, opt.json_limits);
      std::string text = is_chat ? chat.render(r.messages, true, r.template_kwargs, &stopped) : r.prompt;
      const ToolCallPlan calls = plan_tool_calls(tool_model, r, text);
      text += calls.prompt_suffix;  // tool_choice required / named: the call is begun for the model
      std::vector<int32_t> ids = tok.encode(text, true, true);
      if (ids.empty()) throw ApiError(400, "the prompt is empty after tokenization");
      if (static_cast<int64_t>(ids.size()) >= sched.ctx())
        throw ApiError(400,
                       "a request may hold " + std::to_string(sched.ctx()) + " tokens (" + sched.ctx_limit_name() +
                           ") and the " + (is_chat ? "messages" : "prompt") + " take " + std::to_string(ids.size()) +
                           " tokens, leaving no room for the answer; shorten them or restart with a larger --ctx",
                       "invalid_request_error", is_chat ? "messages" : "prompt", "context_length_exceeded");
      for (const auto& [id, bias] : r.sampling.logit_bias)
        if (id >= tok.n_tokens())
          throw ApiError(400,
                         "'logit_bias' names token " + std::to_string(id) + ", but this model's vocabulary has " +
                             std::to_string(tok.n_tokens()) + " tokens (ids 0.." + std::to_string(tok.n_tokens() - 1) +
                             ")",
                         "invalid_request_error", "logit_bias");
      Job job;
      job.prompt = std::move(ids);
      job.sampling = r.sampling;
      job.gen = r.gen;
      job.stop = r.stop;
      job.grammar = r.grammar;
      job.top_logprobs = r.top_logprobs;
      if (r.grammar && is_chat && harmony)
        throw ApiError(400,
                       "'response_format' is not supported for this model: its answers come in harmony channels "
                       "(gpt-oss)",
                       "invalid_request_error", "response_format");
      job.separate_reasoning = is_chat && r.separate_reasoning;
      job.starts_in_reasoning = job.separate_reasoning && prompt_opens_think(text);
      job.harmony = is_chat && harmony;
      job.render_special = calls.render_special;
      std::vector<std::shared_ptr<Request>> reqs;
      try {
        reqs = sched.submit_choices(std::move(job), r.n_choices);
      } catch (const Error& e) {
        throw ApiError(400, e.what(), "invalid_request_error", "n");
      }
      const std::string id =
          std::string(is_chat ? "chatcmpl-" : "cmpl-") + id_prefix + std::to_string(next_id.fetch_add(1));
      const int64_t created = static_cast<int64_t>(std::time(nullptr));
      const std::string model = r.model.empty() ? opt.model_name : r.model;
      if (r.stream) stream(res, reqs, r, calls, id, created, model);
      else whole(hreq, res, reqs, r, calls, id, created, model);
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  // The answer of every choice (OpenAI's n), in one response: usage counts
  // the prompt once and the completions of all.
  void whole(const httplib::Request& hreq, httplib::Response& res, const std::vector<std::shared_ptr<Request>>& reqs,
             const CompletionRequest& r, const ToolCallPlan& plan, const std::string& id, int64_t created,
             const std::string& model) {
    json choices = json::array();
    Update total;
    try {
      for (size_t i = 0; i < reqs.size(); ++i) {
        Update u;
        choices.push_back(one_choice(hreq, reqs[i], r, plan, id, static_cast<int>(i), u));
        if (i == 0) total = u;
        else total.n_completion += u.n_completion;
      }
    } catch (...) {
      for (const auto& q : reqs) q->cancel();  // the other choices are not wanted either
      throw;
    }
    t_access.prompt_tokens = total.n_prompt;
    t_access.completion_tokens = total.n_completion;
    json out = {{"id", id},
                {"object", r.chat ? "chat.completion" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", choices},
                {"usage", usage_json(total)}};
    res.set_content(text(out), "application/json");
  }

  // One choice's answer, read whole; `u` gets its last update (counts, finish).
  json one_choice(const httplib::Request& hreq, const std::shared_ptr<Request>& req, const CompletionRequest& r,
                  const ToolCallPlan& plan, const std::string& id, int index, Update& u) {
    std::string content, reasoning;
    json tool_calls = json::array();
    std::vector<LogprobEntry> logprobs;
    // Call ids stay distinct across choices.
    const std::string choice_id = index > 0 ? id + "_" + std::to_string(index) : id;
    const std::string call_prefix = "call_" + choice_id + "_";
    do {
      // A client that hung up no longer wants the answer: free its slot.
      if (hreq.client_gone && hreq.client_gone()) req->cancel();
      u = req->take(std::chrono::milliseconds(250));
      for (LogprobEntry& e : u.logprobs) logprobs.push_back(std::move(e));
      content += u.content;
      reasoning += u.reasoning;
      for (const HarmonyToolCall& c : u.tool_calls)
        if (!plan.first_only || tool_calls.empty())
          tool_calls.push_back(openai_tool_call(c, call_prefix + std::to_string(tool_calls.size())));
    } while (!u.done);
    if (plan.format != ToolCallFormat::None) {
      // The calls in the answer (after the prefilled opening, if any); a
      // malformed one, or a forced call the model did not complete, is text.
      ToolCallText t = parse_tool_calls(plan.format, plan.tools, plan.prefill + content);
      content = std::move(t.content);
      for (const ParsedToolCall& c : t.calls)
        if (!plan.first_only || tool_calls.empty())
          tool_calls.push_back(openai_parsed_tool_call(c, tool_call_id(plan.format, choice_id, tool_calls.size(), c.id)));
    }
    if (u.finish_reason == "error") throw ApiError(500, "generation failed: " + u.error, "server_error");
    if (u.finish_reason == "cancelled") throw ApiError(503, "the server is shutting down", "server_error");
    const bool called = !tool_calls.empty() && u.finish_reason == "stop";
    json choice = {{"index", index}, {"finish_reason", called ? "tool_calls" : u.finish_reason}, {"logprobs", nullptr}};
    if (r.chat) {
      // OpenAI's shape: no text besides the calls is a null content.
      json msg = {{"role", "assistant"}, {"content", content.empty() && !tool_calls.empty() ? json() : json(content)}};
      if (r.separate_reasoning) msg["reasoning_content"] = reasoning;
      if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
      choice["message"] = msg;
    } else {
      choice["text"] = content;
    }
    if (r.top_logprobs >= 0) choice["logprobs"] = logprobs_json(logprobs);
    return choice;
  }

  // One stream for every choice (OpenAI's n): each chunk carries its choice's
  // index; choices interleave as their tokens come, each ends with its own
  // finish chunk, and usage (summed) and [DONE] follow the last.
  void stream(httplib::Response& res, const std::vector<std::shared_ptr<Request>>& reqs, const CompletionRequest& r,
              const ToolCallPlan& plan, const std::string& id, int64_t created, const std::string& model) {
    res.set_header("Cache-Control", "no-cache");
    const bool is_chat = r.chat, include_usage = r.include_usage;
    auto chunk = [=](json choice, int index) {
      choice["index"] = index;
      if (!choice.contains("finish_reason")) choice["finish_reason"] = nullptr;
      return json{{"id", id},
                  {"object", is_chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({choice})}};
    };
    // Per choice: content passes through the parser, which holds back what
    // may begin a call; a call goes out when it is complete (and valid): its
    // id and name in one chunk, its arguments in the next.
    struct Choice {
      std::shared_ptr<Request> req;
      std::shared_ptr<ToolCallParser> parser;
      std::vector<LogprobEntry> logprobs;  // not yet sent: they go with the next chunk
      size_t n_calls = 0;                  // tool calls sent
      std::string call_id;                 // the id calls are numbered under
      bool done = false;
    };
    auto choices = std::make_shared<std::vector<Choice>>();
    for (size_t i = 0; i < reqs.size(); ++i) {
      Choice c;
      c.req = reqs[i];
      c.call_id = i > 0 ? id + "_" + std::to_string(i) : id;
      if (plan.format != ToolCallFormat::None) {
        c.parser = std::make_shared<ToolCallParser>(plan.format, plan.tools);
        c.parser->push(plan.prefill);  // a call's opening: held, nothing comes out
      }
      choices->push_back(std::move(c));
    }
    auto cancel_all = [choices] {
      for (Choice& c : *choices) c.req->cancel();
    };
    res.set_chunked_content_provider(
        "text/event-stream",
        [=](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            cancel_all();  // the client went away: free the slots
            return false;
          };
          const int n = static_cast<int>(choices->size());
          if (is_chat)
            for (int i = 0; i < n; ++i)
              if (!send(sse(chunk({{"delta", {{"role", "assistant"}, {"content", ""}}}}, i)))) return false;
          Update total;
          int n_done = 0;
          auto quiet = std::chrono::steady_clock::now();
          for (;;) {
            for (int i = 0; i < n; ++i) {
              Choice& ch = (*choices)[static_cast<size_t>(i)];
              if (ch.done) continue;
              // One choice: wait as long as before; several: poll each in turn.
              Update u = ch.req->take(std::chrono::milliseconds(n == 1 ? 1000 : 20));
              for (LogprobEntry& e : u.logprobs) ch.logprobs.push_back(std::move(e));
              std::vector<ParsedToolCall> parsed;
              if (ch.parser) {
                ToolCallText t = ch.parser->push(u.content);
                if (u.done && u.finish_reason != "error" && u.finish_reason != "cancelled") {
                  ToolCallText tail = ch.parser->flush();
                  t.content += tail.content;
                  for (ParsedToolCall& c : tail.calls) t.calls.push_back(std::move(c));
                }
                u.content = std::move(t.content);
                parsed = std::move(t.calls);
              }
              if (plan.first_only && ch.n_calls > 0) u.tool_calls.clear();
              if (plan.first_only && u.tool_calls.size() > 1) u.tool_calls.resize(1);
              if (!u.content.empty() || !u.reasoning.empty() || !u.tool_calls.empty()) {
                json c;
                if (is_chat) {
                  json delta = json::object();
                  if (!u.content.empty()) delta["content"] = u.content;
                  if (!u.reasoning.empty()) delta["reasoning_content"] = u.reasoning;
                  for (const HarmonyToolCall& tc : u.tool_calls) {
                    json call = openai_tool_call(tc, "call_" + ch.call_id + "_" + std::to_string(ch.n_calls));
                    call["index"] = ch.n_calls++;
                    delta["tool_calls"].push_back(call);
                  }
                  c = chunk({{"delta", delta}}, i);
                } else {
                  c = chunk({{"text", u.content}, {"logprobs", nullptr}}, i);
                }
                if (is_chat && !ch.logprobs.empty())
                  c["choices"][0]["logprobs"] = logprobs_json(ch.logprobs), ch.logprobs.clear();
                if (!send(sse(c))) return false;
                quiet = std::chrono::steady_clock::now();
              }
              for (const ParsedToolCall& pc : parsed) {
                if (plan.first_only && ch.n_calls > 0) break;
                json call = openai_parsed_tool_call(pc, tool_call_id(plan.format, ch.call_id, ch.n_calls, pc.id));
                call["index"] = ch.n_calls++;
                json args = {{"index", call["index"]}, {"function", {{"arguments", call["function"]["arguments"]}}}};
                call["function"]["arguments"] = "";
                if (!send(sse(chunk({{"delta", {{"tool_calls", json::array({call})}}}}, i))) ||
                    !send(sse(chunk({{"delta", {{"tool_calls", json::array({args})}}}}, i))))
                  return false;
                quiet = std::chrono::steady_clock::now();
              }
              if (!u.done) continue;
              ch.done = true;
              ++n_done;
              if (u.finish_reason == "error" || u.finish_reason == "cancelled") {
                cancel_all();
                const ApiError e = u.finish_reason == "error"
                                       ? ApiError(500, "generation failed: " + u.error, "server_error")
                                       : ApiError(503, "the server is shutting down", "server_error");
                send(sse(e.body()));
                send("data: [DONE]\n\n");
                sink.done();
                return true;
              }
              if (n_done == 1) total = u;
              else total.n_completion += u.n_completion;
              const std::string reason = ch.n_calls > 0 && u.finish_reason == "stop" ? "tool_calls" : u.finish_reason;
              json last = is_chat ? chunk({{"delta", json::object()}, {"finish_reason", reason}}, i)
                                  : chunk({{"text", ""}, {"logprobs", nullptr}, {"finish_reason", u.finish_reason}}, i);
              if (is_chat && !ch.logprobs.empty()) last["choices"][0]["logprobs"] = logprobs_json(ch.logprobs);
              if (include_usage) last["usage"] = nullptr;
              if (!send(sse(last))) return false;
              quiet = std::chrono::steady_clock::now();
            }
            if (n_done < n) {
              // Nothing for a while (queued, or a long prefill): an SSE
              // comment, which also tells us whether the client is still there.
              if (std::chrono::steady_clock::now() - quiet >= std::chrono::milliseconds(1000)) {
                if (!send(": waiting\n\n")) return false;
                quiet = std::chrono::steady_clock::now();
              }
              continue;
            }
            t_access.prompt_tokens = total.n_prompt;  // the provider runs on the connection's thread
            t_access.completion_tokens = total.n_completion;
            if (include_usage) {
              json uj = {{"id", id},
                         {"object", is_chat ? "chat.completion.chunk" : "text_completion"},
                         {"created", created},
                         {"model", model},
                         {"choices", json::array()},
                         {"usage", usage_json(total)}};
              if (!send(sse(uj))) return false;
            }
            send("data: [DONE]\n\n");
            sink.done();
            return true;
          }
        },
        [cancel_all](bool success) {
          if (!success) cancel_all();
        });
  }
};

HttpServer::HttpServer(Scheduler& sched, const Tokenizer& tok, const ChatRenderer& chat, Metrics& metrics,
                       HttpOptions opt)
    : impl_(std::make_unique<Impl>(sched, tok, chat, metrics, std::move(opt))) {}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  impl_->opt.port = impl_->front.bind();
  return impl_->opt.port;
}

void HttpServer::listen() {
  if (impl_->stopped) return;
  impl_->front.run();
}

void HttpServer::stop() {
  if (!impl_) return;
  impl_->stopped = true;
  impl_->front.stop();
}

}  // namespace ms::server
