#include "grammar/token_mask.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <numeric>

#include "util/error.h"

namespace ms::grammar {

// The trie is built breadth-first from the pieces sorted by bytes, so each
// node's children are contiguous and in byte order.
TokenMask::TokenMask(const std::vector<std::string>& pieces, const std::vector<bool>& eog)
    : n_vocab_(static_cast<int32_t>(pieces.size())) {
  if (eog.size() != pieces.size()) throw Error("token mask: " + std::to_string(eog.size()) + " end-of-generation flags for " + std::to_string(pieces.size()) + " tokens");
  offset_.reserve(pieces.size() + 1);
  eog_.reserve(pieces.size());
  for (size_t id = 0; id < pieces.size(); ++id) {
    offset_.push_back(static_cast<uint32_t>(bytes_.size()));
    bytes_ += pieces[id];
    eog_.push_back(eog[id] ? 1 : 0);
    if (bytes_.size() > UINT32_MAX) throw Error("token mask: the vocabulary's bytes exceed 4 GiB");
  }
  offset_.push_back(static_cast<uint32_t>(bytes_.size()));
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n_vocab_; ++id) {
    if (eog[static_cast<size_t>(id)]) eog_ids_.push_back(id);
    else if (!pieces[static_cast<size_t>(id)].empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pieces[static_cast<size_t>(a)] < pieces[static_cast<size_t>(b)] || (pieces[static_cast<size_t>(a)] == pieces[static_cast<size_t>(b)] && a < b);
  });
  // Each node covers a run [lo, hi) of `order` sharing its prefix of length depth.
  struct Span { uint32_t node; size_t lo, hi, depth; };
  nodes_.push_back(Node{});
  std::vector<Span> level{{0, 0, order.size(), 0}};
  while (!level.empty()) {
    std::vector<Span> next;
    for (const Span& sp : level) {
      size_t i = sp.lo;
      // Tokens whose piece ends exactly at this depth end at this node.
      nodes_[sp.node].first_token = static_cast<uint32_t>(token_ids_.size());
      while (i < sp.hi && pieces[static_cast<size_t>(order[i])].size() == sp.depth) token_ids_.push_back(order[i++]);
      nodes_[sp.node].n_tokens = static_cast<uint32_t>(token_ids_.size()) - nodes_[sp.node].first_token;
      nodes_[sp.node].first_child = static_cast<uint32_t>(nodes_.size());
      while (i < sp.hi) {
        const uint8_t b = static_cast<uint8_t>(pieces[static_cast<size_t>(order[i])][sp.depth]);
        size_t j = i;
        while (j < sp.hi && static_cast<uint8_t>(pieces[static_cast<size_t>(order[j])][sp.depth]) == b) ++j;
        Node child;
        child.byte = b;
        next.push_back({static_cast<uint32_t>(nodes_.size()), i, j, sp.depth + 1});
        nodes_.push_back(child);
        ++nodes_[sp.node].n_children;
        i = j;
      }
    }
    level = std::move(next);
  }
}

StepMemo::StepMemo(const Matcher& m) : m_(m) { intern(Matcher::State(m.state())); }

int32_t StepMemo::intern(Matcher::State&& st) {
  auto [it, fresh] = ids_.emplace(std::move(st), static_cast<int32_t>(states_.size()));
  if (fresh) {
    states_.push_back(it->first);
    next_.push_back(m_.next_bytes(it->first));
  }
  return it->second;
}

int32_t StepMemo::step(int32_t from, uint8_t byte) {
  if (!next_[static_cast<size_t>(from)][byte]) return -1;
  const uint64_t key = static_cast<uint64_t>(from) * 256 + byte;
  if (auto it = steps_.find(key); it != steps_.end()) return it->second;
  m_.step(states_[static_cast<size_t>(from)], byte, scratch_);
  const int32_t to = scratch_.empty() ? -1 : intern(std::move(scratch_));
  scratch_ = Matcher::State{};
  steps_.emplace(key, to);
  return to;
}

bool TokenMask::allows(const Matcher& m, StepMemo& memo, int32_t id) const {
  if (id < 0 || id >= n_vocab_) return false;
  if (eog_[static_cast<size_t>(id)]) return Matcher::can_end(m.state());
  const uint32_t b = offset_[static_cast<size_t>(id)], e = offset_[static_cast<size_t>(id) + 1];
  if (b == e) return false;  // no bytes: a control token
  int32_t at = 0;
  for (uint32_t i = b; i < e && at >= 0; ++i) at = memo.step(at, static_cast<uint8_t>(bytes_[i]));
  return at >= 0;
}

size_t TokenMask::fill(const Matcher& m, std::vector<uint8_t>& allowed) const {
  const uint64_t g = m.grammar().serial;
  for (Cached& c : cache_) {
    if (c.grammar == g && c.state == m.state()) {
      c.used = ++clock_;
      allowed = c.allowed;
      return c.count;
    }
  }
  const size_t n = walk(m, allowed);
  Cached* slot = nullptr;
  if (cache_.size() < kCacheEntries) {
    slot = &cache_.emplace_back();
  } else {
    slot = &cache_[0];
    for (Cached& c : cache_)
      if (c.used < slot->used) slot = &c;
  }
  slot->grammar = g;
  slot->state = m.state();
  slot->allowed = allowed;
  slot->count = n;
  slot->used = ++clock_;
  return n;
}

// The walk takes its steps through a StepMemo: inside a string most bytes
// lead back to the same state, so a walk over the 300k-node trie of a 150k
// vocabulary is mostly table look-ups, not matcher steps.
size_t TokenMask::walk(const Matcher& m, std::vector<uint8_t>& allowed) const {
  allowed.assign(static_cast<size_t>(n_vocab_), 0);
  size_t n = 0;
  if (Matcher::can_end(m.state()))
    for (int32_t id : eog_ids_) allowed[static_cast<size_t>(id)] = 1, ++n;
  StepMemo memo(m);
  // Depth-first over the trie; each frame: a node and the state after its prefix.
  std::vector<std::pair<uint32_t, int32_t>> todo{{0, 0}};
  while (!todo.empty()) {
    const auto [node_id, sid] = todo.back();
    todo.pop_back();
    const Node& node = nodes_[node_id];
    if (node_id != 0)
      for (uint32_t k = 0; k < node.n_tokens; ++k) allowed[static_cast<size_t>(token_ids_[node.first_token + k])] = 1, ++n;
    for (uint32_t c = node.first_child; c < node.first_child + node.n_children; ++c) {
      const int32_t to = memo.step(sid, nodes_[c].byte);
      if (to >= 0) todo.push_back({c, to});
    }
  }
  return n;
}

}  // namespace ms::grammar
