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
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace ms::grammar {

struct MatcherLimits {
  size_t max_depth = 512;   // positions per stack (nesting of the value)
  size_t max_stacks = 256;  // alternatives followed at once
};

class Matcher {
 public:
  using Stack = std::vector<uint32_t>;
  using State = std::vector<Stack>;

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
  void expand(Stack& s, State& out, int depth) const;
  void normalize(State& s) const;

  const Grammar* g_;
  MatcherLimits limits_;
  State state_;
};

}  // namespace ms::grammar
