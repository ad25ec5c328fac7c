#include "tokenizer/bpe.h"

#include <array>
#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace ms {

namespace {

// GPT-2's mapping: bytes that are printable Latin-1 characters map to
// themselves, the other 68 bytes to U+0100.. in byte order.
struct ByteLevelTables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  ByteLevelTables() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_cp[b] = printable ? b : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

constexpr size_t kCacheMaxWords = 1 << 16;

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8::append(out, tables().byte_to_cp[b]);
  return out;
}

bool byte_level_decode(std::string_view text, std::string& out) {
  out.clear();
  const auto& map = tables().cp_to_byte;
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = utf8::valid_char_length(text.substr(i));
    if (n == 0) return false;
    uint32_t cp = static_cast<uint8_t>(text[i]);
    if (n > 1) {
      cp &= 0xFFu >> (n + 1);
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3F);
    }
    auto it = map.find(cp);
    if (it == map.end()) return false;
    out.push_back(static_cast<char>(it->second));
    i += n;
  }
  return true;
}

BpeModel::BpeModel(const Vocab& v, bool ignore_merges) : ignore_merges_(ignore_merges) {
  unk_id_ = v.unk_id;
  const size_t n = v.tokens.size();
  bytes_.resize(n);
  std::string raw;
  for (size_t id = 0; id < n; ++id) {
    const TokenType t = v.types[id];
    const bool mergeable = t == TokenType::Normal || t == TokenType::Byte || t == TokenType::Undefined;
    if (mergeable && byte_level_decode(v.tokens[id], raw)) {
      bytes_[id] = raw;
      by_bytes_.emplace(raw, static_cast<int32_t>(id));  // the first id wins on duplicates
    } else {
      bytes_[id] = v.tokens[id];  // control / user-defined text, or a non-byte-level token
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_token_[b] = find(std::string_view(&c, 1));
  }

  merges_.reserve(v.merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < v.merges.size(); ++rank) {
    const std::string& m = v.merges[rank];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) continue;  // validate() rejects these already
    if (!byte_level_decode(std::string_view(m).substr(0, sp), left) ||
        !byte_level_decode(std::string_view(m).substr(sp + 1), right))
      continue;
    const int32_t a = find(left), b = find(right), r = find(left + right);
    // A merge whose parts or result are not tokens can never apply.
    if (a < 0 || b < 0 || r < 0) continue;
    merges_.emplace(pair_key(a, b), Merge{static_cast<int32_t>(rank), r});
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t whole = find(word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheMaxWords) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

// Symbols are a linked list over the word's bytes; candidate pairs wait in a
// min-heap by (rank, position). A popped candidate is applied only if both
// symbols are still what they were when it was pushed, so stale entries are
// skipped instead of removed: O(n log n) per word.
void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
  };
  struct Cand {
    int32_t rank, left, right, left_id, right_id, result;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Sym> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    int32_t id = byte_token_[static_cast<uint8_t>(word[static_cast<size_t>(i)])];
    if (id < 0) {
      if (unk_id_ < 0) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", static_cast<uint8_t>(word[static_cast<size_t>(i)]));
        throw Error(std::string("byte ") + hex +
                    " has no token in this byte-level vocabulary and there is no unknown token; "
                    "the vocabulary is incomplete");
      }
      id = unk_id_;
    }
    sym[static_cast<size_t>(i)] = {id, i - 1, i + 1 < n ? i + 1 : -1};
  }
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  auto push_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    auto it = merges_.find(pair_key(sym[static_cast<size_t>(l)].id, sym[static_cast<size_t>(r)].id));
    if (it == merges_.end()) return;
    heap.push({it->second.rank, l, r, sym[static_cast<size_t>(l)].id, sym[static_cast<size_t>(r)].id,
               it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i, i + 1);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& l = sym[static_cast<size_t>(c.left)];
    if (l.id != c.left_id || l.next != c.right) continue;
    Sym& r = sym[static_cast<size_t>(c.right)];
    if (r.id != c.right_id) continue;
    l.id = c.result;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = c.left;
    r.id = -1;  // dead
    r.prev = r.next = -1;
    push_pair(l.prev, c.left);
    push_pair(c.left, l.next);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = sym[static_cast<size_t>(i)].next) out.push_back(sym[static_cast<size_t>(i)].id);
}

}  // namespace ms
