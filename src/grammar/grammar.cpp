#include "grammar/grammar.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <unordered_map>

namespace ms::grammar {

Sym byte_sym(uint8_t b) {
  Sym s;
  s.set.set(b);
  return s;
}

Sym range_sym(uint8_t lo, uint8_t hi) {
  Sym s;
  for (unsigned b = lo; b <= hi; ++b) s.set.set(b);
  return s;
}

Sym set_sym(const ByteSet& set) {
  Sym s;
  s.set = set;
  return s;
}

Sym rule_sym(uint32_t rule) {
  Sym s;
  s.is_rule = true;
  s.rule = rule;
  return s;
}

Seq literal(std::string_view bytes) {
  Seq out;
  out.reserve(bytes.size());
  for (char c : bytes) out.push_back(byte_sym(static_cast<uint8_t>(c)));
  return out;
}

Seq operator+(Seq a, const Seq& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Seq operator+(Seq a, const Sym& b) {
  a.push_back(b);
  return a;
}

void Builder::charge(size_t elems) {
  n_elems_ += elems;
  if (n_elems_ > limits_.max_elements)
    throw GrammarError("the grammar would exceed " + std::to_string(limits_.max_elements) +
                       " elements (a schema this large, or with enums or bounds this large, is refused)");
}

uint32_t Builder::declare(std::string name) {
  if (names_.size() >= limits_.max_rules)
    throw GrammarError("the grammar would exceed " + std::to_string(limits_.max_rules) + " rules");
  names_.push_back(std::move(name));
  alts_.emplace_back();
  return static_cast<uint32_t>(names_.size() - 1);
}

void Builder::add_alt(uint32_t rule, const Seq& seq) {
  charge(seq.size() + 1);
  alts_.at(rule).push_back(seq);
}

uint32_t Builder::rule(std::string name, const std::vector<Seq>& alts) {
  const uint32_t r = declare(std::move(name));
  for (const Seq& a : alts) add_alt(r, a);
  return r;
}

uint32_t Builder::repeat(std::string name, const Seq& x_in, int64_t min, int64_t max) {
  Seq x = x_in;
  if (x.size() > 1) x = {rule_sym(rule(name + "-item", {x_in}))};
  // Charged before the copies are made: a huge bound fails here, not in memory.
  const int64_t extra = max < 0 ? 1 : max - min;
  charge(static_cast<size_t>(std::max<int64_t>(min, 0) + std::max<int64_t>(extra, 0)) * 3);
  Seq head;
  for (int64_t i = 0; i < min; ++i) head.push_back(x[0]);
  if (max < 0) {
    const uint32_t star = declare(name + "-star");
    add_alt(star, x + rule_sym(star));
    add_alt(star, {});
    return rule(name, {head + rule_sym(star)});
  }
  // O_k := x O_{k-1} | (empty): at most k more copies.
  uint32_t tail = rule(name + "-opt0", {Seq{}});
  for (int64_t k = 1; k <= max - min; ++k) tail = rule(name + "-opt" + std::to_string(k), {x + rule_sym(tail), Seq{}});
  return rule(name, {head + rule_sym(tail)});
}

Grammar Builder::finish(uint32_t root) {
  const size_t n = names_.size();
  if (root >= n) throw GrammarError("the grammar has no root rule");
  // Productive rules (they derive some finite string): a fixpoint.
  std::vector<char> productive(n, 0), nullable(n, 0);
  auto sym_ok = [&](const Sym& s, const std::vector<char>& flag, bool bytes_ok) {
    return s.is_rule ? flag[s.rule] != 0 : bytes_ok && s.set.any();
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& a : alts_[r]) {
        bool p = true, e = true;
        for (const Sym& s : a) {
          p = p && sym_ok(s, productive, true);
          e = e && sym_ok(s, nullable, false);
        }
        if (p && !productive[r]) productive[r] = 1, changed = true;
        if (e && !nullable[r]) nullable[r] = 1, changed = true;
      }
    }
  }
  // Left recursion: r reaches r through symbols that may read nothing. A
  // depth-first search with its own stack (a chain of 50k optional
  // properties must not take the thread's stack).
  std::vector<std::vector<uint32_t>> left(n);  // rules each rule may start with
  for (size_t r = 0; r < n; ++r)
    for (const Seq& a : alts_[r])
      for (const Sym& s : a) {
        if (!s.is_rule) break;
        left[r].push_back(s.rule);
        if (!nullable[s.rule]) break;
      }
  std::vector<char> colour(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;  // rule, next edge to follow
  for (size_t start = 0; start < n; ++start) {
    if (colour[start]) continue;
    path.push_back({static_cast<uint32_t>(start), 0});
    colour[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == left[r].size()) {
        colour[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t t = left[r][next++];
      if (colour[t] == 1)
        throw GrammarError("'" + names_[t] + "' refers to itself without reading any input (a $ref loop?)");
      if (colour[t] == 0) {
        colour[t] = 1;
        path.push_back({t, 0});
      }
    }
  }

  if (!productive[root])
    throw GrammarError("no finite value satisfies it (every way through it recurses forever or needs the impossible)");
  // Alternatives that can never finish are dropped: the matcher must never
  // walk into a path with no end.
  for (size_t r = 0; r < n; ++r) {
    std::vector<Seq> kept;
    for (Seq& a : alts_[r]) {
      bool p = true;
      for (const Sym& s : a) p = p && sym_ok(s, productive, true);
      if (p) kept.push_back(std::move(a));
    }
    alts_[r] = std::move(kept);
  }
  static std::atomic<uint64_t> next_serial{1};
  Grammar g;
  g.root = root;
  g.serial = next_serial.fetch_add(1);
  g.rule_names = names_;
  g.rule_alts.resize(n);
  std::unordered_map<ByteSet, uint32_t> set_ids;
  for (size_t r = 0; r < n; ++r) {
    for (const Seq& a : alts_[r]) {
      g.rule_alts[r].push_back(static_cast<uint32_t>(g.elems.size()));
      for (const Sym& s : a) {
        Element e;
        if (s.is_rule) {
          e.kind = Element::Kind::Rule;
          e.arg = s.rule;
        } else {
          e.kind = Element::Kind::Bytes;
          auto [it, fresh] = set_ids.emplace(s.set, static_cast<uint32_t>(g.sets.size()));
          if (fresh) g.sets.push_back(s.set);
          e.arg = it->second;
        }
        g.elems.push_back(e);
      }
      g.elems.push_back(Element{Element::Kind::End, 0});
    }
  }
  return g;
}

namespace {
std::string set_text(const ByteSet& s) {
  if (s.count() == 1) {
    for (unsigned b = 0; b < 256; ++b)
      if (s[b]) {
        if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') return std::string("\"") + static_cast<char>(b) + "\"";
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02X", b);
        return std::string("\"") + buf + "\"";
      }
  }
  std::string out = "[";
  for (unsigned b = 0; b < 256;) {
    if (!s[b]) {
      ++b;
      continue;
    }
    unsigned e = b;
    while (e + 1 < 256 && s[e + 1]) ++e;
    char buf[16];
    if (e == b) std::snprintf(buf, sizeof buf, "\\x%02X", b);
    else std::snprintf(buf, sizeof buf, "\\x%02X-\\x%02X", b, e);
    out += buf;
    b = e + 1;
  }
  return out + "]";
}
}  // namespace

std::string Grammar::dump() const {
  std::string out;
  for (size_t r = 0; r < rule_alts.size(); ++r) {
    out += rule_names[r] + " ::=";
    for (size_t i = 0; i < rule_alts[r].size(); ++i) {
      if (i) out += " |";
      for (uint32_t p = rule_alts[r][i]; elems[p].kind != Element::Kind::End; ++p) {
        const Element& e = elems[p];
        out += " " + (e.kind == Element::Kind::Rule ? rule_names[e.arg] : set_text(sets[e.arg]));
      }
      if (elems[rule_alts[r][i]].kind == Element::Kind::End) out += " ()";
    }
    out += "\n";
  }
  return out;
}

}  // namespace ms::grammar
