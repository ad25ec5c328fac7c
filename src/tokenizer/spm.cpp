#include "tokenizer/spm.h"

#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace ms {

int parse_byte_piece(std::string_view t) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[static_cast<size_t>(k)];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string spm_escape_spaces(std::string_view text, bool add_prefix) {
  std::string out;
  out.reserve(text.size() + 8);
  if (add_prefix) out.append(kSpmSpace);
  for (char c : text) {
    if (c == ' ') out.append(kSpmSpace);
    else out.push_back(c);
  }
  return out;
}

SpmModel::SpmModel(const Vocab& v) : scores_(v.scores) {
  unk_id_ = v.unk_id;
  for (int b = 0; b < 256; ++b) byte_token_[b] = -1;
  if (scores_.size() != v.tokens.size()) scores_.assign(v.tokens.size(), 0.0f);
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const TokenType t = v.types[id];
    if (t == TokenType::Byte) {
      const int b = parse_byte_piece(v.tokens[id]);
      if (b >= 0 && byte_token_[b] < 0) byte_token_[b] = static_cast<int32_t>(id);
    } else if (t == TokenType::Normal || t == TokenType::Undefined) {
      pieces_.emplace(v.tokens[id], static_cast<int32_t>(id));  // the first id wins on duplicates
    }
  }
}

// Symbols are a linked list of byte ranges of `text`; candidate pairs wait in
// a heap by (score desc, position asc). A popped candidate applies only if
// both symbols still have the lengths recorded when it was pushed.
void SpmModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t start, len;  // bytes of text; len 0 = merged away
    int32_t prev, next;
  };
  struct Cand {
    float score;
    int32_t left, right, total_len;
    bool operator<(const Cand& o) const {  // max-heap: higher score, then lower position, on top
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::vector<Sym> sym;
  sym.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8::valid_char_length(text.substr(i));
    if (n == 0) n = 1;  // an invalid byte is a symbol of its own; it will fall back to <0xXX>
    const int32_t idx = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<int32_t>(i), static_cast<int32_t>(n), idx - 1, -1});
    if (idx > 0) sym[static_cast<size_t>(idx - 1)].next = idx;
    i += n;
  }
  std::priority_queue<Cand> heap;
  auto push_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const Sym& a = sym[static_cast<size_t>(l)];
    const Sym& b = sym[static_cast<size_t>(r)];
    const int32_t id = find(text.substr(static_cast<size_t>(a.start), static_cast<size_t>(a.len + b.len)));
    if (id < 0) return;
    heap.push({scores_[static_cast<size_t>(id)], l, r, a.len + b.len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push_pair(i, i + 1);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& l = sym[static_cast<size_t>(c.left)];
    Sym& r = sym[static_cast<size_t>(c.right)];
    if (l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.total_len) continue;
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = c.left;
    r.len = 0;
    push_pair(l.prev, c.left);
    push_pair(c.left, l.next);
  }
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const Sym& s = sym[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(static_cast<size_t>(s.start), static_cast<size_t>(s.len));
    const int32_t id = find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (unsigned char b : piece) {  // byte fallback
      if (byte_token_[b] >= 0) {
        out.push_back(byte_token_[b]);
      } else if (unk_id_ >= 0) {
        out.push_back(unk_id_);
      } else {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        throw Error(std::string("byte ") + hex +
                    " is not in this SentencePiece vocabulary (no <0xXX> token) and there is no "
                    "unknown token; the vocabulary is incomplete");
      }
    }
  }
}

}  // namespace ms
