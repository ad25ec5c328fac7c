// Splitting text on the texts of special tokens before it is tokenized, so
// "<|im_start|>user" becomes the token <|im_start|> and the text "user".
// Control (and unknown) tokens are recognised only when parsing special
// tokens is asked for; user-defined tokens always are. At each position the
// longest matching token wins, and the leftmost position first.
// The tokens' texts sit in a byte trie, so a position costs at most the
// longest special token's length in steps, however many tokens share a
// prefix (gpt-oss has a thousand "<|reserved_...|>" ones; a hostile file
// may have far more).
#pragma once
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

  size_t n_special() const { return n_special_; }

 private:
  // A trie node: the token whose text ends here (the lowest id where several
  // tokens share a text, as the vocabulary's order decides), once among all
  // special tokens and once among those allowed without parse_control.
  struct Node {
    uint32_t first_edge = 0, n_edges = 0;  // edges_[first_edge, +n_edges), sorted by byte
    int32_t any = -1, plain = -1;
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  uint32_t child(uint32_t node, uint8_t byte) const;  // 0: none (the root is never a child)

  std::vector<Node> nodes_;  // nodes_[0] is the root
  std::vector<Edge> edges_;
  size_t n_special_ = 0;
};

}  // namespace ms
