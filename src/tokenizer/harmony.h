// The "harmony" response format of gpt-oss (o200k_harmony vocabulary), read
// back from generated tokens. After the prompt's "<|start|>assistant" the
// model writes messages, each a header and a body:
//
//   <|channel|>analysis<|message|>THINKING<|end|>
//   <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
//
// or, to call a tool, a message with a recipient:
//
//   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>
//
// HarmonyParser splits that stream: the final channel (and recipient-less
// commentary, the preambles meant for the user) is the answer, the analysis
// channel is reasoning, a message with a recipient is a tool call, and no
// header markup ever reaches the text. It works on token ids, not text: the
// markers are control tokens, which decode to nothing.
//
// Generation itself stops at <|return|> and <|call|> (Tokenizer::is_eog), so
// the parser normally never sees them; it handles them anyway.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"

namespace ms {

class Tokenizer;

// Ids of the harmony markers in a vocabulary.
struct HarmonyMarkers {
  int32_t start = -1, end = -1, message = -1, channel = -1, constrain = -1, ret = -1, call = -1;
};

// The markers when the vocabulary is a harmony one (it has <|start|>,
// <|end|>, <|message|>, <|channel|> and <|return|> as control or
// user-defined tokens), else nullopt.
std::optional<HarmonyMarkers> harmony_markers(const Tokenizer& tok);

struct HarmonyToolCall {
  std::string recipient;     // as the header names it, e.g. "functions.get_weather"
  std::string content_type;  // after <|constrain|>, e.g. "json"; may be empty
  std::string arguments;     // the message body
};

class HarmonyParser {
 public:
  struct Out {
    std::string content, reasoning;
    std::vector<HarmonyToolCall> tool_calls;  // calls whose message ended
  };
  // Starts inside the header of an assistant message (the prompt ended with
  // "<|start|>assistant").
  HarmonyParser(const Tokenizer& tok, HarmonyMarkers markers);

  // Adds one generated token; returns the text (and finished tool calls) it
  // completes.
  Out push(int32_t id);
  // At the end of generation: what is still held (a tool call whose message
  // was cut off by <|call|> or the token limit comes out here).
  Out flush();

  // The channel of the message being written ("" in a header or when the
  // header named none).
  const std::string& channel() const { return channel_; }

  // A header longer than this (a model not writing harmony) is taken as text.
  static constexpr size_t kMaxHeaderBytes = 1024;

 private:
  enum class Where { Header, Body };
  void end_message(Out& out);
  void begin_body(Out& out);
  void route(Out& out, const std::string& text);

  HarmonyMarkers m_;
  StreamDecoder dec_;
  Where where_ = Where::Header;
  // Header parts: before <|channel|>, after it, after <|constrain|>.
  std::string head_, channel_text_, constrain_text_;
  int head_part_ = 0;  // 0, 1 (channel), 2 (constrain)
  std::string channel_, recipient_, content_type_;
  std::string call_args_;  // body of a message with a recipient
};

}  // namespace ms
