// Substring search in time linear in the text and the pattern, for text that
// a file or a client controls (chat templates search template-built strings
// for template-built strings). std::string::find compares the pattern at
// every position, so 'a'*N searched for 'a'*M + 'b' costs N*M steps.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

// Knuth-Morris-Pratt over one pattern: prepared once, then searched from any
// position any number of times (replace and split walk one text with it).
class TextSearch {
 public:
  explicit TextSearch(std::string pattern);

  // The first occurrence at or after `from`, or npos. An empty pattern is
  // found at `from` (where from <= text.size()), as std::string::find.
  size_t find(std::string_view text, size_t from = 0) const;

  // The length of the longest suffix of `text` that is a proper prefix of
  // the pattern: how much of a text's end could still become a match once
  // more text follows (a stop string split across generated pieces).
  size_t pending_prefix(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  // border_[i]: the length of the longest proper prefix of pattern[0..i]
  // that is also its suffix.
  std::vector<size_t> border_;
};

// One search: the first occurrence of `pattern` in `text` at or after `from`.
size_t find_text(std::string_view text, std::string_view pattern, size_t from = 0);

}  // namespace ms
