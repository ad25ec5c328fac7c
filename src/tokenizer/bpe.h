// Byte-level BPE (GPT-2 style): a word's bytes are merged pairwise, always
// the pair whose merge has the lowest rank first (leftmost on ties), until no
// ranked pair is left.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/text_map.h"
#include "tokenizer/vocab.h"

namespace ms {

// GPT-2's reversible byte <-> printable-unicode mapping, in which byte-level
// vocabularies store their tokens (0x20 ' ' is "Ġ", 0x0A is "Ċ", ...).
std::string byte_level_encode(std::string_view bytes);
// Inverse of byte_level_encode; false when `text` holds a character outside
// the mapping (then `out` is unspecified).
bool byte_level_decode(std::string_view text, std::string& out);

class BpeModel {
 public:
  // `ignore_merges`: a word that is a token as a whole is emitted as that
  // token without merging (the Llama 3 tokenizer's behaviour).
  BpeModel(const Vocab& vocab, bool ignore_merges);

  // Appends the ids of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // Raw bytes of a token, as decoding shows it (normal tokens decoded from
  // the byte-level form; other tokens as stored).
  const std::string& token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  // Id of the normal token whose raw bytes are `bytes`, or -1.
  int32_t find(std::string_view bytes) const { return find_id(by_bytes_, bytes); }
  size_t n_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::vector<std::string> bytes_;
  TextToId by_bytes_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_token_[256];
  int32_t unk_id_ = -1;
  bool ignore_merges_ = false;

  // Words repeat a lot in real text; remember their ids (bounded).
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace ms
