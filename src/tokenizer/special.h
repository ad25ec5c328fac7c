// Splitting text on the texts of special tokens before it is tokenized, so
// "<|im_start|>user" becomes the token <|im_start|> and the text "user".
// Control (and unknown) tokens are recognised only when parsing special
// tokens is asked for; user-defined tokens always are. At each position the
// longest matching token wins, and the leftmost position first.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ms {

struct Fragment {
  std::string_view text;  // the text (for a special token: its text too)
  int32_t token = -1;     // >= 0: this fragment is that special token
};

class SpecialSplitter {
 public:
  explicit SpecialSplitter(const Vocab& vocab);

  // Appends fragments covering all of `text` in order; text fragments are
  // never empty.
  void split(std::string_view text, bool parse_control, std::vector<Fragment>& out) const;

  size_t n_special() const { return entries_.size(); }

 private:
  struct Entry {
    std::string_view text;  // into the Vocab's strings, which outlive us via the Tokenizer
    int32_t id;
    bool control;  // needs parse_control
  };
  std::vector<Entry> entries_;                // sorted by first byte, then longest first
  std::array<uint32_t, 257> first_byte_begin_{};  // entries_ range per first byte
};

}  // namespace ms
