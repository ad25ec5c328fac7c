#include "tokenizer/special.h"

#include <algorithm>
#include <cstring>

namespace ms {

SpecialSplitter::SpecialSplitter(const Vocab& v) {
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const TokenType t = v.types[id];
    const bool control = t == TokenType::Control || t == TokenType::Unknown;
    if (!control && t != TokenType::UserDefined) continue;
    if (v.tokens[id].empty()) continue;
    entries_.push_back({v.tokens[id], static_cast<int32_t>(id), control});
  }
  std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    const auto fa = static_cast<uint8_t>(a.text[0]), fb = static_cast<uint8_t>(b.text[0]);
    if (fa != fb) return fa < fb;
    return a.text.size() > b.text.size();
  });
  size_t e = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    first_byte_begin_[b] = static_cast<uint32_t>(e);
    while (e < entries_.size() && static_cast<uint8_t>(entries_[e].text[0]) == b) ++e;
  }
  first_byte_begin_[256] = static_cast<uint32_t>(entries_.size());
}

void SpecialSplitter::split(std::string_view text, bool parse_control,
                            std::vector<Fragment>& out) const {
  size_t text_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<uint8_t>(text[i]);
    const Entry* hit = nullptr;
    for (uint32_t k = first_byte_begin_[b]; k < first_byte_begin_[b + 1]; ++k) {
      const Entry& e = entries_[k];
      if (e.control && !parse_control) continue;
      if (e.text.size() <= text.size() - i && std::memcmp(e.text.data(), text.data() + i, e.text.size()) == 0) {
        hit = &e;  // entries are longest first: the first hit is the longest
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > text_start) out.push_back({text.substr(text_start, i - text_start), -1});
    out.push_back({text.substr(i, hit->text.size()), hit->id});
    i += hit->text.size();
    text_start = i;
  }
  if (text.size() > text_start) out.push_back({text.substr(text_start), -1});
}

}  // namespace ms
