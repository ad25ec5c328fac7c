#include "grammar/token_mask.h"

#include <algorithm>
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

// The walk interns the states it meets and remembers each (state, byte)
// step: inside a string most bytes lead back to the same state, so a step
// over the 300k-node trie of a 150k vocabulary is mostly table look-ups,
// not matcher steps.
size_t TokenMask::walk(const Matcher& m, std::vector<uint8_t>& allowed) const {
  allowed.assign(static_cast<size_t>(n_vocab_), 0);
  size_t n = 0;
  if (Matcher::can_end(m.state()))
    for (int32_t id : eog_ids_) allowed[static_cast<size_t>(id)] = 1, ++n;
  std::vector<Matcher::State> states;
  std::vector<ByteSet> next_bytes;
  std::map<Matcher::State, int32_t> ids;
  std::unordered_map<uint64_t, int32_t> steps;  // state * 256 + byte -> state, or -1: refused
  auto intern = [&](Matcher::State&& st) {
    auto [it, fresh] = ids.emplace(std::move(st), static_cast<int32_t>(states.size()));
    if (fresh) {
      states.push_back(it->first);
      next_bytes.push_back(m.next_bytes(it->first));
    }
    return it->second;
  };
  intern(Matcher::State(m.state()));
  // Depth-first over the trie; each frame: a node and the state after its prefix.
  std::vector<std::pair<uint32_t, int32_t>> todo{{0, 0}};
  Matcher::State next;
  while (!todo.empty()) {
    const auto [node_id, sid] = todo.back();
    todo.pop_back();
    const Node& node = nodes_[node_id];
    if (node_id != 0)
      for (uint32_t k = 0; k < node.n_tokens; ++k) allowed[static_cast<size_t>(token_ids_[node.first_token + k])] = 1, ++n;
    for (uint32_t c = node.first_child; c < node.first_child + node.n_children; ++c) {
      const uint8_t b = nodes_[c].byte;
      if (!next_bytes[static_cast<size_t>(sid)][b]) continue;
      const uint64_t key = static_cast<uint64_t>(sid) * 256 + b;
      auto it = steps.find(key);
      int32_t to;
      if (it != steps.end()) {
        to = it->second;
      } else {
        m.step(states[static_cast<size_t>(sid)], b, next);
        to = next.empty() ? -1 : intern(std::move(next));
        next = Matcher::State{};
        steps.emplace(key, to);
      }
      if (to >= 0) todo.push_back({c, to});
    }
  }
  return n;
}

}  // namespace ms::grammar
