#include "grammar/matcher.h"

#include <algorithm>

#include "util/error.h"

namespace ms::grammar {

namespace {
// Expansion recurses once per rule entered without reading a byte; the
// grammar has no left recursion (Builder::finish), so this is a backstop.
constexpr int kMaxExpandDepth = 4096;
}  // namespace

Matcher::Matcher(const Grammar& g, MatcherLimits limits) : g_(&g), limits_(limits) {
  for (uint32_t a : g.rule_alts.at(g.root)) {
    Stack t{a};
    expand(t, state_, 0);
  }
  normalize(state_);
}

// Brings a stack whose top may be a rule reference or an End to stacks whose
// tops are byte sets (or to the empty stack: complete), appending them to out.
void Matcher::expand(Stack& s, State& out, int depth) const {
  if (depth > kMaxExpandDepth) throw Error("grammar: expansion runs too deep (a left-recursive grammar?)");
  while (!s.empty() && g_->elems[s.back()].kind == Element::Kind::End) s.pop_back();
  if (s.empty() || g_->elems[s.back()].kind == Element::Kind::Bytes) {
    out.push_back(s);
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
  for (uint32_t a : g_->rule_alts[rule]) {
    Stack t = s;
    t.push_back(a);
    expand(t, out, depth + 1);
  }
}

void Matcher::normalize(State& s) const {
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  if (s.size() > limits_.max_stacks) s.resize(limits_.max_stacks);
}

void Matcher::step(const State& in, uint8_t byte, State& out) const {
  out.clear();
  for (const Stack& s : in) {
    if (s.empty()) continue;
    const Element& e = g_->elems[s.back()];
    if (!g_->sets[e.arg][byte]) continue;
    Stack t = s;
    t.back() += 1;
    expand(t, out, 0);
  }
  normalize(out);
}

bool Matcher::can_end(const State& s) {
  for (const Stack& st : s)
    if (st.empty()) return true;
  return false;
}

ByteSet Matcher::next_bytes(const State& s) const {
  ByteSet out;
  for (const Stack& st : s)
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
