// A chat request run over the Scheduler and its answer read back in a shape
// no API owns: text, reasoning and finished tool calls as they come, then how
// it ended. The Responses and Messages routes (server/responses_api.h,
// messages_api.h) translate their requests into a CompletionRequest, start
// it here and translate these pieces into their own JSON and events, so
// they share the chat completions route's prompt, limits, tool-call parsing
// and constrained output.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/api.h"
#include "server/text_stream.h"
#include "server/tool_call_parser.h"
#include "server/tool_calls.h"

namespace ms {
class Tokenizer;
}

namespace ms::server {

class Scheduler;
class Request;
class ChatRenderer;

// What running a chat request needs of the server.
struct ChatServing {
  Scheduler& sched;
  const Tokenizer& tok;
  const ChatRenderer& chat;
  ModelToolCalls tool_model;
  bool harmony = false;  // gpt-oss: answers are parsed by channel
  const std::atomic<bool>* stopping = nullptr;  // set when the server shuts down (cancels a render)
};

// A submitted request: its mailbox, how its tool calls are read, and the
// prompt's length in tokens.
struct StartedChat {
  std::shared_ptr<Request> req;
  ToolCallPlan plan;
  int n_prompt = 0;
};

// The prompt `r` renders to (with a forced call's opening, as chat
// completions do), tokenized. Throws ApiError: the template's refusals
// (param "messages"), an empty prompt, one that leaves no room in the
// context (code context_length_exceeded), a logit_bias id past the
// vocabulary, a response_format on a harmony model. r may gain the grammar of
// a forced tool call (plan_tool_calls). `check_room` false: no
// context check (counting a prompt's tokens).
std::vector<int32_t> chat_prompt(const ChatServing& s, CompletionRequest& r, ToolCallPlan* plan = nullptr,
                                 std::string* text = nullptr, bool check_room = true);

// Queues `r` on the scheduler. With `own_stops` the request's stop strings
// are not given to the scheduler: AnswerReader applies them itself, so it
// can tell which one ended the answer (Anthropic's stop_sequence).
StartedChat start_chat(const ChatServing& s, const CompletionRequest& r, bool own_stops = false);

struct AnswerCall {
  std::string id, name, arguments;  // arguments: a JSON object as text
};

// What came since the last read, in this order: reasoning, content, calls.
struct AnswerPiece {
  std::string content, reasoning;
  std::vector<AnswerCall> calls;
  bool done = false;
  // With done: "stop", "length", "error" (with error) or "cancelled"; a stop
  // string that ended it is in stop_sequence (own_stops only).
  std::string finish_reason, error, stop_sequence;
  int n_prompt = 0, n_cached = 0, n_completion = 0;
};

class AnswerReader {
 public:
  // `id`: the response's id, from which tool calls' ids are made.
  AnswerReader(StartedChat started, std::string id, std::vector<std::string> own_stops = {});
  // Waits up to `timeout` for more (an empty piece when nothing came).
  AnswerPiece next(std::chrono::milliseconds timeout);
  // The client went away: the job's slot is freed at the scheduler's next turn.
  void cancel();
  int n_prompt() const { return started_.n_prompt; }
  size_t n_calls() const { return n_calls_; }

 private:
  void add_call(AnswerPiece& p, std::string name, std::string arguments, const std::string& model_id, bool harmony);

  StartedChat started_;
  std::string id_;
  std::unique_ptr<ToolCallParser> parser_;
  std::vector<std::string> stops_;
  std::unique_ptr<StopMatcher> stop_;
  std::string raw_;          // content given to stop_ (to tell which stop string matched)
  size_t raw_emitted_ = 0;   // how much of raw_ came out before the stop
  std::string stop_found_;   // the stop string that ended the answer
  size_t n_calls_ = 0;
};

}  // namespace ms::server
