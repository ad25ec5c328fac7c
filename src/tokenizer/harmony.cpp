#include "tokenizer/harmony.h"

#include <string_view>

#include "tokenizer/tokenizer.h"

namespace ms {

namespace {

// A marker token: found by its text and not ordinary text (a harmony GGUF
// stores them as control tokens; llama.cpp retypes some as user-defined).
int32_t marker_id(const Tokenizer& tok, std::string_view text) {
  const int32_t id = tok.find_token(text);
  if (id < 0) return -1;
  const TokenType t = tok.vocab().types[static_cast<size_t>(id)];
  return t == TokenType::Control || t == TokenType::UserDefined ? id : -1;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The whitespace-separated words of s.
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    const size_t b = i;
    while (i < s.size() && !is_space(s[i])) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

}  // namespace

std::optional<HarmonyMarkers> harmony_markers(const Tokenizer& tok) {
  HarmonyMarkers m;
  m.start = marker_id(tok, "<|start|>");
  m.end = marker_id(tok, "<|end|>");
  m.message = marker_id(tok, "<|message|>");
  m.channel = marker_id(tok, "<|channel|>");
  m.constrain = marker_id(tok, "<|constrain|>");
  m.ret = marker_id(tok, "<|return|>");
  m.call = marker_id(tok, "<|call|>");
  if (m.start < 0 || m.end < 0 || m.message < 0 || m.channel < 0 || m.ret < 0) return std::nullopt;
  return m;
}

HarmonyParser::HarmonyParser(const Tokenizer& tok, HarmonyMarkers markers) : m_(markers), dec_(tok) {}

void HarmonyParser::route(Out& out, const std::string& text) {
  if (text.empty()) return;
  if (!recipient_.empty()) call_args_ += text;
  else if (channel_ == "analysis") out.reasoning += text;
  else out.content += text;  // final, commentary preambles, or no channel named
}

// Leaves the current message (or header): a body's held bytes are routed, a
// tool call's message is complete; a header's fragments are dropped.
void HarmonyParser::end_message(Out& out) {
  if (where_ == Where::Body) {
    route(out, dec_.flush());
    if (!recipient_.empty()) out.tool_calls.push_back({recipient_, content_type_, std::move(call_args_)});
  } else {
    dec_.flush();
  }
  where_ = Where::Header;
  head_.clear(), channel_text_.clear(), constrain_text_.clear();
  head_part_ = 0;
  channel_.clear(), recipient_.clear(), content_type_.clear(), call_args_.clear();
}

// <|message|>: the header is complete; read its channel, recipient
// ("to=functions.x", before or after the channel) and content type.
void HarmonyParser::begin_body(Out&) {
  const std::vector<std::string> head = words(head_), chan = words(channel_text_);
  for (const auto* part : {&head, &chan})
    for (const std::string& w : *part)
      if (w.rfind("to=", 0) == 0 && recipient_.empty()) recipient_ = w.substr(3);
  for (const std::string& w : chan) {
    if (w.rfind("to=", 0) == 0) continue;
    if (channel_.empty()) channel_ = w;
    else if (content_type_.empty()) content_type_ = w;  // "commentary json" (no <|constrain|>)
  }
  const std::vector<std::string> constrain = words(constrain_text_);
  if (!constrain.empty()) content_type_ = constrain[0];
  where_ = Where::Body;
}

HarmonyParser::Out HarmonyParser::push(int32_t id) {
  Out out;
  auto header_part = [&]() -> std::string& {
    return head_part_ == 0 ? head_ : head_part_ == 1 ? channel_text_ : constrain_text_;
  };
  if (id == m_.start || id == m_.end || id == m_.ret || id == m_.call) {
    end_message(out);
    return out;
  }
  if (id == m_.channel) {
    // In a body, the model skipped "<|end|><|start|>assistant": a new message.
    if (where_ == Where::Body) end_message(out);
    else header_part() += dec_.flush();
    head_part_ = 1;
    return out;
  }
  if (id == m_.constrain || id == m_.message) {
    if (where_ == Where::Body) return out;  // stray markup in a body: dropped
    header_part() += dec_.flush();
    if (id == m_.constrain) head_part_ = 2;
    else begin_body(out);
    return out;
  }
  const std::string text = dec_.push(id);
  if (where_ == Where::Body) {
    route(out, text);
    return out;
  }
  header_part() += text;
  if (head_.size() + channel_text_.size() + constrain_text_.size() > kMaxHeaderBytes) {
    // No <|message|> in sight: the model is not writing harmony. Its text is the answer.
    const std::string held = head_ + channel_text_ + constrain_text_;
    head_.clear(), channel_text_.clear(), constrain_text_.clear();
    channel_.clear(), recipient_.clear();
    where_ = Where::Body;
    route(out, held);
  }
  return out;
}

HarmonyParser::Out HarmonyParser::flush() {
  Out out;
  end_message(out);
  return out;
}

}  // namespace ms
