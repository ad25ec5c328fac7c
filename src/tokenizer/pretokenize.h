// Pre-tokenization of byte-level BPE vocabularies: the regex that cuts text
// into words before merges, chosen by `tokenizer.ggml.pre`, plus the
// per-type options that come with it (Unicode NFC first, whole-word lookup).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

struct PreTokenizerSpec {
  const char* name;    // canonical name: gpt2, llama3, qwen2, qwen35, gpt4o
  const char* published;  // the Split regex as published in the models' tokenizer.json
  const char* regex;      // what we compile: the same, with "(?i:'s|...)" spelled out
                          // in ASCII (as the reference implementations do), so
                          // that e.g. U+017F ſ does not match 's'.
  bool nfc;            // the HF tokenizer normalises text to NFC first
  bool ignore_merges;  // a word that is itself a token is emitted whole (Llama 3)
};

// The spec for a `tokenizer.ggml.pre` value ("" and "default" mean gpt2;
// aliases such as "llama-bpe" are accepted). Throws ms::Error listing the
// supported values for anything else.
const PreTokenizerSpec& pre_tokenizer_spec(const std::string& pre);
// "gpt2, llama3, qwen2, qwen35, gpt4o" (with aliases), for messages.
std::string supported_pre_tokenizers();

// A compiled (JIT where available) pre-tokenizer regex. Thread-safe: split()
// keeps its scratch state per call.
class PreTokenizer {
 public:
  explicit PreTokenizer(const std::string& regex);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` to `out`, as views into `text`; their
  // concatenation is `text`. Text the regex does not match becomes words of
  // its own, and each byte of an invalid UTF-8 sequence is a word by itself.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms
