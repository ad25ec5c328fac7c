// The chat prompt of a request: the model's own Jinja template
// (tokenizer.chat_template in the GGUF) rendered by tokenizer/jinja.h, or,
// when the file has none or it cannot be rendered here, the architecture's
// known format (tokenizer/chat_template.h).
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace ms {
class Tokenizer;
namespace jinja {
class Template;
}
}  // namespace ms

namespace ms::server {

class ChatRenderer {
 public:
  // `format` names a built-in format to use instead of the file's template
  // (as --chat-template; "" = the file's). Throws ms::Error for an unknown name.
  explicit ChatRenderer(const Tokenizer& tok, const std::string& format = "");
  ~ChatRenderer();

  // The prompt text for OpenAI-shaped messages ([{role, content}, ...]),
  // with `kwargs` (chat_template_kwargs, e.g. enable_thinking) visible to the
  // template. A leading BOS the template writes is removed (the tokenizer
  // adds it). Throws server::ApiError: 400 when the template refuses the
  // conversation (its raise_exception), with the template's message, or when
  // rendering it passes one of jinja::Limits (time, output, loops...); 503
  // when `cancel` was set during the render (a server shutting down).
  // kwargs["tools"] reaches the template; a template without tool syntax
  // gets them described in the system message instead (generic format).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& kwargs = nlohmann::ordered_json::object(),
                     const std::atomic<bool>* cancel = nullptr) const;

  // "the model's Jinja template" or "built-in chatml (...)"
  std::string description() const { return description_; }

 private:
  std::string render_messages(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                              const nlohmann::ordered_json& kwargs, const std::atomic<bool>* cancel) const;
  const Tokenizer& tok_;
  std::unique_ptr<jinja::Template> jinja_;
  std::string format_;  // built-in format name when not Jinja
  std::string description_;
  bool harmony_ = false;  // gpt-oss: messages are adapted to its template (chat.cpp)
  // The template renders the request's tools itself; else they are described
  // in the system message, in the generic format (server/tool_calls.h).
  bool tool_syntax_ = false;
};

}  // namespace ms::server
