// Chat prompt formats. The GGUF carries a Jinja template
// (`tokenizer.chat_template`); instead of running Jinja we recognise the
// format from its distinctive markers and build the prompt in C++. A format
// can also be chosen by name (the --chat-template flag).
//
// The prompt does not contain BOS: the tokenizer adds it (Vocab::add_bos).
// Encode it with parse_special = true so the markers become control tokens.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

struct Vocab;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatFormat {
  ChatML,           // <|im_start|>role\n...<|im_end|>\n   (Qwen)
  Llama3,           // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  Llama2,           // [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]
  MistralV1,        // " [INST] user [/INST] answer</s>"   (Mistral 7B v0.1, Mixtral 8x7B)
  MistralV3,        // "[INST] user[/INST] answer</s>"      (Mistral v0.3, Mixtral 8x22B)
  MistralV3Tekken,  // "[INST]user[/INST]answer</s>"        (Mistral Nemo)
  MistralV7,        // "[SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] user[/INST] answer</s>"
};

const char* chat_format_name(ChatFormat f);
// "chatml", "llama3", "llama2", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7".
std::optional<ChatFormat> parse_chat_format(std::string_view name);
// All names, comma-separated, for messages.
std::string chat_format_names();
// The format a Jinja template string implements, from its markers; nullopt
// when it is not recognised (or empty).
std::optional<ChatFormat> detect_chat_format(std::string_view jinja_template);

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatFormat f) : format_(f) {}
  // The format named by `override_name` if given (throws ms::Error for an
  // unknown name), else the one detected from the vocabulary's template, else
  // ChatML (the common default for models without a template).
  static ChatTemplate for_vocab(const Vocab& vocab, const std::string& override_name = "");

  ChatFormat format() const { return format_; }
  const char* name() const { return chat_format_name(format_); }

  // The prompt for `messages`; with `add_generation_prompt`, ends with the
  // opening of the assistant's turn. Throws ms::Error for an unknown role.
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

 private:
  ChatFormat format_;
};

}  // namespace ms
