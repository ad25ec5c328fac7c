#include "grammar/matcher.h"

#include <algorithm>

#include "util/error.h"

namespace ms::grammar {

namespace {
// Expansion recurses once per rule entered without reading a byte; the
// grammar has no left recursion (Builder::finish), so this is a backstop.
constexpr int kMaxExpandDepth = 4096;
}  // namespace

void StackSet::normalize(size_t max_stacks) {
  std::vector<uint32_t> order(size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  auto less = [&](uint32_t a, uint32_t b) {
    const Stack x = (*this)[a], y = (*this)[b];
    return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
  };
  std::sort(order.begin(), order.end(), less);
  StackSet out;
  out.data_.reserve(data_.size());
  out.begin_.reserve(begin_.size());
  for (size_t k = 0; k < order.size() && out.size() < max_stacks; ++k) {
    const Stack s = (*this)[order[k]];
    if (!out.empty()) {
      const Stack last = out[out.size() - 1];
      if (std::equal(s.begin(), s.end(), last.begin(), last.end())) continue;
    }
    out.push(s);
  }
  *this = std::move(out);
}

Matcher::Matcher(const Grammar& g, MatcherLimits limits) : g_(&g), limits_(limits) {
  Scratch scratch;
  for (uint32_t a : g.rule_alts.at(g.root)) {
    std::vector<uint32_t> t{a};
    expand(t, state_, 0, scratch);
  }
  state_.normalize(limits_.max_stacks);
}

// Brings a stack whose top may be a rule reference or an End to stacks whose
// tops are byte sets (or to the empty stack: complete), appending them to out.
void Matcher::expand(std::vector<uint32_t>& s, State& out, int depth, Scratch& scratch) const {
  if (depth > kMaxExpandDepth) throw Error("grammar: expansion runs too deep (a left-recursive grammar?)");
  while (!s.empty() && g_->elems[s.back()].kind == Element::Kind::End) s.pop_back();
  if (s.empty() || g_->elems[s.back()].kind == Element::Kind::Bytes) {
    out.push(s);
    return;
  }
  const uint32_t pos = s.back();
  const uint32_t rule = g_->elems[pos].arg;
  // The caller continues after the reference; a continuation that is the end
  // of its alternative is dropped now, so right recursion (x*) keeps the
  // stack flat.
  s.back() = pos + 1;
  while (!s.empty() && g_->elems[s.back()].kind == Element::Kind::End) s.pop_back();
  if (s.size() >= limits_.max_depth) return;  // nested too deep: this path is dropped
  while (scratch.size() <= static_cast<size_t>(depth) + 1) scratch.emplace_back();
  for (uint32_t a : g_->rule_alts[rule]) {
    // Each alternative from a copy of s: the expansion pops what it ends.
    std::vector<uint32_t>& t = scratch[static_cast<size_t>(depth) + 1];
    t.assign(s.begin(), s.end());
    t.push_back(a);
    expand(t, out, depth + 1, scratch);
  }
}

void Matcher::step(const State& in, uint8_t byte, State& out) const {
  out.clear();
  Scratch scratch(1);
  for (const StackSet::Stack s : in) {
    if (s.empty()) continue;
    const Element& e = g_->elems[s.back()];
    if (!g_->sets[e.arg][byte]) continue;
    std::vector<uint32_t>& t = scratch[0];
    t.assign(s.begin(), s.end());
    t.back() += 1;
    expand(t, out, 0, scratch);
  }
  out.normalize(limits_.max_stacks);
}

bool Matcher::can_end(const State& s) {
  for (const StackSet::Stack st : s)
    if (st.empty()) return true;
  return false;
}

ByteSet Matcher::next_bytes(const State& s) const {
  ByteSet out;
  for (const StackSet::Stack st : s)
    if (!st.empty()) out |= g_->sets[g_->elems[st.back()].arg];
  return out;
}

bool Matcher::advance(uint8_t byte) {
  State next;
  step(state_, byte, next);
  if (next.empty()) return false;
  state_ = std::move(next);
  return true;
}

bool Matcher::advance(std::string_view bytes) {
  State cur = state_, next;
  for (char c : bytes) {
    step(cur, static_cast<uint8_t>(c), next);
    if (next.empty()) return false;
    std::swap(cur, next);
  }
  state_ = std::move(cur);
  return true;
}

}  // namespace ms::grammar
