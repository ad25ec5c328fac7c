// The tokenizer of a model: text -> token ids and back, from a GGUF's
// vocabulary (byte-level BPE or SentencePiece BPE).
//
//   auto tok = Tokenizer::from_gguf(file);
//   std::vector<int32_t> ids = tok.encode("Hello", /*add_special=*/true, /*parse_special=*/true);
//   std::string text = tok.decode(ids);
//
// Thread-safe: encode/decode may be called concurrently.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ms {

class GgufFile;

class Tokenizer {
 public:
  // Throws ms::Error for an invalid vocabulary or an unsupported pre-tokenizer.
  explicit Tokenizer(Vocab vocab);
  static Tokenizer from_gguf(const GgufFile& file);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // `add_special`: add BOS/EOS as the vocabulary asks (add_bos/add_eos).
  // `parse_special`: text of control tokens ("<|im_start|>") becomes those
  // tokens; otherwise it is tokenized as plain text. User-defined tokens are
  // always recognised.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const;

  // The bytes of one token. Control/unknown/unused tokens give their text
  // only with `render_special`, else "". Byte tokens give their byte, so a
  // piece may be part of a UTF-8 character (see StreamDecoder).
  std::string token_to_piece(int32_t id, bool render_special = true) const;

  // The text of a sequence. For SentencePiece vocabularies that add a space
  // prefix, the one leading space of the first piece is removed.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  // End of generation: EOS, EOT, EOM and the end-of-turn control tokens of
  // known chat formats (<|im_end|>, <|eot_id|>, <|endoftext|>, ...).
  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;

  // Id of the token whose text (as stored, control tokens included, or as
  // raw bytes for byte-level normal tokens) is `text`, or -1.
  int32_t find_token(std::string_view text) const;

  const Vocab& vocab() const;
  int32_t n_tokens() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  // The effective end-of-turn token: EOT, else EOS.
  int32_t eot_id() const;
  // The canonical name of the pre-tokenizer ("gpt2", "llama3", "qwen2",
  // "qwen35", "gpt4o"), or "spm" for SentencePiece.
  const char* pre_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms
