#include "server/agent_routes.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <random>

#include "server/messages_api.h"

#include "server/http_message.h"
#include "server/http_router.h"

namespace ms::server {

using json = nlohmann::ordered_json;

const char* agent_allowed_methods(const std::string& path) {
  if (path == "/v1/responses" || path == "/v1/messages" || path == "/v1/messages/count_tokens") return "POST";
  return nullptr;
}

const char* agent_endpoint_label(const std::string& path) {
  if (path == "/v1/responses" || path == "/v1/messages" || path == "/v1/messages/count_tokens")
    return path == "/v1/responses" ? "/v1/responses" : path == "/v1/messages" ? "/v1/messages"
                                                                             : "/v1/messages/count_tokens";
  if (path.rfind("/v1/responses/", 0) == 0) return "/v1/responses/{id}";
  return nullptr;
}

AgentApi::AgentApi(Context ctx) : ctx_(std::move(ctx)), store_(ctx_.store_limits) {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  id_prefix_ = buf;
}

AgentApi::~AgentApi() = default;

// The handlers were written against cpp-httplib's names (server/http_message.h keeps them).
namespace httplib = http;

namespace {

std::string text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool same_secret(const std::string& got, const std::string& want) {
  // Compared in time independent of where they differ.
  unsigned diff = got.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i)
    diff |= static_cast<unsigned char>(i < got.size() ? got[i] : 0) ^ static_cast<unsigned char>(want[i]);
  return diff == 0;
}

}  // namespace

struct AgentApi::Handlers {
  AgentApi& api;
  enum class Shape { OpenAI, Anthropic };

  static void send_error(httplib::Response& res, const ApiError& e, Shape shape) {
    res.status = e.status;
    res.set_content(text(shape == Shape::OpenAI ? json(nlohmann::json(e.body())) : anthropic_error_body(e)),
                    "application/json");
  }

  bool authorized(const httplib::Request& req, httplib::Response& res, Shape shape) const {
    const std::string& key = api.ctx_.api_key;
    if (key.empty()) return true;
    const std::string bearer = req.get_header_value("Authorization");
    const std::string x_api_key = req.get_header_value("x-api-key");
    if (same_secret(bearer, "Bearer " + key) || same_secret(x_api_key, key)) return true;
    send_error(res,
               ApiError(401,
                        bearer.empty() && x_api_key.empty()
                            ? "no API key given: send the header 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
                            : "incorrect API key",
                        "authentication_error", "", "invalid_api_key"),
               shape);
    return false;
  }

  std::string next_id(const char* prefix) {
    return prefix + api.id_prefix_ + std::to_string(api.next_id_.fetch_add(1));
  }

  void tokens(const AnswerPiece& p) const {
    if (api.ctx_.on_tokens) api.ctx_.on_tokens(p.n_prompt, p.n_completion);
  }

  // Reads a whole answer into `push` (a ResponsesEvents or MessagesEvents);
  // a client that hangs up meanwhile gets its job cancelled.
  template <class Events>
  AnswerPiece read_whole(const httplib::Request& hreq, AnswerReader& reader, Events& events) {
    AnswerPiece p;
    do {
      if (hreq.client_gone && hreq.client_gone()) reader.cancel();
      p = reader.next(std::chrono::milliseconds(250));
      events.push(p);
    } while (!p.done);
    tokens(p);
    return p;
  }

  // Streams an answer's events; `keepalive` goes out while nothing comes
  // (a long prompt), which also tells whether the client is still there.
  // `on_done` runs on the last piece (storing a response).
  template <class Events>
  void stream(httplib::Response& res, std::shared_ptr<AnswerReader> reader, std::shared_ptr<Events> events,
              std::vector<std::string> first, std::string keepalive, std::function<void(const AnswerPiece&)> on_done) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, reader, events, first, keepalive, on_done](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            reader->cancel();  // the client went away: free its slot
            return false;
          };
          for (const std::string& e : first)
            if (!send(e)) return false;
          for (;;) {
            const AnswerPiece p = reader->next(std::chrono::milliseconds(1000));
            const std::vector<std::string> out = events->push(p);
            if (out.empty() && !p.done && !send(keepalive)) return false;
            for (const std::string& e : out)
              if (!send(e)) return false;
            if (!p.done) continue;
            tokens(p);
            if (on_done) on_done(p);
            sink.done();
            return true;
          }
        },
        [reader](bool success) {
          if (!success) reader->cancel();
        });
  }

  void responses(const httplib::Request& hreq, httplib::Response& res) {
    if (!authorized(hreq, res, Shape::OpenAI)) return;
    try {
      ResponsesRequest rq = parse_responses_request(parse_json_body(hreq.body, api.ctx_.json_limits), api.store_);
      CompletionRequest r;
      StartedChat started;
      try {
        r = parse_request_body(rq.chat_body, true);
        started = start_chat(api.ctx_.serving, r);
      } catch (const ApiError& e) {
        throw responses_error(e);
      }
      // The values used: as sent, else the server's defaults (as a client would write them, not 0.949999988).
      auto used = [&](const char* key, float value) {
        rq.echo[key] = rq.chat_body.contains(key) ? rq.chat_body[key] : json(std::round(value * 1e6) / 1e6);
      };
      used("temperature", r.sampling.temperature);
      used("top_p", r.sampling.top_p);
      const std::string id = next_id("resp_");
      const std::string model = rq.model.empty() ? api.ctx_.model_name : rq.model;
      auto reader = std::make_shared<AnswerReader>(std::move(started), id);
      auto events = std::make_shared<ResponsesEvents>(rq.echo, id, static_cast<int64_t>(std::time(nullptr)), model);
      // The conversation with this answer, for a later previous_response_id.
      auto keep = [this, id, events, history = rq.history, store = rq.store](const AnswerPiece&) {
        if (!store || events->status() == "failed") return;
        ResponseStore::Entry e;
        e.messages = history;
        e.messages.push_back(events->output_message());
        e.response = events->response();
        api.store_.put(id, std::move(e));
      };
      if (rq.stream) {
        stream(res, reader, events, events->start(), ": waiting\n\n", keep);
        return;
      }
      const AnswerPiece last = read_whole(hreq, *reader, *events);
      if (last.finish_reason == "error") throw ApiError(500, "generation failed: " + last.error, "server_error");
      if (last.finish_reason == "cancelled") throw ApiError(503, "the server is shutting down", "server_error");
      keep(last);
      res.set_content(text(events->response()), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e, Shape::OpenAI);
    }
  }

  void stored_response(const httplib::Request& hreq, httplib::Response& res, bool erase) {
    if (!authorized(hreq, res, Shape::OpenAI)) return;
    const std::string id = hreq.matches[1];
    const ApiError missing(404, "Response with id '" + id.substr(0, 100) + "' not found", "invalid_request_error",
                           "response_id", "response_not_found");
    if (erase) {
      if (!api.store_.erase(id)) return send_error(res, missing, Shape::OpenAI);
      res.set_content(text(json{{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
      return;
    }
    std::optional<ResponseStore::Entry> e = api.store_.get(id);
    if (!e) return send_error(res, missing, Shape::OpenAI);
    res.set_content(text(e->response), "application/json");
  }

  void messages(const httplib::Request& hreq, httplib::Response& res, bool count_tokens) {
    if (!authorized(hreq, res, Shape::Anthropic)) return;
    try {
      MessagesRequest mq = parse_messages_request(parse_json_body(hreq.body, api.ctx_.json_limits), count_tokens);
      CompletionRequest r;
      try {
        r = parse_request_body(mq.chat_body, true);
      } catch (const ApiError& e) {
        throw messages_error(e);
      }
      if (count_tokens) {
        const std::vector<int32_t> ids = chat_prompt(api.ctx_.serving, r, nullptr, nullptr, false);
        res.set_content(text(json{{"input_tokens", ids.size()}}), "application/json");
        return;
      }
      StartedChat started = start_chat(api.ctx_.serving, r, /*own_stops=*/true);
      const int n_prompt = started.n_prompt;
      const std::string id = next_id("msg_");
      const std::string model = mq.model.empty() ? api.ctx_.model_name : mq.model;
      auto reader = std::make_shared<AnswerReader>(std::move(started), id, r.stop);
      auto events = std::make_shared<MessagesEvents>(id, model, mq.thinking);
      if (mq.stream) {
        stream(res, reader, events, events->start(n_prompt), MessagesEvents::ping(), nullptr);
        return;
      }
      read_whole(hreq, *reader, *events);
      if (events->failed()) throw events->error();
      res.set_content(text(events->message()), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e, Shape::Anthropic);
    }
  }
};

void AgentApi::add_routes(http::Router& svr) {
  auto h = std::make_shared<Handlers>(Handlers{*this});
  svr.Post("/v1/responses", [h](const httplib::Request& req, httplib::Response& res) { h->responses(req, res); });
  svr.Get("/v1/responses/(.+)",
          [h](const httplib::Request& req, httplib::Response& res) { h->stored_response(req, res, false); });
  svr.Delete("/v1/responses/(.+)",
             [h](const httplib::Request& req, httplib::Response& res) { h->stored_response(req, res, true); });
  svr.Post("/v1/messages", [h](const httplib::Request& req, httplib::Response& res) { h->messages(req, res, false); });
  svr.Post("/v1/messages/count_tokens",
           [h](const httplib::Request& req, httplib::Response& res) { h->messages(req, res, true); });
}

}  // namespace ms::server
