// libFuzzer target: a request body through the Responses and Messages
// translations (server/responses_api.h, messages_api.h) and then
// parse_request_body, as the server's routes run them; then the rest of the
// input as a model's answer pieces through the event writers. None of it may
// crash, hang, or throw anything but ApiError; errors are 4xx (404 only for
// previous_response_id). Input: the first byte picks the route (low two bits:
// responses, responses, messages, count_tokens), then the body, a NUL byte and
// the answer's pieces. Run by scripts/fuzz.sh.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/api.h"
#include "server/messages_api.h"
#include "server/responses_api.h"
#include "tokenizer/tokenizer.h"

// engine/generate.cpp is linked for GenerateParams::validate; its generate()
// asks the tokenizer, which this target does not link, and never runs here.
bool ms::Tokenizer::is_eog(int32_t) const { std::abort(); }

using namespace ms::server;
using ojson = nlohmann::ordered_json;

namespace {

// The answer text cut into pieces at '|' (reasoning after a '~', a call
// after a '!'), then the end.
template <class Events>
void feed(Events& ev, const std::string& answer, const std::string& finish) {
  size_t at = 0;
  int n = 0;
  while (at <= answer.size()) {
    size_t end = answer.find('|', at);
    if (end == std::string::npos) end = answer.size();
    const std::string piece = answer.substr(at, end - at);
    AnswerPiece p;
    if (!piece.empty() && piece[0] == '~') p.reasoning = piece.substr(1);
    else if (!piece.empty() && piece[0] == '!') p.calls.push_back({"call_" + std::to_string(n), "f", piece.substr(1)});
    else p.content = piece;
    (void)ev.push(p);
    at = end + 1;
    ++n;
  }
  AnswerPiece done;
  done.done = true;
  done.finish_reason = finish;
  (void)ev.push(done);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int route = data[0] & 3;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = rest.find('\0');  // JSON text holds no raw NUL
  const std::string body = rest.substr(0, nul);
  const std::string answer = nul == std::string::npos ? std::string() : rest.substr(nul + 1);
  static const char* finishes[] = {"stop", "length", "error", "cancelled"};
  const std::string finish = finishes[answer.size() % 4];
  static ResponseStore store;
  static const bool stored = [] {
    ResponseStore::Entry e;
    e.messages = ojson::array({{{"role", "user"}, {"content", "hi"}},
                               {{"role", "assistant"},
                                {"content", ""},
                                {"tool_calls", ojson::array({{{"id", "call_1"},
                                                              {"type", "function"},
                                                              {"function", {{"name", "f"}, {"arguments", "{}"}}}}})}}});
    e.response = ojson::object();
    store.put("resp_1", e);
    return true;
  }();
  (void)stored;
  try {
    const ojson j = parse_json_body(body);
    if (route <= 1) {
      ResponsesRequest rq = parse_responses_request(j, store);
      try {
        const CompletionRequest r = parse_request_body(rq.chat_body, true);
        (void)r.messages.dump();
      } catch (const ApiError& e) {
        const ApiError renamed = responses_error(e);
        if (renamed.status != 400) std::abort();
      }
      ResponsesEvents ev(rq.echo, "resp_x", 1, "m");
      (void)ev.start();
      feed(ev, answer, finish);
      if (!ev.finished()) std::abort();
      (void)ev.response().dump(-1, ' ', false, ojson::error_handler_t::replace);
      (void)ev.output_message().dump(-1, ' ', false, ojson::error_handler_t::replace);
    } else {
      const MessagesRequest mq = parse_messages_request(j, route == 3);
      try {
        const CompletionRequest r = parse_request_body(mq.chat_body, true);
        (void)r.messages.dump();
      } catch (const ApiError& e) {
        if (messages_error(e).status != 400) std::abort();
      }
      MessagesEvents ev("msg_x", "m", mq.thinking);
      (void)ev.start(3);
      feed(ev, answer, finish);
      if (!ev.finished()) std::abort();
      (void)ev.message().dump(-1, ' ', false, ojson::error_handler_t::replace);
    }
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status >= 500 || (e.status == 404 && route > 1)) std::abort();
    (void)e.body().dump();  // strict: an error message must itself be valid UTF-8
    (void)anthropic_error_body(e).dump();
  }
  return 0;
}
