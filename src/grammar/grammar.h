// A context-free grammar over bytes, the form constrained sampling runs:
// rules are alternatives of sequences, a sequence's symbols are byte sets
// (one byte out of a set of 256) or references to rules. JSON schemas
// compile to it (grammar/json_schema.h); grammar/matcher.h walks it.
//
// The layout is flat for the matcher: every alternative is a run of
// elements in `elems` closed by an End element, and a rule lists where its
// alternatives start. A parse position is an index into `elems`.
//
// Builder::finish() checks what the matcher relies on: no rule reaches
// itself without reading a byte (left recursion, e.g. a $ref loop), which
// would make expansion endless, and every rule derives some finite string
// (alternatives that cannot are dropped; a root that cannot is an error).
#pragma once
#include <bitset>
#include <stdexcept>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ms::grammar {

using ByteSet = std::bitset<256>;

struct Element {
  enum class Kind : uint8_t { Bytes, Rule, End };
  Kind kind = Kind::End;
  uint32_t arg = 0;  // Bytes: index into Grammar::sets; Rule: the rule's id
};

struct Grammar {
  std::vector<Element> elems;
  std::vector<std::vector<uint32_t>> rule_alts;  // per rule: start of each alternative in elems
  std::vector<std::string> rule_names;           // for messages and dumps
  std::vector<ByteSet> sets;
  uint32_t root = 0;
  // Unique per finished grammar in this process: caches keyed by parse
  // positions (TokenMask's) tell grammars apart by it, never by address.
  uint64_t serial = 0;

  size_t size() const { return elems.size(); }
  // Text form (GBNF-like), for tests and debugging.
  std::string dump() const;
};

// Limits on what a grammar may grow to (a hostile schema must not take the
// server's memory or time): past them, building throws GrammarError.
struct GrammarLimits {
  size_t max_elements = 200000;
  size_t max_rules = 50000;
};

// Building failed: the message names what (the schema compiler rewraps it
// with the keyword and the path).
struct GrammarError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One symbol of a sequence being built.
struct Sym {
  bool is_rule = false;
  uint32_t rule = 0;
  ByteSet set;
};
using Seq = std::vector<Sym>;

Sym byte_sym(uint8_t b);
Sym range_sym(uint8_t lo, uint8_t hi);
Sym set_sym(const ByteSet& s);
Sym rule_sym(uint32_t rule);
Seq literal(std::string_view bytes);
Seq operator+(Seq a, const Seq& b);
Seq operator+(Seq a, const Sym& b);

class Builder {
 public:
  explicit Builder(GrammarLimits limits = {}) : limits_(limits) {}

  // A new rule with no alternatives yet (so a rule can refer to itself).
  uint32_t declare(std::string name);
  void add_alt(uint32_t rule, const Seq& seq);
  // A new rule whose alternatives are `alts`.
  uint32_t rule(std::string name, const std::vector<Seq>& alts);
  // x{min,max} as a rule; max < 0: unbounded (x*, after min copies).
  uint32_t repeat(std::string name, const Seq& x, int64_t min, int64_t max);

  size_t elements() const { return n_elems_; }
  // Checks (see above) and returns the grammar; `root` is its start rule.
  Grammar finish(uint32_t root);

 private:
  void charge(size_t elems);
  GrammarLimits limits_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> alts_;
  size_t n_elems_ = 0;
};

}  // namespace ms::grammar
