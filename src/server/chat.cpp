#include "server/chat.h"

#include "server/api.h"
#include "server/json_limits.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/harmony.h"
#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ms::server {

namespace {

// Templates write a tool call's arguments through tojson (gpt-oss, Qwen3,
// Mistral) or walk them as a mapping (Qwen3-Coder, Qwen3.5: one
// <parameter=...> per key), so they want them as JSON values; OpenAI clients
// send them back as a JSON string, which is parsed here (as llama.cpp does),
// or the prompt would quote the arguments twice or lose them. gpt-oss's
// template also reads an assistant turn's reasoning from "thinking", where
// clients send back "reasoning_content".
nlohmann::ordered_json adapted_messages(const nlohmann::ordered_json& messages, bool harmony) {
  nlohmann::ordered_json out = messages;
  for (auto& m : out) {
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    if (harmony && !m.contains("thinking") && m.contains("reasoning_content") && m["reasoning_content"].is_string())
      m["thinking"] = m["reasoning_content"];
    if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (auto& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      auto& fn = call["function"];
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      const std::string text = fn["arguments"].get<std::string>();
      try {
        fn["arguments"] = parse_json_bounded(text);  // the request's own bounds: nothing deeper reaches the template
      } catch (const std::exception&) {
        // Not JSON (or past the bounds): the template gets the text as sent.
      }
    }
  }
  return out;
}

// The generic tool format's description (server/tool_calls.h) in the system
// message: appended to the first message when it is a system message with
// text, else a system message of its own before the others.
nlohmann::ordered_json with_tools_prompt(const nlohmann::ordered_json& messages, const std::string& text) {
  nlohmann::ordered_json out = messages;
  if (!out.empty() && out[0].is_object() && out[0].value("role", "") == "system" && out[0].contains("content") &&
      out[0]["content"].is_string()) {
    out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + text;
    return out;
  }
  out.insert(out.begin(), nlohmann::ordered_json{{"role", "system"}, {"content", text}});
  return out;
}

// For templates that refuse a system message (roles must alternate): the
// description before the first user message's text.
nlohmann::ordered_json with_tools_in_user_turn(const nlohmann::ordered_json& messages, const std::string& text) {
  nlohmann::ordered_json out = messages;
  for (auto& m : out)
    if (m.is_object() && m.value("role", "") == "user" && m.contains("content") && m["content"].is_string()) {
      m["content"] = text + "\n\n" + m["content"].get<std::string>();
      break;
    }
  return out;
}

}  // namespace

ChatRenderer::ChatRenderer(const Tokenizer& tok, const std::string& format)
    : tok_(tok), harmony_(harmony_markers(tok).has_value()) {
  const Vocab& v = tok.vocab();
  if (!format.empty()) {
    ChatTemplate t = ChatTemplate::for_vocab(v, format);  // throws for an unknown name
    format_ = t.name();
    description_ = std::string("built-in ") + format_ + " (--chat-template)";
    return;
  }
  if (!v.chat_template.empty()) {
    try {
      jinja_ = std::make_unique<jinja::Template>(v.chat_template);
      tool_syntax_ = v.chat_template.find("tools") != std::string::npos;
      description_ = "the model's Jinja template";
      return;
    } catch (const Error& e) {
      // Not renderable here: the built-in format it resembles.
      format_ = ChatTemplate::for_vocab(v).name();
      description_ = std::string("built-in ") + format_ + " (the model's template: " + e.what() + ")";
      return;
    }
  }
  format_ = ChatTemplate::for_vocab(v).name();
  description_ = std::string("built-in ") + format_ + " (the model has no chat template)";
}

ChatRenderer::~ChatRenderer() = default;

std::string ChatRenderer::render(const nlohmann::ordered_json& messages_in, bool add_generation_prompt,
                                 const nlohmann::ordered_json& kwargs, const std::atomic<bool>* cancel) const {
  // A template that says nothing of tools: they are described in the system
  // message, with the generic format to call them in.
  auto tools = kwargs.find("tools");
  if (!tool_syntax_ && tools != kwargs.end() && tools->is_array() && !tools->empty()) {
    const std::string text = generic_tools_prompt(nlohmann::json::parse(tools->dump()));
    try {
      return render_messages(with_tools_prompt(messages_in, text), add_generation_prompt, kwargs, cancel);
    } catch (const ApiError& e) {
      if (e.status != 400) throw;
      // The template refused the system message: the user's turn then.
      return render_messages(with_tools_in_user_turn(messages_in, text), add_generation_prompt, kwargs, cancel);
    }
  }
  return render_messages(messages_in, add_generation_prompt, kwargs, cancel);
}

std::string ChatRenderer::render_messages(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                          const nlohmann::ordered_json& kwargs,
                                          const std::atomic<bool>* cancel) const {
  if (jinja_) {
    jinja::Json ctx = jinja::Json::object();
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) ctx[it.key()] = it.value();
    ctx["messages"] = adapted_messages(messages, harmony_);
    ctx["add_generation_prompt"] = add_generation_prompt;
    const int32_t bos = tok_.bos_id(), eos = tok_.eos_id();
    const std::string bos_text = bos >= 0 ? tok_.token_to_piece(bos, true) : "";
    ctx["bos_token"] = bos_text;
    ctx["eos_token"] = eos >= 0 ? tok_.token_to_piece(eos, true) : "";
    std::string out;
    jinja::RenderOptions ro;
    ro.cancel = cancel;
    try {
      out = jinja_->render(ctx, ro);
    } catch (const jinja::TemplateRaised& e) {
      throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(),
                     "invalid_request_error", "messages");
    } catch (const jinja::LimitExceeded& e) {
      // What the template does is driven by the request (messages, tools,
      // kwargs): the request is what is too big.
      throw ApiError(400, std::string("rendering these messages with the chat template went past a limit: ") + e.what(),
                     "invalid_request_error", "messages");
    } catch (const jinja::Cancelled&) {
      throw ApiError(503, "the server is shutting down", "server_error");
    } catch (const Error& e) {
      throw ApiError(500, std::string("the model's chat template failed: ") + e.what(), "server_error");
    }
    // The tokenizer adds BOS itself where the vocabulary asks for it.
    if (tok_.vocab().add_bos && !bos_text.empty() && out.rfind(bos_text, 0) == 0) out.erase(0, bos_text.size());
    return out;
  }
  std::vector<ChatMessage> msgs;
  for (const auto& m : messages) {
    ChatMessage cm;
    cm.role = m.value("role", "");
    cm.content = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
    msgs.push_back(std::move(cm));
  }
  try {
    return ChatTemplate(*parse_chat_format(format_)).apply(msgs, add_generation_prompt);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error", "messages");
  }
}

}  // namespace ms::server
