// Which tokens of a vocabulary may come next under a grammar: the mask
// constrained sampling applies before it samples (engine/sampler.h).
//
// A token is allowed when the matcher accepts all of its bytes from the
// current state. The vocabulary's byte strings are kept in a trie, so the
// walk follows each shared prefix once and stops at the first byte the
// grammar refuses: a step costs the trie nodes reachable under the grammar,
// far less than one full walk per token when most are refused, and at
// worst the trie's size (bounded work per step). End-of-generation tokens
// are allowed exactly where the matcher can end; tokens with no bytes
// (control tokens) never are.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace ms::grammar {

// The matcher's steps from one state, each (state, byte) step taken once:
// tokens that share bytes share their steps (inside a string most bytes lead
// to the same state). Valid while the matcher it was made from is unchanged.
class StepMemo {
 public:
  explicit StepMemo(const Matcher& m);
  // The state after `byte` from state `from` (0: the matcher's own), or -1
  // where the grammar refuses the byte.
  int32_t step(int32_t from, uint8_t byte);
  // The bytes state `id` accepts next.
  const ByteSet& next_bytes(int32_t id) const { return next_[static_cast<size_t>(id)]; }

 private:
  int32_t intern(Matcher::State&& st);
  const Matcher& m_;
  std::vector<Matcher::State> states_;
  std::vector<ByteSet> next_;
  std::map<Matcher::State, int32_t> ids_;
  std::unordered_map<uint64_t, int32_t> steps_;  // state * 256 + byte -> state, or -1: refused
  Matcher::State scratch_;
};

class TokenMask {
 public:
  // `pieces[id]`: the bytes token `id` produces (empty for control tokens);
  // `eog[id]`: whether it ends generation.
  TokenMask(const std::vector<std::string>& pieces, const std::vector<bool>& eog);

  int32_t n_vocab() const { return n_vocab_; }
  size_t trie_nodes() const { return nodes_.size(); }

  // allowed[id] = 1 where token id may follow the matcher's input, else 0
  // (resized to n_vocab). Returns how many are allowed.
  //
  // The last few masks are kept, keyed by the grammar and the matcher's
  // exact state: inside a string or a run of digits the state after each
  // token is often the same, and its mask is then a copy. Not thread-safe
  // (the scheduler's worker is its one user).
  size_t fill(const Matcher& m, std::vector<uint8_t>& allowed) const;

  // fill()'s answer for one token (its bytes' steps, not a walk of the
  // vocabulary): for samplers that ask only their best candidates. memo:
  // made from the same matcher state, shared by the tokens asked.
  bool allows(const Matcher& m, StepMemo& memo, int32_t id) const;

 private:
  struct Node {
    uint32_t first_child = 0;  // children are nodes_[first_child .. first_child + n_children)
    uint32_t n_children = 0;
    uint8_t byte = 0;          // the byte leading here from the parent
    uint32_t first_token = 0;  // tokens ending here: token_ids_[first_token .. + n_tokens)
    uint32_t n_tokens = 0;
  };
  int32_t n_vocab_ = 0;
  std::vector<Node> nodes_;  // nodes_[0]: the root (the empty prefix)
  std::vector<int32_t> token_ids_;
  std::vector<int32_t> eog_ids_;
  // Every token's bytes, for allows(): token id's are
  // bytes_[offset_[id] .. offset_[id + 1]); eog_[id]: it ends generation.
  std::string bytes_;
  std::vector<uint32_t> offset_;
  std::vector<uint8_t> eog_;
  size_t walk(const Matcher& m, std::vector<uint8_t>& allowed) const;
  struct Cached {
    uint64_t grammar = 0;
    Matcher::State state;
    std::vector<uint8_t> allowed;
    size_t count = 0;
    uint64_t used = 0;
  };
  static constexpr size_t kCacheEntries = 16;
  mutable std::vector<Cached> cache_;
  mutable uint64_t clock_ = 0;
};

}  // namespace ms::grammar
