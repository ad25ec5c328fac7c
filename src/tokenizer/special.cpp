#include "tokenizer/special.h"

#include <algorithm>
#include <map>

namespace ms {

SpecialSplitter::SpecialSplitter(const Vocab& v) {
  // Built with maps, then laid out flat: each node's edges side by side.
  std::vector<std::map<uint8_t, uint32_t>> kids(1);
  std::vector<Node> nodes(1);
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const TokenType t = v.types[id];
    const bool control = t == TokenType::Control || t == TokenType::Unknown;
    if (!control && t != TokenType::UserDefined) continue;
    const std::string& text = v.tokens[id];
    if (text.empty()) continue;
    uint32_t at = 0;
    for (const char ch : text) {
      const auto b = static_cast<uint8_t>(ch);
      auto it = kids[at].find(b);
      if (it == kids[at].end()) {
        it = kids[at].emplace(b, static_cast<uint32_t>(nodes.size())).first;
        nodes.emplace_back();
        kids.emplace_back();
      }
      at = it->second;
    }
    // Ids rise through the loop: the first token of a text keeps it.
    if (nodes[at].any < 0) nodes[at].any = static_cast<int32_t>(id);
    if (!control && nodes[at].plain < 0) nodes[at].plain = static_cast<int32_t>(id);
    ++n_special_;
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    nodes[n].first_edge = static_cast<uint32_t>(edges_.size());
    nodes[n].n_edges = static_cast<uint32_t>(kids[n].size());
    for (const auto& [byte, c] : kids[n]) edges_.push_back({byte, c});
  }
  nodes_ = std::move(nodes);
}

uint32_t SpecialSplitter::child(uint32_t node, uint8_t byte) const {
  const Node& n = nodes_[node];
  const Edge* begin = edges_.data() + n.first_edge;
  const Edge* end = begin + n.n_edges;
  const Edge* e = std::lower_bound(begin, end, byte, [](const Edge& x, uint8_t b) { return x.byte < b; });
  return e != end && e->byte == byte ? e->child : 0;
}

void SpecialSplitter::split(std::string_view text, bool parse_control,
                            std::vector<Fragment>& out) const {
  size_t text_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    // The longest special token starting at i: walk the trie as far as the
    // text follows it, keeping the deepest node where an allowed token ends.
    int32_t hit = -1;
    size_t hit_len = 0;
    uint32_t at = 0;
    for (size_t j = i; j < text.size(); ++j) {
      at = child(at, static_cast<uint8_t>(text[j]));
      if (at == 0) break;
      const int32_t id = parse_control ? nodes_[at].any : nodes_[at].plain;
      if (id >= 0) {
        hit = id;
        hit_len = j + 1 - i;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > text_start) out.push_back({text.substr(text_start, i - text_start), -1});
    out.push_back({text.substr(i, hit_len), hit});
    i += hit_len;
    text_start = i;
  }
  if (text.size() > text_start) out.push_back({text.substr(text_start), -1});
}

}  // namespace ms
