// Walks a grammar (grammar/grammar.h) one byte at a time: which bytes may
// come next, and whether what was read so far is a complete string of the
// grammar.
//
// The state is the set of parse stacks still alive (a pushdown automaton
// run on every alternative at once, as llama.cpp's grammar sampler does):
// each stack holds parse positions, its top a byte set waiting for the next
// byte; an empty stack means the input so far is complete. Nesting and
// ambiguity are bounded (Limits): a stack deeper than max_depth is dropped
// (the value's nesting is capped, the output stays valid) and at most
// max_stacks stacks are kept. Every stack kept can still be completed, since
// the grammar's rules are all productive (Builder::finish).
#pragma once
#include <cstdint>
#include <deque>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace ms::grammar {

// A matcher's state: a set of parse stacks stored flat, one buffer for all
// of them (a step makes hundreds of stacks where alternatives are open: one
// allocation each cost more than the step itself). Stack i is the positions
// data_[begin_[i] .. begin_[i + 1]), its top last.
class StackSet {
 public:
  using Stack = std::span<const uint32_t>;

  // (A moved-from set has no begin_ at all: it reads as empty.)
  size_t size() const { return begin_.empty() ? 0 : begin_.size() - 1; }
  bool empty() const { return size() == 0; }
  Stack operator[](size_t i) const { return Stack(data_.data() + begin_[i], begin_[i + 1] - begin_[i]); }
  void clear() {
    data_.clear();
    begin_.assign(1, 0);
  }
  void push(Stack s) {
    if (begin_.empty()) begin_.push_back(0);
    data_.insert(data_.end(), s.begin(), s.end());
    begin_.push_back(static_cast<uint32_t>(data_.size()));
  }
  // Sorts the stacks (lexicographically, a shorter prefix first), drops
  // duplicates, and keeps the first max_stacks.
  void normalize(size_t max_stacks);

  class Iterator {
   public:
    Iterator(const StackSet* set, size_t i) : set_(set), i_(i) {}
    Stack operator*() const { return (*set_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const StackSet* set_;
    size_t i_;
  };
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, size()); }

  // Normalized sets are equal exactly when their buffers are.
  bool operator==(const StackSet& o) const { return begin_ == o.begin_ && data_ == o.data_; }
  bool operator<(const StackSet& o) const { return begin_ != o.begin_ ? begin_ < o.begin_ : data_ < o.data_; }

 private:
  std::vector<uint32_t> data_;
  std::vector<uint32_t> begin_{0};
};

struct MatcherLimits {
  size_t max_depth = 512;   // positions per stack (nesting of the value)
  size_t max_stacks = 256;  // alternatives followed at once
};

class Matcher {
 public:
  using State = StackSet;

  explicit Matcher(const Grammar& g, MatcherLimits limits = {});

  // Reads one byte / a run of bytes; false (and the state unchanged) when
  // the grammar does not allow it.
  bool advance(uint8_t byte);
  bool advance(std::string_view bytes);
  // What was read is a complete string of the grammar.
  bool can_end() const { return can_end(state_); }
  // Some byte may follow.
  bool can_continue() const { return next_bytes(state_).any(); }
  ByteSet next_bytes() const { return next_bytes(state_); }

  const Grammar& grammar() const { return *g_; }
  const State& state() const { return state_; }

  // The pure steps, for walks over many candidate continuations (the token
  // mask): `out` gets the state after `byte` (empty: not allowed).
  void step(const State& in, uint8_t byte, State& out) const;
  static bool can_end(const State& s);
  ByteSet next_bytes(const State& s) const;

 private:
  // Work stacks for expand, one per level of its recursion (reused within a
  // step; a deque, so growing it leaves the levels in use where they are).
  using Scratch = std::deque<std::vector<uint32_t>>;
  void expand(std::vector<uint32_t>& s, State& out, int depth, Scratch& scratch) const;

  const Grammar* g_;
  MatcherLimits limits_;
  State state_;
};

}  // namespace ms::grammar
