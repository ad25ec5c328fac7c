#include "server/answer_reader.h"

#include "server/chat.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {

std::vector<int32_t> chat_prompt(const ChatServing& s, CompletionRequest& r, ToolCallPlan* plan_out,
                                 std::string* text_out, bool check_room) {
  std::string text = s.chat.render(r.messages, true, r.template_kwargs, s.stopping);
  const ToolCallPlan plan = plan_tool_calls(s.tool_model, r, text);
  text += plan.prompt_suffix;  // tool_choice required / named: the call is begun for the model
  std::vector<int32_t> ids = s.tok.encode(text, true, true);
  if (ids.empty()) throw ApiError(400, "the prompt is empty after tokenization");
  if (check_room && static_cast<int64_t>(ids.size()) >= s.sched.ctx())
    throw ApiError(400,
                   "a request may hold " + std::to_string(s.sched.ctx()) + " tokens (" + s.sched.ctx_limit_name() +
                       ") and the input takes " + std::to_string(ids.size()) +
                       " tokens, leaving no room for the answer; shorten it or restart with a larger --ctx",
                   "invalid_request_error", "messages", "context_length_exceeded");
  for (const auto& [id, bias] : r.sampling.logit_bias)
    if (id >= s.tok.n_tokens())
      throw ApiError(400,
                     "'logit_bias' names token " + std::to_string(id) + ", but this model's vocabulary has " +
                         std::to_string(s.tok.n_tokens()) + " tokens",
                     "invalid_request_error", "logit_bias");
  if (r.grammar && s.harmony)
    throw ApiError(400,
                   "a JSON answer format is not supported for this model: its answers come in harmony channels "
                   "(gpt-oss)",
                   "invalid_request_error", "response_format");
  if (plan_out) *plan_out = plan;
  if (text_out) *text_out = std::move(text);
  return ids;
}

StartedChat start_chat(const ChatServing& s, const CompletionRequest& request, bool own_stops) {
  // The tool-call plan may constrain the answer (a forced call's grammar).
  CompletionRequest r = request;
  StartedChat out;
  std::string text;
  std::vector<int32_t> ids = chat_prompt(s, r, &out.plan, &text);
  out.n_prompt = static_cast<int>(ids.size());
  Job job;
  job.prompt = std::move(ids);
  job.sampling = r.sampling;
  job.gen = r.gen;
  if (!own_stops) job.stop = r.stop;
  job.grammar = r.grammar;
  job.top_logprobs = -1;  // neither API asks for them here
  job.separate_reasoning = r.separate_reasoning;
  job.starts_in_reasoning = job.separate_reasoning && prompt_opens_think(text);
  job.harmony = s.harmony;
  job.render_special = out.plan.render_special;
  out.req = s.sched.submit(std::move(job));
  return out;
}

AnswerReader::AnswerReader(StartedChat started, std::string id, std::vector<std::string> own_stops)
    : started_(std::move(started)), id_(std::move(id)), stops_(std::move(own_stops)) {
  const ToolCallPlan& plan = started_.plan;
  if (plan.format != ToolCallFormat::None) {
    parser_ = std::make_unique<ToolCallParser>(plan.format, plan.tools);
    parser_->push(plan.prefill);  // a forced call's opening: held, nothing comes out
  }
  if (!stops_.empty()) stop_ = std::make_unique<StopMatcher>(stops_);
}

void AnswerReader::cancel() { started_.req->cancel(); }

void AnswerReader::add_call(AnswerPiece& p, std::string name, std::string arguments, const std::string& model_id,
                            bool harmony) {
  if (started_.plan.first_only && n_calls_ > 0) return;  // parallel_tool_calls false
  AnswerCall c;
  c.id = harmony ? "call_" + id_ + "_" + std::to_string(n_calls_)
                 : tool_call_id(started_.plan.format, id_, n_calls_, model_id);
  c.name = std::move(name);
  c.arguments = std::move(arguments);
  ++n_calls_;
  p.calls.push_back(std::move(c));
}

AnswerPiece AnswerReader::next(std::chrono::milliseconds timeout) {
  Update u = started_.req->take(timeout);
  AnswerPiece p;
  const bool stopped_before = stop_ && stop_->stopped();
  // After our own stop string, what the job made before its cancellation
  // took effect is not part of the answer.
  std::string content = stopped_before ? std::string() : std::move(u.content);
  if (!stopped_before) p.reasoning = std::move(u.reasoning);
  if (u.done && stopped_before && u.finish_reason == "cancelled") u.finish_reason = "stop";
  const bool ended_well = u.done && u.finish_reason != "error" && u.finish_reason != "cancelled";
  if (stop_ && !stopped_before) {
    raw_ += content;
    content = stop_->push(content);
    raw_emitted_ += content.size();
    if (stop_->stopped()) {
      // The stop string starts where the emitted text ends.
      for (const std::string& s : stops_)
        if (raw_.compare(raw_emitted_, s.size(), s) == 0) {
          stop_found_ = s;
          break;
        }
      started_.req->cancel();  // free the slot: nothing after the stop string is wanted
      u.tool_calls.clear();
    } else if (ended_well) {
      content += stop_->flush();
    }
  }
  if (!stopped_before)
    for (const HarmonyToolCall& c : u.tool_calls) {
      const nlohmann::json call = openai_tool_call(c, "");
      add_call(p, call["function"]["name"].get<std::string>(), call["function"]["arguments"].get<std::string>(), "",
               true);
    }
  if (parser_) {
    ToolCallText t = parser_->push(content);
    if (ended_well || (u.done && !stop_found_.empty())) {
      ToolCallText tail = parser_->flush();
      t.content += tail.content;
      for (ParsedToolCall& c : tail.calls) t.calls.push_back(std::move(c));
    }
    content = std::move(t.content);
    for (ParsedToolCall& c : t.calls) add_call(p, std::move(c.name), std::move(c.arguments), c.id, false);
  }
  p.content = std::move(content);
  if (u.done) {
    p.done = true;
    p.finish_reason = u.finish_reason;
    p.error = u.error;
    if (!stop_found_.empty()) p.finish_reason = "stop", p.stop_sequence = stop_found_;
    p.n_prompt = u.n_prompt;
    p.n_cached = u.n_cached;
    p.n_completion = u.n_completion;
  }
  return p;
}

}  // namespace ms::server
