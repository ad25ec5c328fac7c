// Generated tokens to text for a reader (`moestream run`): through
// StreamDecoder, or, for a chat with a gpt-oss (harmony) model, through
// HarmonyParser, so that the answer, the reasoning and tool calls come apart
// and no channel markup is printed.
#pragma once
#include <cstdint>
#include <optional>

#include "tokenizer/harmony.h"
#include "tokenizer/stream_decoder.h"

namespace ms {

class Tokenizer;

class ReplyDecoder {
 public:
  // `chat`: the prompt was a chat template's (harmony parsing applies only
  // then, and only where the vocabulary has the harmony markers).
  ReplyDecoder(const Tokenizer& tok, bool chat);
  // Out::content is the answer (all the text, without harmony).
  HarmonyParser::Out push(int32_t id);
  HarmonyParser::Out flush();
  bool harmony() const { return harmony_.has_value(); }

 private:
  StreamDecoder dec_;
  std::optional<HarmonyParser> harmony_;
};

}  // namespace ms
