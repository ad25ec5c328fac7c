#include "tokenizer/chat_template.h"

#include "tokenizer/vocab.h"
#include "util/error.h"

namespace ms {

namespace {

struct Named {
  ChatFormat format;
  const char* name;
};
constexpr Named kNames[] = {
    {ChatFormat::ChatML, "chatml"},
    {ChatFormat::Llama3, "llama3"},
    {ChatFormat::Llama2, "llama2"},
    {ChatFormat::MistralV1, "mistral-v1"},
    {ChatFormat::MistralV3, "mistral-v3"},
    {ChatFormat::MistralV3Tekken, "mistral-v3-tekken"},
    {ChatFormat::MistralV7, "mistral-v7"},
};

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

std::string trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

void check_role(const ChatMessage& m) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
    throw Error("chat message role '" + m.role + "' is not one of system, user, assistant, tool");
}

std::string apply_chatml(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (const ChatMessage& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string apply_llama3(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (const ChatMessage& m : msgs)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// The system prompt goes inside the first [INST] of Llama 2 between <<SYS>>
// markers; later turns start with an explicit <s> (the tokenizer adds only
// the first).
std::string apply_llama2(const std::vector<ChatMessage>& msgs) {
  std::string out;
  std::string system;
  bool first_turn = true;
  for (const ChatMessage& m : msgs) {
    if (m.role == "system") {
      system = "<<SYS>>\n" + m.content + "\n<</SYS>>\n\n";
    } else if (m.role == "assistant") {
      out += ' ';  // (appended piecewise: GCC 12 warns falsely on " " + std::string)
      out += trim(m.content);
      out += " </s>";
    } else {
      if (!first_turn) out += "<s>";
      out += "[INST] " + system + trim(m.content) + " [/INST]";
      system.clear();
      first_turn = false;
    }
  }
  return out;
}

// Mistral's [INST] family; the variants differ only in spaces. The system
// prompt is put before the next user message of the same turn.
std::string apply_mistral(const std::vector<ChatMessage>& msgs, ChatFormat f) {
  const std::string lead = f == ChatFormat::MistralV1 ? " " : "";
  const std::string after_inst = f == ChatFormat::MistralV3Tekken ? "" : " ";
  const bool trim_answer = f == ChatFormat::MistralV3;
  std::string out;
  bool in_turn = false;
  for (const ChatMessage& m : msgs) {
    if (m.role == "assistant") {
      out += after_inst + (trim_answer ? trim(m.content) : m.content) + "</s>";
      in_turn = false;
      continue;
    }
    if (!in_turn) {
      out += lead + "[INST]" + after_inst;
      in_turn = true;
    }
    if (m.role == "system") out += m.content + "\n\n";
    else out += m.content + lead + "[/INST]";
  }
  return out;
}

std::string apply_mistral_v7(const std::vector<ChatMessage>& msgs) {
  std::string out;
  for (const ChatMessage& m : msgs) {
    if (m.role == "system") out += "[SYSTEM_PROMPT] " + m.content + "[/SYSTEM_PROMPT]";
    else if (m.role == "assistant") out += " " + m.content + "</s>";
    else out += "[INST] " + m.content + "[/INST]";
  }
  return out;
}

}  // namespace

const char* chat_format_name(ChatFormat f) {
  for (const Named& n : kNames)
    if (n.format == f) return n.name;
  return "?";
}

std::optional<ChatFormat> parse_chat_format(std::string_view name) {
  for (const Named& n : kNames)
    if (name == n.name) return n.format;
  if (name == "qwen" || name == "qwen2" || name == "qwen3") return ChatFormat::ChatML;
  if (name == "mistral") return ChatFormat::MistralV3;
  return std::nullopt;
}

std::string chat_format_names() {
  std::string s;
  for (const Named& n : kNames) {
    if (!s.empty()) s += ", ";
    s += n.name;
  }
  return s;
}

std::optional<ChatFormat> detect_chat_format(std::string_view t) {
  if (t.empty()) return std::nullopt;
  if (contains(t, "<|im_start|>")) return ChatFormat::ChatML;
  if (contains(t, "<|start_header_id|>")) return ChatFormat::Llama3;
  if (contains(t, "[SYSTEM_PROMPT]")) return ChatFormat::MistralV7;
  if (contains(t, "[INST]")) {
    if (contains(t, "<<SYS>>")) return ChatFormat::Llama2;
    // "... + ' [/INST]'": a space before [/INST] is the v1 spelling.
    if (contains(t, " [/INST]")) return ChatFormat::MistralV1;
    // "'[INST]' + message": no space after [INST] is Tekken's.
    if (contains(t, "[INST]'") || contains(t, "[INST]\"")) return ChatFormat::MistralV3Tekken;
    return ChatFormat::MistralV3;
  }
  return std::nullopt;
}

ChatTemplate ChatTemplate::for_vocab(const Vocab& vocab, const std::string& override_name) {
  if (!override_name.empty()) {
    auto f = parse_chat_format(override_name);
    if (!f)
      throw Error("unknown chat template '" + override_name + "'; known: " + chat_format_names());
    return ChatTemplate(*f);
  }
  return ChatTemplate(detect_chat_format(vocab.chat_template).value_or(ChatFormat::ChatML));
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  for (const ChatMessage& m : messages) check_role(m);
  switch (format_) {
    case ChatFormat::ChatML: return apply_chatml(messages, add_generation_prompt);
    case ChatFormat::Llama3: return apply_llama3(messages, add_generation_prompt);
    case ChatFormat::Llama2: return apply_llama2(messages);
    case ChatFormat::MistralV7: return apply_mistral_v7(messages);
    case ChatFormat::MistralV1:
    case ChatFormat::MistralV3:
    case ChatFormat::MistralV3Tekken: return apply_mistral(messages, format_);
  }
  return {};
}

}  // namespace ms
