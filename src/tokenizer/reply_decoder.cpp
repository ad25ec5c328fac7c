#include "tokenizer/reply_decoder.h"

#include "tokenizer/tokenizer.h"

namespace ms {

ReplyDecoder::ReplyDecoder(const Tokenizer& tok, bool chat) : dec_(tok) {
  if (!chat) return;
  if (const auto markers = harmony_markers(tok)) harmony_.emplace(tok, *markers);
}

HarmonyParser::Out ReplyDecoder::push(int32_t id) {
  if (harmony_) return harmony_->push(id);
  HarmonyParser::Out out;
  out.content = dec_.push(id);
  return out;
}

HarmonyParser::Out ReplyDecoder::flush() {
  if (harmony_) return harmony_->flush();
  HarmonyParser::Out out;
  out.content = dec_.flush();
  return out;
}

}  // namespace ms
