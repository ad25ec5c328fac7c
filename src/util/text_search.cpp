#include "util/text_search.h"

namespace ms {

TextSearch::TextSearch(std::string pattern) : pattern_(std::move(pattern)), border_(pattern_.size(), 0) {
  size_t k = 0;
  for (size_t i = 1; i < pattern_.size(); ++i) {
    while (k > 0 && pattern_[i] != pattern_[k]) k = border_[k - 1];
    if (pattern_[i] == pattern_[k]) ++k;
    border_[i] = k;
  }
}

size_t TextSearch::find(std::string_view text, size_t from) const {
  const size_t m = pattern_.size();
  if (from > text.size()) return std::string_view::npos;
  if (m == 0) return from;
  // One byte: memchr is already linear and faster.
  if (m == 1) return text.find(pattern_[0], from);
  size_t k = 0;  // pattern bytes matched so far
  for (size_t i = from; i < text.size(); ++i) {
    while (k > 0 && text[i] != pattern_[k]) k = border_[k - 1];
    if (text[i] == pattern_[k]) ++k;
    if (k == m) return i + 1 - m;
  }
  return std::string_view::npos;
}

size_t TextSearch::pending_prefix(std::string_view text) const {
  const size_t m = pattern_.size();
  if (m == 0) return 0;
  size_t k = 0;
  for (char c : text) {
    while (k > 0 && c != pattern_[k]) k = border_[k - 1];
    if (c == pattern_[k]) ++k;
    if (k == m) k = border_[m - 1];  // a whole match: keep its longest border
  }
  return k;
}

size_t find_text(std::string_view text, std::string_view pattern, size_t from) {
  // Short patterns cost at most a few compares per position: keep the
  // library's (vectorised) search and skip building a table.
  if (pattern.size() <= 4) return text.find(pattern, from);
  return TextSearch(std::string(pattern)).find(text, from);
}

}  // namespace ms
