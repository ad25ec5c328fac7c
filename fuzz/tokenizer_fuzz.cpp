// libFuzzer target: a client's text through the tokenizer, as serve
// tokenizes prompts: the byte-level BPE of `moestream gen`'s synthetic
// vocabulary (151936 tokens, ChatML control tokens) with Qwen2's
// pre-tokenizer (which normalizes to NFC first) and with Qwen3.5's (which
// does not), and a small SentencePiece vocabulary with byte fallback.
// Properties: no crash or hang; BPE's decode gives back the text it encoded
// (each stretch between special tokens in NFC where the pre-tokenizer
// normalizes); where the text is UTF-8, the stream decoder fed one id at a
// time gives the same. Input: byte 0 picks the vocabulary and whether
// control tokens' text is parsed; the rest is the text. Run by
// scripts/fuzz.sh (clang, ASan+UBSan).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/synthetic_vocab.h"
#include "tokenizer/special.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

ms::Vocab spm_vocab() {
  ms::Vocab v;
  v.kind = ms::VocabKind::SentencePiece;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {ms::TokenType::Unknown, ms::TokenType::Control, ms::TokenType::Control};
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    v.types.push_back(ms::TokenType::Byte);
  }
  for (const char* p : {"\xe2\x96\x81", "\xe2\x96\x81" "the", "th", "he", "e", "t", "h", "a", "\xe2\x96\x81" "a", "in", "ing",
                        "[INST]", "[/INST]", "\xe2\x96\x81\xe2\x96\x81"}) {
    v.tokens.push_back(p);
    v.types.push_back(ms::TokenType::Normal);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 0; i < v.scores.size(); ++i) v.scores[i] = -static_cast<float>(v.tokens[i].size()) * 0.1f;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const ms::Vocab qwen2 = ms::make_synthetic_vocab(151936);
  static const ms::Tokenizer bpe_nfc(qwen2);
  static const ms::Tokenizer bpe_raw([] {
    ms::Vocab v = qwen2;
    v.pre = "qwen35";
    return v;
  }());
  static const ms::SpecialSplitter splitter(qwen2);
  static const ms::Tokenizer spm(spm_vocab());
  const bool use_spm = (data[0] & 1) != 0;
  const bool parse_special = (data[0] & 2) != 0;
  const bool nfc = (data[0] & 4) != 0;
  const ms::Tokenizer& tok = use_spm ? spm : nfc ? bpe_nfc : bpe_raw;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);

  const std::vector<int32_t> ids = tok.encode(text, false, parse_special);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.n_tokens()) std::abort();
  if (use_spm) {
    (void)tok.decode(ids, true);
    return 0;
  }
  // Byte-level BPE loses nothing but what NFC normalizes.
  std::string expected;
  if (nfc) {
    std::vector<ms::Fragment> pieces;
    splitter.split(text, parse_special, pieces);
    for (const ms::Fragment& f : pieces) expected += f.token >= 0 ? std::string(f.text) : ms::utf8::nfc(f.text);
  } else {
    expected = text;
  }
  if (tok.decode(ids, true) != expected) std::abort();
  if (ms::utf8::valid_prefix_length(text) == text.size()) {
    ms::StreamDecoder::Options o;
    o.render_special = true;
    ms::StreamDecoder dec(tok, o);
    std::string streamed;
    for (int32_t id : ids) streamed += dec.push(id);
    streamed += dec.flush();
    if (streamed != expected) std::abort();
  }
  return 0;
}
